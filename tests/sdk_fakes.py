"""An in-memory OpenAI-compatible server for `httpx.MockTransport`: records what it receives and
simulates a prefix cache over cl100k tokens, so tests can check metadata, retries and hit rates."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from radixgate._wire import encode


def chat_tokens(messages: list[dict[str, Any]]) -> list[int]:
    """A stand-in chat template: role marker, content tokens, end marker per message."""
    out: list[int] = []
    for m in messages:
        out += [-1 - ["system", "user", "assistant", "tool"].index(m["role"])] + encode(m["content"]) + [-9]
    return out + [-3]


@dataclass
class FakeServer:
    """Answers chat/completions (plain or SSE) with usage from a simulated prefix cache.

    `failures` is a list of responses (or exceptions) returned before the real answer, one per request.
    """

    failures: list[httpx.Response | Exception] = field(default_factory=list)
    requests: list[httpx.Request] = field(default_factory=list)
    cache: list[list[int]] = field(default_factory=list)
    cache_enabled: bool = True
    on_request: Callable[[httpx.Request], None] | None = None

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.requests if r.content]

    def _cached(self, tokens: list[int]) -> int:
        best = 0
        for seq in self.cache:
            n = 0
            for a, b in zip(seq, tokens, strict=False):
                if a != b:
                    break
                n += 1
            best = max(best, n)
        self.cache.append(tokens)
        return min(best, len(tokens) - 1) if self.cache_enabled else 0

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.on_request:
            self.on_request(request)
        if self.failures:
            failure = self.failures.pop(0)
            if isinstance(failure, Exception):
                raise failure
            return failure
        path = request.url.path
        if path.endswith("/models"):
            return httpx.Response(200, json={"object": "list", "data": [{"id": "tiny", "object": "model"}]})
        if path.endswith("/server_info"):
            return httpx.Response(200, json={"cache_hit_rate": 0.5, "token_usage": 0.1, "page_size": 1})
        if path.endswith("/prompt_stats"):
            return httpx.Response(
                200,
                json={
                    "templates": [
                        {
                            "template": "t",
                            "source": "a.py:1",
                            "requests": 2,
                            "prompt_tokens": 10,
                            "cached_tokens": 5,
                            "hit_rate": 0.5,
                        }
                    ]
                },
            )
        if path.endswith("/flush_cache"):
            self.cache.clear()
            return httpx.Response(200, json={"success": True})
        if path.endswith("/health"):
            return httpx.Response(200)
        body = json.loads(request.content)
        chat = path.endswith("/chat/completions")
        tokens = chat_tokens(body["messages"]) if chat else encode(body["prompt"])
        usage = {
            "prompt_tokens": len(tokens),
            "completion_tokens": 2,
            "total_tokens": len(tokens) + 2,
            "prompt_tokens_details": {"cached_tokens": self._cached(tokens)},
        }
        if not body.get("stream"):
            choice = (
                {"index": 0, "message": {"role": "assistant", "content": "ok!"}, "finish_reason": "length"}
                if chat
                else {"index": 0, "text": "ok!", "finish_reason": "length"}
            )
            return httpx.Response(
                200,
                json={
                    "id": "x",
                    "object": "chat.completion",
                    "created": 1,
                    "model": body["model"],
                    "choices": [choice],
                    "usage": usage,
                },
            )
        events = []
        for piece in ("ok", "!"):
            choice = {"index": 0, "delta": {"content": piece}} if chat else {"index": 0, "text": piece}
            events.append({"id": "x", "choices": [choice]})
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append({"id": "x", "choices": [], "usage": usage})
        text = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        return httpx.Response(200, content=text.encode(), headers={"content-type": "text/event-stream"})
