"""The rule catalog: one small class per rule, its code, name, message and documentation.

Detection lives in `analysis/ordering.py` (it reads the whole prompt at once); a rule here says what a
finding is called, how it reads and how severe it is. `docs/rules.md` and `promptlint --explain`
are generated from these docstrings.
"""

from __future__ import annotations

import inspect

from .rule import LEVELS, Rule

__all__ = ["LEVELS", "RULES", "Rule", "explain"]


class DynamicBeforeStatic(Rule):
    """## What it does
    Finds a value that changes between requests (a timestamp, a user id, a random number, the
    question, documents retrieved for this request) placed before static text of the same
    prompt, or a value that changes on every
    request placed before the conversation history. Only when the static text pushed out of the
    prefix is worth caching: at least `min-lost-tokens` cl100k tokens (default 64, about a
    paragraph; a label such as "Answer:" is not; a count such as `{max_items}` or a setting such as
    `{language}` inside a paragraph does not split it). Severity is one step lower when fewer than four
    times that many tokens are lost. The prompt is followed across functions, classes and modules
    of the files linted, and through the project's own wrappers around a client. A template chosen
    between variants by a conditional (`EN if lang == "en" else ZH`, same slots) is reported in
    each variant that has the value before that much text. Not reported: a value in a turn appended
    after the conversation history (that turn is new on every request anyway), an agent's tool
    catalogue (`{tool_description}`, `{tool_info}`, `{formatted_actions}`: fixed per agent), an
    `agent_scratchpad` placeholder (this request's own steps); a constant given in
    `partial_variables=` and a string constant repeated (`POLICY * 10`) count as static text.

    ## Why is this bad?
    Prefix caches (radixgate's radix cache, vLLM, SGLang, OpenAI and Anthropic prompt caching)
    reuse only the tokens *before* the first difference. One changing value at the top makes
    every token after it a miss, so the static instructions are recomputed on every request;
    a timestamp ahead of the history makes every turn recompute the whole conversation.

    ## Example
    ```python
    system = f"Today is {datetime.now():%Y-%m-%d %H:%M}. User {user_id}.\\n" + INSTRUCTIONS
    ```

    ## Use instead
    ```python
    system = INSTRUCTIONS + f"\\nToday is {datetime.now():%Y-%m-%d %H:%M}. User {user_id}."
    ```
    Or build the prompt with `radixgate.Prompt`, which renders static segments first.
    """

    code = "KV101"
    name = "dynamic-before-static"
    message = "{label} before {what}"
    fix = "unsafe"


class DynamicInSystemPrompt(Rule):
    """## What it does
    Finds a dynamic value inside the system prompt when static content (few-shot examples,
    fixed instructions in later messages) follows the system prompt.

    ## Why is this bad?
    The system prompt is the head of every request. A value that changes in it invalidates the
    cache for everything after it, including messages that never change.

    ## Example
    ```python
    messages = [{"role": "system", "content": RULES + f"\\nUser: {user.id}"}, *FEW_SHOT, question]
    ```

    ## Use instead
    ```python
    messages = [{"role": "system", "content": RULES}, *FEW_SHOT,
                {"role": "user", "content": f"(user {user.id}) {question}"}]
    ```
    """

    code = "KV102"
    name = "dynamic-in-system-prompt"
    message = "{label} inside the system prompt, before {what}"


class TurnBeforeDocuments(Rule):
    """## What it does
    Finds the question or other per-turn content placed before shared documents, and dynamic
    values placed before them. A document is shared when it is the same across requests: read
    from a file, a module constant, a cached value. Per-query retrieval (`similarity_search(query)`,
    a retriever's output) and documents known only by a name such as `context` are not. The turn must
    change per request (the question, a timestamp) or be the history; a warning at most.

    ## Why is this bad?
    Documents are reused across many requests; the question changes every time. With the
    question first, the documents are never a shared prefix and are recomputed on each request.

    ## Example
    ```python
    prompt = f"Question: {question}\\n\\nDocument:\\n{document}"
    ```

    ## Use instead
    ```python
    prompt = f"Document:\\n{document}\\n\\nQuestion: {question}"
    ```
    """

    code = "KV103"
    name = "turn-before-documents"
    message = "{label} before shared documents ({doc})"
    severity_cap = "warning"


