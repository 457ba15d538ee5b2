"""The pool of prompt sites of a repository, found syntactically and independently of promptlint.

    python -m radixgate.bench.lint_realworld_pool SOURCES_ROOT/owner+name

A site is one of:
- `call`: a call to a listed LLM, LangChain or LlamaIndex API (`chat.completions.create`, `messages.create`,
  `litellm.completion`, `.invoke`/`.stream`/`.batch` on a chain, model or agent, `.predict`, `.complete`,
  `.chat`, `generate_content`, `ollama.chat`, ...) or a template/message constructor (`PromptTemplate`,
  `ChatPromptTemplate.from_messages`, `SystemMessage`, `HumanMessage`, `ChatMessage`, ...), with the strings
  passed to it (its span is the call's lines);
- `assign`: an assignment of a string, f-string, `%`/`+`/`.format(...)`/`.join(...)` expression to a name
  whose last word is prompt-like (`prompt`, `template`, `system`, `instruction(s)`, `message(s)`, `query`,
  `context`), at any level.

This module imports nothing from `radixgate.linter`, so the pool does not depend on the rules it judges.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import NamedTuple

# Attribute chains ending a call that sends to a model (matched on the last one or two names).
LLM_CALLS = {
    ("completions", "create"),
    ("completions", "acreate"),
    ("messages", "create"),
    ("messages", "stream"),
    ("responses", "create"),
    ("ChatCompletion", "create"),
    ("ChatCompletion", "acreate"),
    ("Completion", "create"),
    ("litellm", "completion"),
    ("litellm", "acompletion"),
    ("ollama", "chat"),
    ("ollama", "generate"),
}
LLM_METHODS = {
    "generate_content",
    "generate_content_async",
    "completion",
    "acompletion",
    "chat_completion",
    "create_chat_completion",
}
# Methods that send only on a receiver whose name says it is a model, chain, agent or engine.
RECEIVER_METHODS = {
    "invoke",
    "ainvoke",
    "stream",
    "astream",
    "batch",
    "abatch",
    "predict",
    "apredict",
    "predict_messages",
    "run",
    "arun",
    "complete",
    "acomplete",
    "chat",
    "achat",
    "stream_chat",
    "astream_chat",
    "stream_complete",
    "query",
    "aquery",
    "generate",
    "agenerate",
    "ask",
    "aask",
}
RECEIVER_WORDS = ("llm", "chain", "model", "agent", "engine", "client", "chat", "openai", "anthropic", "gpt", "lm")
CONSTRUCTORS = {
    "PromptTemplate",
    "ChatPromptTemplate",
    "StringPromptTemplate",
    "FewShotPromptTemplate",
    "SystemMessagePromptTemplate",
    "HumanMessagePromptTemplate",
    "AIMessagePromptTemplate",
    "MessagesPlaceholder",
    "SystemMessage",
    "HumanMessage",
    "AIMessage",
    "ChatMessage",
    "LLMChain",
    "ConversationalRetrievalChain",
    "RetrievalQA",
    "initialize_agent",
    "create_react_agent",
    "create_openai_functions_agent",
    "create_tool_calling_agent",
    "ChatMessageHistory",
    "Prompt",
    "RichPromptTemplate",
}
CONSTRUCTOR_METHODS = {"from_template", "from_messages", "from_strings", "from_examples", "from_role_strings"}
PROMPT_WORDS = (
    "prompt",
    "template",
    "system",
    "instruction",
    "instructions",
    "message",
    "messages",
    "query",
    "context",
)


class Site(NamedTuple):
    path: str
    line: int
    end_line: int
    kind: str  # "call" or "assign"
    what: str  # the called name or the assigned name


def _dotted(node: ast.AST) -> list[str]:
    names: list[str] = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        names.append(node.id)
    elif isinstance(node, ast.Call):
        names.extend(reversed(_dotted(node.func)))
    return list(reversed(names))


def _is_llm_call(call: ast.Call) -> str | None:
    chain = _dotted(call.func)
    if not chain:
        return None
    last = chain[-1]
    if tuple(chain[-2:]) in LLM_CALLS or last in LLM_METHODS:
        return ".".join(chain[-3:])
    if last in CONSTRUCTORS or last in CONSTRUCTOR_METHODS:
        return ".".join(chain[-2:])
    if last in RECEIVER_METHODS and len(chain) >= 2:
        receiver = chain[-2].lower()
        if any(word in receiver for word in RECEIVER_WORDS):
            return ".".join(chain[-2:])
    return None


def _stringy(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)):
        return _stringy(node.left) or _stringy(node.right)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr in ("format", "join", "format_map", "substitute", "safe_substitute")
    return False


def _prompt_name(target: ast.AST) -> str | None:
    name = target.id if isinstance(target, ast.Name) else target.attr if isinstance(target, ast.Attribute) else None
    if name is None:
        return None
    last = name.lower().strip("_").split("_")[-1]
    return name if last in PROMPT_WORDS or last.endswith(("prompt", "template")) else None


def sites_of(path: str, source: str) -> list[Site]:
    """Every site of one file, in source order."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    found: list[Site] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            what = _is_llm_call(node)
            if what:
                found.append(Site(path, node.lineno, node.end_lineno or node.lineno, "call", what))
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            value = node.value
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if value is None or not _stringy(value):
                continue
            for target in targets:
                name = _prompt_name(target)
                if name:
                    found.append(Site(path, node.lineno, node.end_lineno or node.lineno, "assign", name))
                    break
    found.sort()
    return found


def pool(root: Path) -> list[Site]:
    """Every site of every Python file under `root` (paths relative to it), sorted."""
    out: list[Site] = []
    for file in sorted(root.rglob("*.py")):
        try:
            source = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        out.extend(sites_of(file.relative_to(root).as_posix(), source))
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    for root in args:
        for site in pool(Path(root)):
            print(f"{site.path}:{site.line}-{site.end_line} {site.kind} {site.what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
