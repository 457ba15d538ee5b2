"""`radixgate.llamaindex`: static-first rendering and tagged requests from a real LlamaIndex query engine
(SummaryIndex, no embeddings; HTTP mocked), call sites for query / aquery / streaming."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import httpx
import pytest

pytest.importorskip("llama_index.llms.openai_like")

from llama_index.core import SummaryIndex  # noqa: E402
from llama_index.core.schema import TextNode  # noqa: E402

from radixgate._prompt import prefix_hash  # noqa: E402
from radixgate.llamaindex import ChatPromptTemplate, OpenAILike  # noqa: E402

POLICY = "You answer from ACME's handbook. Quote it when you can."
COMPLETION = {
    "id": "c",
    "object": "chat.completion",
    "created": 0,
    "model": "tiny",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}
STREAM = (
    'data: {"id":"c","object":"chat.completion.chunk","created":0,"model":"tiny","choices":[{"index":0,'
    '"delta":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
)


def _respond(seen: list[dict[str, Any]], request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    seen.append(body)
    if body.get("stream"):
        return httpx.Response(200, text=STREAM, headers={"content-type": "text/event-stream"})
    return httpx.Response(200, json=COMPLETION)


class _AsyncMock(httpx.AsyncBaseTransport):
    def __init__(self, seen: list[dict[str, Any]]) -> None:
        self.seen = seen

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        return _respond(self.seen, request)


def _llm(seen: list[dict[str, Any]]) -> OpenAILike:
    return OpenAILike(
        model="tiny",
        api_base="http://radixgate.test/v1",
        api_key="k",
        is_chat_model=True,
        max_tokens=2,
        http_client=httpx.Client(transport=httpx.MockTransport(lambda r: _respond(seen, r))),
        async_http_client=httpx.AsyncClient(transport=_AsyncMock(seen)),
    )


QA = ChatPromptTemplate.from_messages(
    [("system", "Current time: {now}. " + POLICY), ("user", "Context:\n{context_str}\n\nQuestion: {query_str}")],
    template="handbook-qa",
)
INDEX = SummaryIndex([TextNode(text="Returns are accepted within 30 days."), TextNode(text="Shipping takes 2 days.")])


def test_query_engine_sends_static_first_messages_with_metadata():
    seen: list[dict[str, Any]] = []
    for now in ("2026-12-01T08:00", "2026-12-01T09:30"):
        engine = INDEX.as_query_engine(llm=_llm(seen), text_qa_template=QA.partial_format(now=now))
        assert str(engine.query("How long do returns take?")) == "ok"
    line = sys._getframe().f_lineno - 1
    first, second = seen
    assert first["messages"][0] == second["messages"][0] == {"role": "system", "content": POLICY}
    assert first["messages"][1]["content"].endswith(
        "Question: How long do returns take?\n\nCurrent time: 2026-12-01T08:00."
    )
    assert "Returns are accepted within 30 days." in first["messages"][1]["content"]
    assert first["metadata"] == {
        "prompt_template": "handbook-qa",
        "static_prefix_hash": prefix_hash(POLICY),
        "static_prefix_chars": str(len(POLICY)),
        "prompt_source": f"tests/sdk/test_llamaindex.py:{line}",
    }
    assert first["prompt_cache_key"] == second["prompt_cache_key"] == prefix_hash(POLICY)
    assert "radixgate_metadata" not in json.dumps(seen)


def test_call_site_for_aquery_and_streaming():
    seen: list[dict[str, Any]] = []
    engine = INDEX.as_query_engine(llm=_llm(seen), text_qa_template=QA.partial_format(now="t"))
    streaming = INDEX.as_query_engine(llm=_llm(seen), text_qa_template=QA.partial_format(now="t"), streaming=True)
    lines: list[int] = []

    async def main() -> None:
        assert str(await engine.aquery("Async?")) == "ok"
        lines.append(sys._getframe().f_lineno - 1)

    asyncio.run(main())
    assert "".join(streaming.query("Stream?").response_gen) == "ok"
    lines.append(sys._getframe().f_lineno - 1)
    assert [body["metadata"]["prompt_source"] for body in seen] == [f"tests/sdk/test_llamaindex.py:{n}" for n in lines]
    assert seen[1]["stream"] is True and seen[1]["prompt_cache_key"] == prefix_hash(POLICY)


def test_default_template_id_is_where_the_template_was_built():
    qa = ChatPromptTemplate.from_messages([("system", "Be brief."), ("user", "{query_str}")])
    line = sys._getframe().f_lineno - 1
    assert qa.radixgate_template == f"tests/sdk/test_llamaindex.py:{line}"
    assert qa.partial_format(x="y").radixgate_template == qa.radixgate_template
    messages = qa.format_messages(query_str="Hi")
    assert [str(m.content) for m in messages] == ["Be brief.", "Hi"]
