"""Sinks: the calls that send or define a prompt, turned into ordered segments.

OpenAI (`chat.completions.create`, `responses.create`, legacy `ChatCompletion.create` /
`Completion.create`), Anthropic (`messages.create` with `system=` and `cache_control`),
`litellm.completion`, raw HTTP posts to `/v1/chat/completions`, any `messages=[{"role": ...}]`,
and LangChain templates (`PromptTemplate`, `ChatPromptTemplate.from_messages`,
`*MessagePromptTemplate.from_template`, `MessagesPlaceholder`). radixgate's `Prompt` is a safe
sink: it orders segments itself, so nothing built with it is a site. `SinkReader` reads them with one
module's evaluator; the helpers around it read calls' names and message displays.
"""

from __future__ import annotations

import ast
import re

from . import names
from .builders import is_radixgate_prompt
from .calls import Evaluator
from .scope import ParamRef, Scope
from .shape import EMPTY, Change, Kind, Part, Shape, derive, value
from .site import Segment, Site

_CHAT = (
    "chat.completions.create",
    "chat.completions.parse",
    "chat.completions.stream",
    "ChatCompletion.create",
    "ChatCompletion.acreate",
)
_COMPLETION = ("completions.create", "Completion.create", "Completion.acreate")
_RESPONSES = ("responses.create", "responses.stream", "responses.parse")
_ANTHROPIC = ("messages.create", "messages.stream")
_HTTP_PATHS = ("/chat/completions", "/completions", "/v1/messages", "/v1/responses")
_TEMPLATE_CLASSES = {
    "PromptTemplate": None,
    "ChatPromptTemplate": None,
    "SystemMessagePromptTemplate": "system",
    "HumanMessagePromptTemplate": "user",
    "AIMessagePromptTemplate": "assistant",
}
_MESSAGE_CLASSES = {
    "SystemMessage": "system",
    "HumanMessage": "user",
    "AIMessage": "assistant",
    "ToolMessage": "tool",
    "ChatMessage": None,
}
_LC_ROLES = {
    "system": "system",
    "human": "user",
    "user": "user",
    "ai": "assistant",
    "assistant": "assistant",
    "developer": "system",
}
#: Keyword arguments that hold a system prompt, whatever the call (Gemini, Cohere, agent frameworks).
_SYSTEM_KWARGS = frozenset({"system_instruction", "preamble", "system_prompt", "system_message", "instructions"})
_STREAMS = frozenset({"stream", "astream", "batch", "abatch"})
_LLM_METHODS = frozenset({"invoke", "ainvoke", "generate_content", "predict", "complete"})
_FEW_SHOT = ("FewShotPromptTemplate", "FewShotChatMessagePromptTemplate")
_TEMPLATE_CALLS = ("from_template", "from_messages", "PromptTemplate", "ChatPromptTemplate", "RichPromptTemplate")
BREAK: Shape = (Part(Kind.BREAK, Change.NEVER, 0, None, "cache_control"),)


def chain(func: ast.expr) -> str:
    """`client.chat.completions.create` -> "client.chat.completions.create" (root call dropped)."""
    parts: list[str] = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    return ".".join(reversed(parts))


def _kw(node: ast.Call, name: str) -> ast.expr | None:
    return next((kw.value for kw in node.keywords if kw.arg == name), None)


kw = _kw


def _ends(text: str, suffixes: tuple[str, ...]) -> bool:
    return text.endswith(suffixes) and any(text == s or text.endswith("." + s) for s in suffixes)


def role_of(node: ast.expr) -> str | None:
    """The role of a message display (`{"role": "system", ...}`, `SystemMessage(...)`)."""
    if isinstance(node, ast.Dict):
        for k, v in zip(node.keys, node.values, strict=False):
            if isinstance(k, ast.Constant) and k.value == "role":
                return v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "?"
    if isinstance(node, ast.Call):
        name = chain(node.func).rsplit(".", 1)[-1]
        if name in _MESSAGE_CLASSES:
            return _MESSAGE_CLASSES[name] or "?"
    return None


def _normal_role(role: str | None) -> str | None:
    return "system" if role in ("system", "developer") else role


_SINK_NAMES = (
    frozenset(
        {
            "create",
            "acreate",
            "parse",
            "stream",
            "completion",
            "acompletion",
            "post",
            "from_template",
            "from_messages",
            "PromptTemplate",
            "ChatPromptTemplate",
            "RichPromptTemplate",
        }
    )
    | _LLM_METHODS
    | frozenset(_FEW_SHOT)
)


def is_template_call(node: ast.Call) -> bool:
    """A LangChain template definition (checked after the module's fillings are known)."""
    func = node.func
    last = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return last in _TEMPLATE_CALLS or last in _FEW_SHOT


