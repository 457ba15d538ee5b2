"""What the LangChain and LlamaIndex integrations share; no framework is imported here.

A framework's chat template is rendered static-first: the sentences of its system messages that
use no variable (or only variables declared static) stay at the start, sentences whose variables
are all declared shared (RAG documents) follow them, and every other sentence (a timestamp, a user
id) moves to the end of the last user message. The other messages keep their declared order::

    system "Today is {now}. You are ACME's agent. <policy>"    system "You are ACME's agent. <policy>"
    user   "{question}"                                   ->   user   "<question>\\n\\nToday is <now>."

The rendered system message carries the request metadata under `MARKER` in the framework's own
per-message extras (never sent on the wire); the integration's LLM class reads it back and puts it
in the request's ``metadata``, with OpenAI's ``prompt_cache_key`` set to the static-prefix hash.
"""

from __future__ import annotations

import os
import re
import string
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

from ._callsite import _display_path
from ._prompt import Prompt
from ._segments import canonical_text, document, system
from ._wire import PROMPT_SOURCE, PROMPT_TEMPLATE, STATIC_PREFIX_HASH, prefix_hash

__all__ = [
    "MARKER",
    "SplitTemplate",
    "application_site",
    "fstring_variables",
    "split_system_templates",
    "tagged_prompt",
    "request_fields",
]

# Key of the request metadata in a rendered message's extras (LangChain and LlamaIndex
# `additional_kwargs`); their OpenAI clients do not send it.
MARKER = "radixgate_metadata"

# Frames of these top-level modules are never "the application": the SDK, the frameworks, the HTTP
# clients under them and the machinery that runs their callbacks and coroutines.
_SKIPPED_MODULES = frozenset(
    {
        "radixgate",
        "langsmith",
        "openai",
        "anthropic",
        "httpx",
        "httpcore",
        "anyio",
        "pydantic",
        "tenacity",
        "wrapt",
        "asyncio",
        "concurrent",
        "threading",
        "contextlib",
        "functools",
        "runpy",
        "importlib",
    }
)
_SKIPPED_PREFIXES = ("langchain", "langgraph", "llama_index")


def _is_framework(module: str, filename: str) -> bool:
    top = module.partition(".")[0]
    if top in _SKIPPED_MODULES:
        return True
    # langchain_openai, llama_index.core, ...: installed packages, not an app's own `langchain_app.py`
    return top.startswith(_SKIPPED_PREFIXES) and ("site-packages" in filename or "dist-packages" in filename)


def application_site(depth: int = 1) -> tuple[str, str] | None:
    """``(path:line, function name)`` of the innermost frame outside radixgate, LangChain and
    LlamaIndex (and the HTTP and asyncio code under them), or None when there is none."""
    frame: FrameType | None = sys._getframe(depth)
    while frame is not None:
        module = frame.f_globals.get("__name__") or ""
        if not _is_framework(module, frame.f_code.co_filename) and not frame.f_code.co_filename.startswith("<frozen"):
            name = frame.f_code.co_name
            if name == "<module>":
                name = os.path.splitext(os.path.basename(frame.f_code.co_filename))[0]
            return f"{_display_path(frame.f_code.co_filename)}:{frame.f_lineno}", name
        frame = frame.f_back
    return None


def fstring_variables(template: str) -> set[str]:
    """The variable names an f-string template uses (``{user.name}`` counts as ``user``)."""
    names = set()
    for _, field, _, _ in string.Formatter().parse(template):
        if field:
            names.add(re.split(r"[.\[]", field, maxsplit=1)[0])
    return names


# A sentence ends at . ! or ? followed by white space.
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+(?=\S)")


@dataclass(frozen=True)
class SplitTemplate:
    """The formatted text of a chat template's system messages, by volatility."""

    static: str
    shared: str
    turn: str


def split_system_templates(
    templates: Iterable[str],
    values: Mapping[str, Any],
    *,
    shared: Iterable[str] = (),
    static: Iterable[str] = (),
) -> SplitTemplate:
    """Split f-string system `templates` sentence by sentence and format each part with `values`.

    A sentence using no variable, or only variables named in `static`, is STATIC; one whose
    variables are all in `shared` or `static` is SHARED; any other is TURN. Lines keep their
    order within each part; the STATIC part keeps its blank lines (paragraphs). A variable without
    a value stays as ``{name}``, as LlamaIndex's formatter leaves it."""
    static_vars, shared_vars = set(static), set(shared) | set(static)
    lines: dict[str, list[str]] = {"static": [], "shared": [], "turn": []}
    for template in templates:
        for line in template.split("\n"):
            if not line.strip():
                lines["static"].append("")
                continue
            parts: dict[str, list[str]] = {"static": [], "shared": [], "turn": []}
            for sentence in _SENTENCE_BREAK.split(line):
                used = fstring_variables(sentence)
                level = "static" if used <= static_vars else "shared" if used <= shared_vars else "turn"
                parts[level].append(sentence.format(**{k: values.get(k, "{" + k + "}") for k in used}))
            for level, sentences in parts.items():
                if sentences:
                    lines[level].append(" ".join(sentences))
        lines["static"].append("")
    return SplitTemplate(*(canonical_text("\n".join(lines[k])) for k in ("static", "shared", "turn")))


def tagged_prompt(split: SplitTemplate, template: str) -> Prompt:
    """The `Prompt` whose static and shared segments are `split`'s: the source of the metadata."""
    segments = [system(split.static)] if split.static else []
    if split.shared:
        segments.append(document(split.shared))
    return Prompt(*segments, template=template)


def system_text(split: SplitTemplate) -> str:
    """The rendered system message: the static part, then the shared part."""
    return "\n\n".join(part for part in (split.static, split.shared) if part)


def with_turn(content: str, turn: str) -> str:
    """A user message's text with the template's TURN sentences after it."""
    return f"{content}\n\n{turn}" if content else turn


def request_fields(
    marked: Sequence[Mapping[str, Any] | None], first_system_text: str | None, site: tuple[str, str] | None
) -> tuple[dict[str, str], str | None]:
    """``(metadata, prompt_cache_key)`` for one request.

    `marked` are the messages' extras (the first with `MARKER` wins); without one, the template is
    the call site's function name and the key hashes the first system message, so plain framework
    prompts still get a stable ``prompt_cache_key``. `site` is the application's call site."""
    metadata: dict[str, str] = {}
    for extras in marked:
        if extras and isinstance(extras.get(MARKER), Mapping):
            metadata = {str(k): str(v) for k, v in extras[MARKER].items()}
            break
    if site is not None:
        metadata[PROMPT_SOURCE] = site[0]
        metadata.setdefault(PROMPT_TEMPLATE, site[1])
    if STATIC_PREFIX_HASH not in metadata and first_system_text:
        metadata[STATIC_PREFIX_HASH] = prefix_hash(first_system_text)
    return metadata, metadata.get(STATIC_PREFIX_HASH)


def sends_metadata(base_url: str | None) -> bool:
    """OpenAI itself rejects ``metadata`` on requests it does not store; every other server gets it."""
    return bool(base_url) and "api.openai.com" not in str(base_url)