class DynamicBeforeCacheBreakpoint(Rule):
    """## What it does
    Finds a dynamic value placed before an Anthropic `cache_control` breakpoint.

    ## Why is this bad?
    A breakpoint asks the provider to cache everything up to it. A value that changes before the
    breakpoint means the cached block differs on every request: you pay the cache-write premium
    and never get a read.

    ## Example
    ```python
    system=[{"type": "text", "text": f"{now}\\n{MANUAL}", "cache_control": {"type": "ephemeral"}}]
    ```

    ## Use instead
    ```python
    system=[{"type": "text", "text": MANUAL, "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": f"Current time: {now}"}]
    ```
    """

    code = "KV104"
    name = "dynamic-before-cache-breakpoint"
    message = "{label} before a `cache_control` breakpoint: the cached block changes every time"


class UnsortedJsonDumps(Rule):
    """## What it does
    Finds `json.dumps` of tool definitions or schemas without `sort_keys=True`, when the text
    feeds a prompt prefix.

    ## Why is this bad?
    Dictionaries serialize in insertion order. Schemas assembled from several places (a tool
    registry, a merge of defaults) can change key order between processes or versions, and one
    reordered key changes every token after it. Not reported where the code fixes the order: a
    pydantic model's schema or dump (`Model.model_json_schema()`, `.schema()`, `.model_dump()`, a
    `*json_schema` builder, also through a local alias) or a comprehension over a mapping's items.

    ## Example
    ```python
    system = "Tools:\\n" + json.dumps(tools)
    ```

    ## Use instead
    ```python
    system = "Tools:\\n" + json.dumps(tools, sort_keys=True)
    ```
    """

    code = "KV201"
    name = "unsorted-json-dumps"
    message = "{label}: key order is not canonical"
    fix = "safe"
    severity_floor = "warning"


class UnorderedIteration(Rule):
    """## What it does
    Finds iteration over a `set` (or a dict built from one) whose order reaches a prompt.

    ## Why is this bad?
    Set order depends on string hashing, which Python randomizes per process
    (`PYTHONHASHSEED`). Every worker renders the same tools or labels in a different order, so
    workers never share a cached prefix.

    ## Example
    ```python
    system = "You can use: " + ", ".join({"search", "calculator", "weather"})
    ```

    ## Use instead
    ```python
    system = "You can use: " + ", ".join(sorted({"search", "calculator", "weather"}))
    ```
    """

    code = "KV202"
    name = "unordered-iteration"
    message = "{label} feeds the prompt in hash order, which changes per process"
    fix = "safe"
    severity_floor = "warning"


class UnseededShuffle(Rule):
    """## What it does
    Finds few-shot examples or other prompt content shuffled or sampled with the unseeded
    global random generator, when stable content follows them.

    ## Why is this bad?
    A different order or selection per request means a different prefix per request: the
    examples, and everything after them, are recomputed every time. A global `random.seed(42)`
    fixes the sequence of a run, not each draw: every call still draws anew, and the message names
    the seed it saw instead of saying "unseeded".

    ## Example
    ```python
    random.shuffle(EXAMPLES)
    messages = [system, *EXAMPLES, question]
    ```

    ## Use instead
    ```python
    examples = random.Random(42).sample(EXAMPLES, k=len(EXAMPLES))  # once, at import
    messages = [system, *examples, question]
    ```
    """

    code = "KV203"
    name = "unseeded-shuffle"
    message = "{label} reorders prompt content on every request"
    severity_floor = "error"


class DirectoryOrder(Rule):
    """## What it does
    Finds documents read in directory-listing order (`os.listdir`, `os.scandir`, `glob.glob`,
    `Path.iterdir`, `Path.glob`) without `sorted(...)`.

    ## Why is this bad?
    Directory order is whatever the file system returns; it differs between machines, file
    systems and after files are rewritten. Documents in a different order are a different
    prefix.

    ## Example
    ```python
    docs = [open(os.path.join(d, f)).read() for f in os.listdir(d)]
    ```

    ## Use instead
    ```python
    docs = [open(os.path.join(d, f)).read() for f in sorted(os.listdir(d))]
    ```
    """

    code = "KV204"
    name = "directory-order"
    message = "{label}: documents enter the prompt in file-system order"
    fix = "safe"
    severity_floor = "warning"