def message_objects(node: ast.expr, scope: Scope) -> bool:
    """A list of LangChain message objects (`[SystemMessage(...), HumanMessage(...)]`, or a local
    list built from them): whatever it is passed to sends it to a model."""
    elements = _elements(node, scope, (ast.List, ast.Tuple))
    return any((isinstance(e, ast.Call) and role_of(e)) or _role_tuple(e) for e in elements)


def _role_tuple(node: ast.expr) -> bool:
    """`("system", "...")`: a LangChain message as a (role, content) pair."""
    if not (isinstance(node, ast.Tuple) and len(node.elts) == 2 and isinstance(node.elts[0], ast.Constant)):
        return False
    return str(node.elts[0].value).lower() in _LC_ROLES


def role_of_any(node: ast.expr, scope: Scope) -> bool:
    return any(role_of(e) for e in _elements(node, scope, ast.List))


def _elements(node: ast.expr, scope: Scope, displays: type | tuple[type, ...]) -> list[ast.expr]:
    """The elements of a list display (of the `displays` kinds) or of a local list built from literals."""
    if isinstance(node, displays):
        return node.elts  # type: ignore[attr-defined]
    if isinstance(node, ast.Name) and node.id in scope.lists:
        return scope.lists[node.id].elements
    return []


_JINJA = re.compile(r"\{\{\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}\}\}")


