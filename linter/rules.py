"""The rule catalog: one small class per rule, its code, name, message and documentation.

Detection lives in `analysis/ordering.py` (it reads the whole prompt at once); a rule here says what a
finding is called, how it reads and how severe it is. `docs/rules.md` and `promptlint --explain`
are generated from these docstrings.
"""

from __future__ import annotations

import inspect
from typing import ClassVar

from .analysis.shape import Change

#: Severities, lowest first (`--fail-on` and `[tool.promptlint] fail-on` name one of them).
LEVELS = ("info", "warning", "error")

_SEVERITY = {
    Change.PER_REQUEST: "error",
    Change.PER_SESSION: "warning",
    Change.PER_DAY: "info",
    Change.PER_PROCESS: "info",
    Change.NEVER: "info",
}


class Rule:
    """A rule: `code` (KVnnn), kebab-case `name`, `message` (a format template)."""

    code: ClassVar[str]
    name: ClassVar[str]
    message: ClassVar[str]
    #: Whether the rule runs without being selected explicitly.
    default: ClassVar[bool] = True
    #: "safe", "unsafe" or None: the kind of fix `--fix` / `--unsafe-fixes` may apply.
    fix: ClassVar[str | None] = None
    severity_floor: ClassVar[str | None] = None
    #: The highest level the rule reports at (its precision on real code does not earn more).
    severity_cap: ClassVar[str | None] = None

    def severity(self, change: Change | None, tokens: int | None = None, threshold: int = 64) -> str:
        """`error` for values that change per request, `warning` per session, `info` slower; one
        step lower when the static text pushed out of the prefix is under four times `threshold`
        tokens, so a short paragraph lost ranks below a whole manual. `[tool.promptlint.severity]`
        overrides it per rule."""
        if self.severity_floor is not None:
            return self.severity_floor
        level = _SEVERITY.get(change, "warning") if change is not None else "warning"
        if tokens is not None and tokens < 4 * threshold:
            level = {"error": "warning", "warning": "info"}.get(level, level)
        if self.severity_cap is not None and LEVELS.index(level) > LEVELS.index(self.severity_cap):
            level = self.severity_cap
        return level

    def format(self, **fields: object) -> str:
        return self.message.format(**fields)


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
        SyntaxFailure,
    )
}


def explain(code: str) -> str:
    """`promptlint --explain CODE`: the rule's documentation as Markdown."""
    rule = RULES[code.upper()]
    doc = inspect.cleandoc(type(rule).__doc__ or "")
    return f"# {rule.name} ({rule.code})\n\n{doc}\n"
