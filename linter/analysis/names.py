"""What names and called functions say about a value: the taint sources and the naming lexicon.

Two kinds of evidence, in decreasing strength:
1. a call to a known source (`datetime.now()`, `uuid.uuid4()`, `random.random()`, ...),
   matched on the fully qualified name after resolving the module's imports;
2. the words of an identifier (`user_id`, `question`, `chat_history`, `retrieved_docs`),
   used only where the code gives nothing better (parameters, attributes, unknown calls).
"""

from __future__ import annotations

import ast
import functools
import re

from .shape import Change, Kind, child_nodes

#: Fully qualified calls whose result is a clock reading, with how often it changes.
TIME_CALLS: dict[str, Change] = {
    "datetime.datetime.now": Change.PER_REQUEST,
    "datetime.datetime.utcnow": Change.PER_REQUEST,
    "datetime.datetime.today": Change.PER_REQUEST,
    "datetime.date.today": Change.PER_DAY,
    "time.time": Change.PER_REQUEST,
    "time.time_ns": Change.PER_REQUEST,
    "time.monotonic": Change.PER_REQUEST,
    "time.perf_counter": Change.PER_REQUEST,
    "time.ctime": Change.PER_REQUEST,
    "time.asctime": Change.PER_REQUEST,
    "time.localtime": Change.PER_REQUEST,
    "time.gmtime": Change.PER_REQUEST,
    "time.strftime": Change.PER_REQUEST,
    "pendulum.now": Change.PER_REQUEST,
    "pendulum.today": Change.PER_DAY,
    "arrow.now": Change.PER_REQUEST,
    "arrow.utcnow": Change.PER_REQUEST,
    "pandas.Timestamp.now": Change.PER_REQUEST,
    "pendulum.yesterday": Change.PER_DAY,
    "pendulum.tomorrow": Change.PER_DAY,
    "humanize.naturaltime": Change.PER_REQUEST,
    "humanize.naturaldelta": Change.PER_REQUEST,
    "humanize.precisedelta": Change.PER_REQUEST,
    "humanize.naturalday": Change.PER_DAY,
    "humanize.naturaldate": Change.PER_DAY,
}

#: Methods whose result reads the clock: `arrow.get(mtime).humanize()` ("3 hours ago"),
#: pendulum's `diff_for_humans()`.
CLOCK_METHODS = frozenset({"humanize", "diff_for_humans", "from_now", "fromNow"})
#: Methods that retrieve documents for one query: their result is per-query, never a shared block.
RETRIEVAL_METHODS = frozenset(
    {
        "similarity_search",
        "asimilarity_search",
        "similarity_search_with_score",
        "similarity_search_with_relevance_scores",
        "max_marginal_relevance_search",
        "get_relevant_documents",
        "aget_relevant_documents",
        "retrieve",
        "aretrieve",
        "search",
    }
)

#: Calls that take an explicit time argument at this position: with it they are not clocks.
EXPLICIT_TIME_ARG = {"time.strftime": 1, "time.ctime": 0, "time.asctime": 0, "time.localtime": 0, "time.gmtime": 0}
#: humanize's functions are relative to now whatever their argument, so they are clocks too.
RELATIVE_TO_NOW = frozenset(q for q in TIME_CALLS if q.startswith("humanize."))

ID_CALLS = ("uuid.uuid1", "uuid.uuid4", "uuid.uuid7", "os.urandom", "secrets.")
RANDOM_VALUE_CALLS = (
    "random.random",
    "random.randint",
    "random.uniform",
    "random.randrange",
    "random.getrandbits",
    "random.gauss",
    "numpy.random.rand",
    "numpy.random.randint",
    "numpy.random.random",
)
#: Calls that pick or reorder items of a collection at random (KV203 when unseeded).
RANDOM_PICK_CALLS = (
    "random.sample",
    "random.choice",
    "random.choices",
    "numpy.random.choice",
    "numpy.random.permutation",
)
RANDOM_SHUFFLE_CALLS = ("random.shuffle", "numpy.random.shuffle")
PROCESS_CALLS = ("os.getpid", "socket.gethostname", "threading.get_ident")
#: Calls that list a directory in file-system order (KV204 unless sorted).
LISTDIR_CALLS = ("os.listdir", "os.scandir", "os.walk", "glob.glob", "glob.iglob")
LISTDIR_METHODS = frozenset({"iterdir", "glob", "rglob"})
#: strftime codes that change within a day.
_TIME_OF_DAY = re.compile(r"%[HIMSpfXcsTRrk]")

