"""`radixgate.langchain`: static-first rendering, metadata and `prompt_cache_key` on the wire, and the
application's call site for invoke / ainvoke / stream / astream (LangChain's real classes, HTTP mocked)."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import httpx
import pytest

pytest.importorskip("langchain_openai")

from langchain_core.output_parsers import StrOutputParser  # noqa: E402
from langchain_core.prompts import MessagesPlaceholder  # noqa: E402

from radixgate._prompt import prefix_hash  # noqa: E402
from radixgate.langchain import ChatOpenAI, ChatPromptTemplate  # noqa: E402

POLICY = "You are ACME's support agent. Answer in one sentence. Refunds take 5 days."
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


def _llm(seen: list[dict[str, Any]], **kwargs: Any) -> ChatOpenAI:
    return ChatOpenAI(
        model="tiny",
        base_url="http://radixgate.test/v1",
        api_key="k",
        http_client=httpx.Client(transport=httpx.MockTransport(lambda r: _respond(seen, r))),
        http_async_client=httpx.AsyncClient(transport=_AsyncMock(seen)),
        **kwargs,
    )


def _prompt() -> ChatPromptTemplate:
    return ChatPromptTemplate.from_messages(
        [("system", "Today is {now}. " + POLICY), MessagesPlaceholder("history"), ("human", "{question}")],
        template="support-bot",
    )


def _inputs(now: str, question: str = "Where is my parcel?") -> dict[str, Any]:
    return {"now": now, "history": [("human", "hi"), ("ai", "hello")], "question": question}


def test_system_renders_static_first_and_the_timestamp_moves_last():
    messages = _prompt().invoke(_inputs("2026-12-01T08:00")).to_messages()
    assert [m.type for m in messages] == ["system", "human", "ai", "human"]
    assert messages[0].content == POLICY
    assert messages[-1].content == "Where is my parcel?\n\nToday is 2026-12-01T08:00."
    marker = messages[0].additional_kwargs["radixgate_metadata"]
    assert marker == {
        "prompt_template": "support-bot",
        "static_prefix_hash": prefix_hash(POLICY),
        "static_prefix_chars": str(len(POLICY)),
    }


def test_shared_and_static_variables_stay_in_the_system_message():
    prompt = ChatPromptTemplate.from_messages(
        [("system", "You are {bot}. Now: {now}.\nDocuments: {docs}"), ("human", "{q}")],
        shared_variables=["docs"],
        static_variables=["bot"],
    )
    line = sys._getframe().f_lineno - 5  # the from_messages line
    messages = prompt.format_messages(bot="Ava", now="noon", docs="D1", q="Hi?")
    assert messages[0].content == "You are Ava.\n\nDocuments: D1"
    assert messages[1].content == "Hi?\n\nNow: noon."
    assert prompt.radixgate_template.endswith(f"test_langchain.py:{line}")
    assert prompt.partial(bot="Bo").radixgate_template == prompt.radixgate_template


def test_prompt_cache_key_is_the_static_hash_whatever_the_tail():
    seen: list[dict[str, Any]] = []
    chain = _prompt() | _llm(seen) | StrOutputParser()
    chain.invoke(_inputs("2026-12-01T08:00", "A?"))
    chain.invoke(_inputs("2026-12-01T09:30", "B?"))
    keys = {body["prompt_cache_key"] for body in seen}
    assert keys == {prefix_hash(POLICY)}
    assert seen[0]["messages"][0] == seen[1]["messages"][0] and seen[0]["messages"] != seen[1]["messages"]
    assert "radixgate_metadata" not in json.dumps(seen)


def test_call_site_for_invoke_ainvoke_stream_and_astream():
    seen: list[dict[str, Any]] = []
    chain = _prompt() | _llm(seen) | StrOutputParser()
    lines: list[int] = []
    assert chain.invoke(_inputs("t1")) == "ok"
    lines.append(sys._getframe().f_lineno - 1)
    assert "".join(chain.stream(_inputs("t2"))) == "ok"
    lines.append(sys._getframe().f_lineno - 1)

    async def main() -> None:
        assert await chain.ainvoke(_inputs("t3")) == "ok"
        lines.append(sys._getframe().f_lineno - 1)
        assert "".join([c async for c in chain.astream(_inputs("t4"))]) == "ok"
        lines.append(sys._getframe().f_lineno - 1)

    asyncio.run(main())
    sources = [body["metadata"]["prompt_source"] for body in seen]
    assert sources == [f"tests/sdk/test_langchain.py:{n}" for n in lines]
    assert {body["metadata"]["prompt_template"] for body in seen} == {"support-bot"}


def test_plain_prompts_still_get_a_call_site_and_openai_gets_no_metadata():
    seen: list[dict[str, Any]] = []
    _llm(seen).invoke([("system", POLICY), ("human", "Hi")])
    line = sys._getframe().f_lineno - 1
    assert seen[0]["metadata"]["prompt_source"] == f"tests/sdk/test_langchain.py:{line}"
    assert seen[0]["prompt_cache_key"] == prefix_hash(POLICY)
    hosted = _llm(seen)
    hosted.openai_api_base = "https://api.openai.com/v1"
    hosted.invoke([("system", POLICY), ("human", "Hi")])
    assert "metadata" not in seen[1] and seen[1]["prompt_cache_key"] == prefix_hash(POLICY)
