"""The demo's ideal, computed apart from both apps: the declared static-segment tokens that a cache
with unbounded room reuses across the demo's requests.

The workload is the five calls `examples/bad_app.py` and `examples/fixed_app.py` both make, in
their rotation (request i makes call i mod 5). Each call declares its static segments below: the
texts that are the same in every request of that call (instructions, tool schemas, tool names,
few-shot messages, documents, the returns template without its date). The texts are read from
`bad_app.py`'s source as data (`ast.literal_eval` of its constants and of the documents' list;
the app is never imported), so nothing here is code either app or the SDK's renderer runs.

Each segment is tokenized on its own with the tokenizer passed in (the server's). Under an infinite
cache (nothing evicted) a request reuses the tokens of its longest run of leading static segments
that an earlier request also began with; a run's first request computes them. Chat-template framing,
headings and separators are no declared segment, so they count in neither direction.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["CALLS", "IdealReuse", "declared_segments", "ideal_reuse"]

# The call rotation of both apps, each call with the names of its static segments, in order.
CALLS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("support_chat", ("instructions", "tools", "tool names", "few-shot")),
    ("rag_answer", ("documents",)),
    ("rag_question_first", ("documents",)),
    ("templated_answer", ("returns template",)),
    ("quick_answer", ("quick system",)),
)
QUICK_SYSTEM = "You are a helpful assistant."  # a literal inside bad_app.quick_answer
_PLACEHOLDER_SENTENCE = re.compile(r"[^.]*\{\w+\}[^.]*\.\s*")


def _constants(tree: ast.Module) -> dict[str, object]:
    out: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return out


def _documents(tree: ast.Module) -> list[str]:
    """The bodies `make_docs` writes, in file-name order (policy_0, policy_1, ...)."""
    make_docs = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "make_docs")
    lists = [n for n in ast.walk(make_docs) if isinstance(n, ast.List) and n.elts]
    return [str(text) for text in ast.literal_eval(lists[0])]


def declared_segments(bad_app_path: str) -> dict[str, list[str]]:
    """Each static segment's texts (a segment may be several texts, e.g. one per few-shot message)."""
    with open(bad_app_path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=bad_app_path)
    const = _constants(tree)
    few_shot = const["FEW_SHOT"]
    assert isinstance(few_shot, list)
    return {
        "instructions": [str(const["INSTRUCTIONS"])],
        "tools": [json.dumps(tool, sort_keys=True) for tool in const["TOOLS"]],  # type: ignore[attr-defined]
        "tool names": [", ".join(sorted(const["TOOL_NAMES"]))],  # type: ignore[call-overload]
        "few-shot": [str(m["content"]) for m in few_shot],
        "documents": _documents(tree),
        "returns template": [_PLACEHOLDER_SENTENCE.sub("", str(const["ANSWER_TEMPLATE"]), count=1)],
        "quick system": [QUICK_SYSTEM],
    }


@dataclass(frozen=True)
class IdealReuse:
    """What the ideal cache does over `requests` requests of the rotation."""

    requests: int
    static_tokens: int  # declared static-segment tokens summed over the requests
    reused_tokens: int  # of those, the tokens an earlier request's identical leading segments cover

    def hit_rate(self, prompt_tokens: int) -> float:
        """`reused_tokens` as a share of an app's measured prompt tokens."""
        return self.reused_tokens / prompt_tokens if prompt_tokens else 0.0


def ideal_reuse(bad_app_path: str, num_requests: int, encode: Callable[[str], Sequence[int]]) -> IdealReuse:
    """The ideal over the first `num_requests` requests of the rotation, tokens counted by `encode`."""
    texts = declared_segments(bad_app_path)
    tokens = {name: sum(len(encode(t)) for t in parts) for name, parts in texts.items()}
    seen: set[tuple[str, ...]] = set()  # every leading run of segments an earlier request sent
    static = reused = 0
    for i in range(num_requests):
        segments = CALLS[i % len(CALLS)][1]
        static += sum(tokens[s] for s in segments)
        run = 0
        while run < len(segments) and segments[: run + 1] in seen:
            run += 1
        reused += sum(tokens[s] for s in segments[:run])
        seen.update(segments[: k + 1] for k in range(len(segments)))
    return IdealReuse(num_requests, static, reused)