_SPLIT = re.compile(r"[^a-z0-9]+|(?<=[a-z])(?=[0-9])")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")

_ID_OWNERS = frozenset(
    {
        "user",
        "session",
        "customer",
        "account",
        "tenant",
        "conversation",
        "chat",
        "client",
        "member",
        "org",
        "thread",
        "visitor",
        "patient",
        "employee",
        "player",
        "student",
    }
)
_REQUEST_ID_OWNERS = frozenset({"request", "req", "trace", "run", "message", "call", "event"})
_USER_WORDS = frozenset({"user", "username", "userid", "uid", "customer", "email", "sessionid", "userinfo", "tenant"})
_TIME_WORDS = frozenset({"now", "timestamp", "time", "datetime", "ts", "clock"})
_DAY_WORDS = frozenset({"today", "date"})
_TURN_WORDS = frozenset({"question", "query", "input", "utterance", "ask", "inquiry", "scratchpad"})
#: What a person wrote, when the name says who: `user_description`, `human_feedback`, `user_request`.
_AUTHORED_WORDS = frozenset({"message", "msg", "text", "description", "request", "content", "feedback"})
_HISTORY_WORDS = frozenset(
    {"history", "histories", "conversation", "conversations", "transcript", "memory", "memories", "turns"}
)
_DOC_WORDS = frozenset(
    {
        "doc",
        "docs",
        "document",
        "documents",
        "context",
        "contexts",
        "passage",
        "passages",
        "chunk",
        "chunks",
        "retrieved",
        "article",
        "articles",
        "snippets",
        "knowledge",
        "sources",
        "references",
        "excerpts",
        "corpus",
    }
)
#: Trailing words that only say how a value is written: `now_str`, `timestamp_utc`.
_MODIFIERS = frozenset({"str", "string", "iso", "formatted", "utc", "local", "kst", "gmt"})
#: Words that make an identifier name a fixed thing even if it also names a dynamic one.
_STATIC_WORDS = frozenset(
    {
        "format",
        "instructions",
        "template",
        "prompt",
        "system",
        "schema",
        "tools",
        "examples",
        "persona",
        "rules",
        "style",
        "type",
        "types",
        "name",
        "names",
        "field",
        "fields",
        "model",
        "count",
        "len",
        "max",
        "min",
        "limit",
        "key",
        "keys",
        "path",
        "dir",
        "url",
        "zone",
        "tz",
        "timezone",
        "format_instructions",
        "fmt",
        "label",
        "prefix",
    }
)


@functools.lru_cache(maxsize=8192)
def words(identifier: str) -> tuple[str, ...]:
    """`currentUserId` / `current_user_id` -> ("current", "user", "id")."""
    spaced = _CAMEL.sub("_", identifier)
    return tuple(w for w in _SPLIT.split(spaced.lower()) if w)