class ShortStaticPrefix(Rule):
    """## What it does
    Finds prompts sent to a hosted provider whose static prefix is shorter than the provider's
    minimum cacheable length (`min-static-tokens`, default 1,024: OpenAI's and Anthropic's
    minimum). Counts cl100k tokens. Not selected by default: self-hosted prefix caches such as
    radixgate's cache any prefix; select it with `--extend-select KV301`.

    ## Why is this bad?
    Below the minimum, the provider caches nothing at all, whatever the hit rate could be.

    ## Example
    ```python
    client.chat.completions.create(model=m, messages=[
        {"role": "system", "content": "You are helpful."}, {"role": "user", "content": q}])
    ```

    ## Use instead
    Put all static material (instructions, tool schemas, examples, reference text) first so the
    shared prefix reaches the minimum, or accept that this call is not cached.
    """

    code = "KV301"
    name = "short-static-prefix"
    message = "static prefix is {tokens:,} tokens, below the {minimum:,}-token minimum for caching"
    default = False
    severity_floor = "info"


class MeasuredWaste(Rule):
    """## What it does
    Reports a prompt template whose measured hit rate (from the gateway's `/v1/prompt_stats`,
    given with `--stats`) is far below what its static prefix allows, at its source line, when
    no static finding explains it.

    ## Why is this bad?
    The gateway measured the waste: these are prompt tokens recomputed that could have been
    served from the cache. The cause is one promptlint could not see statically (a value from
    another module, a database row, a prompt assembled at run time).

    ## Example
    A template with 1,200 static prefix tokens and a 9% hit rate over 500 requests.

    ## Use instead
    Find what changes at the head of that prompt (log two rendered prompts and diff them) and
    move it after the static part, or build the prompt with `radixgate.Prompt`.
    """

    code = "KV901"
    name = "measured-waste"
    message = "measured hit rate {hit_rate:.0%} over {requests:,} requests"
    severity_floor = "warning"


class MeasuredDrift(Rule):
    """## What it does
    Reports, at a template's source line, where the gateway measured its requests diverging from
    each other (the drift in `/v1/prompt_stats`, given with `--stats`) when that is in a part of the
    prompt that should be the same every time: the tools, the system message, or inside the static
    prefix the SDK declared. It names the segment, the token, how many requests, and the varying
    text. Measured, never a guess: a static finding at the same call site is confirmed by it, and one
    the measurement contradicts (enough requests compared, none diverging early) is demoted to `info`.

    ## Why is this bad?
    Every request recomputes the prompt from that token on. The cause may be one no static rule can
    see: a system prompt read from a file the app rewrites, a value from a service or a database.

    ## Example
    19 of 20 requests of `answer` diverge at token 9, in the system message:
    `'Ticket 1043 of the day'` (was `'Ticket 1042 of the day'`).

    ## Use instead
    Keep the varying value out of the system message and the tools: send it after the static part
    (in the user message), or build the prompt with `radixgate.Prompt`.
    """

    code = "KV902"
    name = "measured-drift"
    message = "measured: {requests} of {compared} requests of `{template}` diverge at token {token}, in {segment}"
    severity_floor = "warning"


class SyntaxFailure(Rule):
    """## What it does
    Reports a file promptlint could not analyze: it is not valid Python (a syntax error, a null
    byte) or cannot be read as UTF-8. The finding names the line and the parser's message; the other
    files are linted as usual. It is reported whatever `select` and `ignore` say, as ruff's E999 is.

    ## Why is this bad?
    A file that does not parse is not checked at all: its prompts may break the cache unseen.

    ## Example
    ```python
    def build(question:
        return f"{question}"
    ```

    ## Use instead
    ```python
    def build(question):
        return f"{question}"
    ```
    """

    code = "E999"
    name = "syntax-error"
    message = "{detail}"
    severity_floor = "error"


RULES: dict[str, Rule] = {
    cls.code: cls()
    for cls in (
        DynamicBeforeStatic,
        DynamicInSystemPrompt,
        TurnBeforeDocuments,
        DynamicBeforeCacheBreakpoint,
        UnsortedJsonDumps,
        UnorderedIteration,
        UnseededShuffle,
        DirectoryOrder,
        ShortStaticPrefix,
        MeasuredWaste,
        MeasuredDrift,
        SyntaxFailure,
    )
}


def explain(code: str) -> str:
    """`promptlint --explain CODE`: the rule's documentation as Markdown."""
    rule = RULES[code.upper()]
    doc = inspect.cleandoc(type(rule).__doc__ or "")
    return f"# {rule.name} ({rule.code})\n\n{doc}\n"