class SinkReader:
    """Reads the prompt a call sends or defines, its parts evaluated by one module's evaluator."""

    def __init__(self, ev: Evaluator) -> None:
        self.ev = ev

    def find_site(self, node: ast.Call, scope: Scope) -> Site | None:
        """The prompt `node` sends or defines, or None when it is not a sink."""
        func = node.func
        last = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if (
            last not in _SINK_NAMES
            and not any(kw.arg == "messages" for kw in node.keywords)
            and not (node.args and message_objects(node.args[0], scope))
            and not any(kw.arg in _SYSTEM_KWARGS for kw in node.keywords)
        ):
            return None
        if is_radixgate_prompt(self.ev.module, node, scope):
            return None
        name = chain(node.func)
        qual = self.ev.module.qualname(node.func) or name
        messages = _kw(node, "messages")
        tools = _kw(node, "tools") or _kw(node, "functions")
        head = [Segment("tools", self._tools_shape(tools, scope))] if tools is not None else []
        if _ends(name, _ANTHROPIC) and (messages is not None or _kw(node, "system") is not None):
            system = _kw(node, "system")
            segs = [Segment("system", self._content_shape(system, scope))] if system is not None else []
            body = self.message_segments(messages, scope) if messages is not None else []
            return Site(node, head + segs + body, "high", "anthropic")
        if _ends(name, _RESPONSES):
            instructions, given = _kw(node, "instructions"), _kw(node, "input")
            segs = [Segment("system", self.ev.shape(instructions, scope))] if instructions else []
            if given is not None:
                segs += (
                    self.message_segments(given, scope)
                    if isinstance(given, (ast.List, ast.Name)) and role_of_any(given, scope)
                    else [Segment("user", self.ev.shape(given, scope))]
                )
            return Site(node, head + segs, "high", "openai")
        if messages is not None:
            provider = "litellm" if qual.startswith("litellm.") else "openai" if _ends(name, _CHAT) else None
            return Site(node, head + self.message_segments(messages, scope), "high", provider)
        if _ends(name, _COMPLETION) and _kw(node, "prompt") is not None:
            return Site(node, [Segment(None, self.ev.shape(_kw(node, "prompt"), scope))], "high", "openai")
        if name.endswith("post") and node.args:
            return self._http_site(node, scope)
        system = next((kw.value for kw in node.keywords if kw.arg in _SYSTEM_KWARGS), None)
        # `GenerativeModel(system_instruction=...)`, `co.chat(preamble=...)`, `Agent(instructions=...)`
        if system is not None:
            return Site(node, head + [Segment("system", self._content_shape(system, scope))], "high", None)
        return self._template_site(node, name, scope)

    def message_segments(self, node: ast.expr, scope: Scope, templated: bool = False) -> list[Segment]:
        """The segments of a message list (a display, a built-up list, or `a + b`)."""
        if isinstance(node, (ast.List, ast.Tuple)):
            return [s for e in node.elts for s in self._element_segments(e, scope, templated)]
        if isinstance(node, ast.Name) and node.id in scope.lists:
            return [s for e in scope.lists[node.id].elements for s in self._element_segments(e, scope, templated)]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self.message_segments(node.left, scope, templated) + self.message_segments(
                node.right, scope, templated
            )
        shape = self.ev.shape(node, scope)
        if isinstance(node, ast.Name) and len(shape) == 1 and isinstance(shape[0].node, ParamRef):
            return [Segment(None, shape)]  # the caller's messages: a wrapper of the sink (`call(messages)`)
        return [Segment(None, derive(shape, node))]

    def template_shape(self, node: ast.expr | None, scope: Scope) -> Shape:
        """The shape of a LangChain template string, its placeholders filled as the module does."""
        if node is None:
            return EMPTY
        found = self.ev.literal(node, scope)
        if found is None:
            return self.ev.shape(node, scope)
        return self.ev.fill(found[0], found[1], [], {})

    def _content_shape(self, node: ast.expr | None, scope: Scope) -> Shape:
        """The shape of a message's content: a string, or a list of content blocks."""
        if isinstance(node, ast.List):
            out: list = []
            for block in node.elts:
                if isinstance(block, ast.Dict):
                    fields = {
                        k.value: v
                        for k, v in zip(block.keys, block.values, strict=False)
                        if isinstance(k, ast.Constant)
                    }
                    out.extend(self.ev.shape(fields.get("text", fields.get("content")), scope))
                    if "cache_control" in fields:
                        out.extend(BREAK)
                else:
                    out.extend(self.ev.shape(block, scope))
            return tuple(out)
        return self.ev.shape(node, scope)

    def _element_segments(self, node: ast.expr, scope: Scope, templated: bool) -> list[Segment]:
        if isinstance(node, ast.Starred):
            inner = node.value
            if isinstance(inner, (ast.List, ast.Tuple, ast.BinOp)) or (
                isinstance(inner, ast.Name) and inner.id in scope.lists
            ):
                return self.message_segments(inner, scope, templated)
            return [Segment(None, derive(self.ev.shape(inner, scope), inner))]
        if isinstance(node, ast.Name) and isinstance(scope.exprs.get(node.id), ast.Dict):
            return self._element_segments(scope.exprs[node.id], scope, templated)
        role = role_of(node)
        if isinstance(node, ast.Dict) and role is not None:
            fields = {k.value: v for k, v in zip(node.keys, node.values, strict=False) if isinstance(k, ast.Constant)}
            return [Segment(_normal_role(role), self._content_shape(fields.get("content"), scope))]
        if isinstance(node, ast.Call):
            name = chain(node.func).rsplit(".", 1)[-1]
            arg = node.args[0] if node.args else _kw(node, "content") or _kw(node, "template")
            if name in _MESSAGE_CLASSES:
                return [Segment(_normal_role(role), self._content_shape(arg, scope))]
            if name == "MessagesPlaceholder":
                var = node.args[0] if node.args else _kw(node, "variable_name")
                label = var.value if isinstance(var, ast.Constant) else "history"
                if names.is_scratchpad(str(label)):  # this request's own steps, at its end: not the history
                    return [Segment(None, value(Kind.TURN, Change.PER_REQUEST, node, str(label)))]
                return [Segment(None, value(Kind.HISTORY, Change.PER_SESSION, node, str(label)))]
            if name in ("from_template", "from_template_file"):
                owner = chain(node.func).rsplit(".", 2)[-2] if "." in chain(node.func) else ""
                return [Segment(_TEMPLATE_CLASSES.get(owner), self.template_shape(arg, scope))]
        if isinstance(node, ast.Tuple) and len(node.elts) == 2 and isinstance(node.elts[0], ast.Constant):
            role = _LC_ROLES.get(str(node.elts[0].value).lower())
            if str(node.elts[0].value) == "placeholder":
                held = node.elts[1].value if isinstance(node.elts[1], ast.Constant) else "history"
                variable = str(held).strip("{}")
                found = names.classify_name(variable) or (Kind.HISTORY, Change.PER_SESSION)
                return [Segment(None, value(found[0], found[1], node, variable))]
            return [Segment(role, self.template_shape(node.elts[1], scope))]
        return [Segment(None, derive(self.ev.shape(node, scope), node))]

    def _tools_shape(self, node: ast.expr, scope: Scope) -> Shape:
        shape = self.ev.shape(node, scope)
        has_break = any(isinstance(n, ast.Constant) and n.value == "cache_control" for n in ast.walk(node))
        return shape + BREAK if has_break else shape

    def _http_site(self, node: ast.Call, scope: Scope) -> Site | None:
        """`requests.post(".../v1/chat/completions", json={...})` and httpx alike."""
        url = node.args[0]
        texts = [n.value for n in ast.walk(url) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        if isinstance(url, ast.Name):
            texts.append(scope.literals.get(url.id) or self.ev.module.literals.get(url.id) or "")
        if not any(p in t for t in texts for p in _HTTP_PATHS):
            return None
        body = _kw(node, "json")
        if isinstance(body, ast.Name):
            body = scope.exprs.get(body.id)
        if not isinstance(body, ast.Dict):
            return None
        fields = {k.value: v for k, v in zip(body.keys, body.values, strict=False) if isinstance(k, ast.Constant)}
        segs = [Segment("tools", self._tools_shape(fields["tools"], scope))] if "tools" in fields else []
        if "system" in fields:
            segs.append(Segment("system", self._content_shape(fields["system"], scope)))
        if "messages" in fields:
            segs += self.message_segments(fields["messages"], scope)
        elif "prompt" in fields:
            segs.append(Segment(None, self.ev.shape(fields["prompt"], scope)))
        return Site(node, segs, "high", "http") if segs else None

    def _few_shot_site(self, node: ast.Call, scope: Scope) -> Site:
        """`FewShotPromptTemplate(prefix=..., examples=..., example_prompt=..., suffix=...)`: the prefix,
        the examples in their order, then the suffix (LangChain renders them so)."""
        segments: list[Segment] = []
        prefix, suffix = _kw(node, "prefix"), _kw(node, "suffix")
        if prefix is not None:
            segments.append(Segment(None, self.template_shape(prefix, scope)))
        examples = _kw(node, "examples")
        if examples is not None:
            segments.append(Segment(None, self.ev.shape(examples, scope)))
        elif _kw(node, "example_selector") is not None:  # chosen per input: as dynamic as the input
            segments.append(Segment(None, value(Kind.TURN, Change.PER_REQUEST, node, "example_selector")))
        if suffix is not None:
            segments.append(Segment(None, self.template_shape(suffix, scope)))
        return Site(node, segments, "high", None)

    def _template_site(self, node: ast.Call, name: str, scope: Scope) -> Site | None:
        """LangChain templates, and LLM calls given an inline f-string."""
        last = name.rsplit(".", 1)[-1]
        owner = name.rsplit(".", 2)[-2] if name.count(".") else ""
        arg = node.args[0] if node.args else None
        if last in ("from_template", "from_messages") and owner.endswith(("Template", "Prompt")):
            if last == "from_messages" and arg is not None:
                return Site(node, self.message_segments(arg, scope, templated=True), "high", None)
            template = arg or _kw(node, "template")
            role = _TEMPLATE_CLASSES.get(owner)
            return Site(node, [Segment(role, self.template_shape(template, scope))], "high", None)
        if last in _FEW_SHOT:
            return self._few_shot_site(node, scope)
        if last == "RichPromptTemplate":  # LlamaIndex, Jinja placeholders
            template = arg or _kw(node, "template_str")
            found = self.ev.literal(template, scope) if template is not None else None
            if found is None:
                return None
            jinja = _JINJA.sub(lambda m: "{" + m.group(1) + "}", found[0].replace("{", "{{").replace("}", "}}"))
            return Site(node, [Segment(None, self.ev.fill(jinja, found[1], [], {}))], "high", None)
        if (
            last == "PromptTemplate"
            and _kw(node, "template") is None
            and arg is not None
            and self.ev.literal(arg, scope)
        ):
            return Site(node, [Segment(None, self.template_shape(arg, scope))], "high", None)  # LlamaIndex
        if last in ("PromptTemplate", "ChatPromptTemplate"):
            template, messages = _kw(node, "template"), _kw(node, "messages") or arg
            if template is not None:
                return Site(node, [Segment(None, self.template_shape(template, scope))], "high", None)
            if messages is not None:
                return Site(node, self.message_segments(messages, scope, templated=True), "high", None)
        if arg is not None and message_objects(arg, scope):  # `llm.invoke([SystemMessage(...), ...])`, `chat(messages)`
            return Site(node, self.message_segments(arg, scope), "high", None)
        if last in _LLM_METHODS | _STREAMS and arg is not None and role_of_any(arg, scope):
            return Site(node, self.message_segments(arg, scope), "high", None)  # `llm.invoke([{"role": ...}])`
        if last in _LLM_METHODS and isinstance(arg, (ast.JoinedStr, ast.BinOp)):
            return Site(node, [Segment(None, self.ev.shape(arg, scope))], "low", None)
        if last in _LLM_METHODS and (
            isinstance(arg, ast.Call) or (isinstance(arg, ast.Name) and arg.id in scope.values)
        ):
            shape = self.ev.shape(arg, scope)  # `llm.invoke(text)`, `llm.predict(TEMPLATE.format(...))`
            if any(p.kind is Kind.TEXT for p in shape):
                return Site(node, [Segment(None, shape)], "low", None)
        return None