@functools.lru_cache(maxsize=4096)
def classify_name(identifier: str) -> tuple[Kind, Change] | None:
    """What an identifier (or dotted chain of them) suggests about its value, or None."""
    if identifier.startswith("__") and identifier.endswith("__"):
        return None  # `__doc__`, `__name__`: the module's own fixed text
    ws = words(identifier)
    while len(ws) > 1 and ws[-1] in _MODIFIERS:  # now_kst_str -> now
        ws = ws[:-1]
    if not ws:
        return None
    tail = ws[-3:]
    last = ws[-1]
    if len(ws) > 1 and (ws[-2] in _ID_OWNERS or ws[-2] == "user") and last in ("name", "email", "handle", "username"):
        return Kind.ID, Change.PER_SESSION
    if last in _STATIC_WORDS or (len(ws) > 1 and ws[-2] in ("format", "max", "num")):
        return None
    if last in ("id", "ids", "uuid") or last.endswith("id") and last[:-2] in _ID_OWNERS:
        owner = last[:-2] if last not in ("id", "ids", "uuid") else ws[-2] if len(ws) > 1 else ""
        if owner in _REQUEST_ID_OWNERS:
            return Kind.ID, Change.PER_REQUEST
        if owner in _ID_OWNERS:
            return Kind.ID, Change.PER_SESSION
        return None
    if last in _USER_WORDS:
        return Kind.ID, Change.PER_SESSION
    if last in _DAY_WORDS:
        return Kind.TIME, Change.PER_DAY
    if last in _TIME_WORDS and "zone" not in ws:
        return Kind.TIME, Change.PER_REQUEST
    if set(tail) & _HISTORY_WORDS:
        return Kind.HISTORY, Change.PER_SESSION
    if last in _TURN_WORDS or (last in _AUTHORED_WORDS and ("user" in ws or "human" in ws)):
        return Kind.TURN, Change.PER_REQUEST
    if last in _DOC_WORDS or (len(ws) > 1 and ws[-2] in _DOC_WORDS and last in ("text", "str")):
        # A name alone says "document", not "shared": RAG context is usually retrieved per query.
        return Kind.DOC, Change.PER_REQUEST
    return None


_SETTING_HEADS = frozenset({"max", "min", "num", "top"})
_SETTING_TAILS = frozenset({"count", "limit", "k", "n"})


@functools.lru_cache(maxsize=4096)
def is_count_setting(identifier: str) -> bool:
    """`max_sections`, `num_queries`, `top_k`, `k`: a count set per deployment or per task, a few
    characters that do not split the instructions around them into separate blocks."""
    ws = words(identifier)
    return bool(ws) and (ws[0] in _SETTING_HEADS or ws[-1] in _SETTING_TAILS)


def is_self(node: ast.expr) -> bool:
    """`self` or `cls`: the receiver of a method's own attributes."""
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def strftime_change(fmt: str) -> Change:
    """How often `strftime(fmt)` of the current time changes."""
    return Change.PER_REQUEST if _TIME_OF_DAY.search(fmt) or not fmt.strip() else Change.PER_DAY


@functools.lru_cache(maxsize=8192)
def matches(qualname: str, names: tuple[str, ...]) -> bool:
    """Whether `qualname` is one of `names` (an entry ending in "." matches a whole module)."""
    return any(qualname == n or (n.endswith(".") and qualname.startswith(n)) for n in names)


#: LangChain's standard placeholders filled from the chain's own setup (its output parser, its
#: tools, its database), the same for every request unless the code is seen filling them per request.
DEPLOYMENT_SLOTS = frozenset(
    {"format_instructions", "tools", "tool_names", "tool_descriptions", "table_info", "dialect", "top_k"}
)


_TOOL_HEADS = frozenset({"tool", "tools", "plugin", "plugins", "specs", "endpoint", "endpoints"})
#: Catalogues named by their last word (`formatted_actions`, `available_tools`): the agent's fixed set.
_CATALOGUES = frozenset({"tools", "actions", "plugins"})
_CATALOGUE_TAILS = frozenset(
    {
        "description",
        "desc",
        "info",
        "str",
        "string",
        "list",
        "lists",
        "dic",
        "dict",
        "descriptions",
        "descs",
        "names",
        "specs",
        "catalog",
        "catalogue",
        "docs",
        "schemas",
    }
)
_SETTING_WORDS = frozenset({"language", "lang", "locale"})


@functools.lru_cache(maxsize=4096)
def is_setup_slot(identifier: str) -> bool:
    """A template slot whose name says nothing per request and that is set up once unless the code
    is seen filling it per request: a capitalised name (`TASK_LIST`: a constant by Python's
    convention), a tool catalogue (`tool_list`, `Tool_dic`, `tool_description`, `plugin_info`, `specs_str`,
    `formatted_actions`: the agent's configured tools, fixed per agent), the answer's language, a count setting."""
    if classify_name(identifier) is not None:
        return False
    ws = words(identifier)
    if not ws:
        return False
    catalogue = (ws[0] in _TOOL_HEADS and ws[-1] in _CATALOGUE_TAILS) or (len(ws) > 1 and ws[-1] in _CATALOGUES)
    return identifier.isupper() or catalogue or ws[-1] in _SETTING_WORDS or is_count_setting(identifier)


def is_scratchpad(identifier: str) -> bool:
    """An agent's scratchpad (`agent_scratchpad`, `intermediate_steps`): the steps of this request."""
    ws = words(identifier)
    return bool(ws) and (ws[-1] == "scratchpad" or ws[-2:] == ("intermediate", "steps"))


def is_configuration(value: ast.expr) -> bool:
    """A filling that reads configuration, not the request: a literal, a module constant
    (`FENCE`, `settings.FENCE`), or an instance's setting (`self.fence`, `self.prompts.reminder`)."""
    if isinstance(value, ast.Constant):
        return True
    root = value
    while isinstance(root, ast.Attribute):
        root = root.value
    if not isinstance(root, ast.Name):
        return False
    if root.id in ("self", "cls"):
        return isinstance(value, ast.Attribute)
    return root.id.isupper() or (isinstance(value, ast.Attribute) and value.attr.isupper())


def is_literal_data(node: ast.expr) -> bool:
    """A dict/list display of constants: `json.dumps` of it is stable whatever the key order."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Dict):
        return all(k is not None and is_literal_data(k) for k in node.keys) and all(
            is_literal_data(v) for v in node.values
        )
    if isinstance(node, (ast.List, ast.Tuple)):
        return all(is_literal_data(e) for e in node.elts)
    return False


#: Methods that build a dict from a pydantic model: its fields in class order, the same in every process.
_MODEL_DICTS = frozenset({"model_json_schema", "schema", "model_dump", "dict", "json_schema"})


def has_fixed_order(node: ast.expr, exprs: dict[str, ast.expr]) -> bool:
    """A dict whose key order is fixed by the code that builds it, not assembled from parts: a pydantic
    model's schema or dump (`Model.model_json_schema()`, `.schema()`, `make_json_schema(Model)`), or a
    comprehension over a mapping's items (its order is the mapping's). A local name bound to one counts."""
    if isinstance(node, ast.Name):
        node = exprs.get(node.id, node)
    if isinstance(node, ast.DictComp) and len(node.generators) == 1:
        source = node.generators[0].iter
        return isinstance(source, ast.Call) and isinstance(source.func, ast.Attribute) and source.func.attr == "items"
    if not (isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name))):
        return False
    name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
    return (name in _MODEL_DICTS and not node.args) or name.endswith("json_schema")


def repeated(node: ast.BinOp) -> tuple[ast.expr, int] | None:
    """`"..." * 10` or `10 * "..."`: the repeated operand and how many times (small counts only)."""
    for part, count in ((node.left, node.right), (node.right, node.left)):
        if isinstance(count, ast.Constant) and type(count.value) is int and 0 <= count.value <= 1000:
            return part, count.value
    return None


def reads_name(node: ast.expr, name: str) -> bool:
    """Whether `node` reads the local `name` (`template = header + template`)."""
    stack: list = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Name):
            if n.id == name:
                return True
        elif n is not None:
            stack.extend(child_nodes(n))
    return False
