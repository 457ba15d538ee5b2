"""LangChain and LlamaIndex apps against a live `radixgate serve`: the same app before and after
switching its imports to radixgate's integration, 40 requests each, a timestamp in the system prompt.

The hit rate is measured from the responses' `cached_tokens`; the ideal is what a perfect prefix
cache would hit on the messages the app sent (the server's ChatML tokens, `radixgate bench`'s
model). Run with ``-s`` to print the figures."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from live_servers import KEYLESS

pytest.importorskip("langchain_openai")
pytest.importorskip("llama_index.llms.openai_like")

from langchain_core.output_parsers import StrOutputParser  # noqa: E402
from langchain_core.prompts import ChatPromptTemplate as PlainChatPromptTemplate  # noqa: E402
from langchain_openai import ChatOpenAI as PlainChatOpenAI  # noqa: E402
from llama_index.core import SummaryIndex  # noqa: E402
from llama_index.core.prompts import ChatPromptTemplate as PlainQATemplate  # noqa: E402
from llama_index.core.schema import TextNode  # noqa: E402
from llama_index.llms.openai_like import OpenAILike as PlainOpenAILike  # noqa: E402

import radixgate.langchain as rg_langchain  # noqa: E402
import radixgate.llamaindex as rg_llamaindex  # noqa: E402
from radixgate.bench.serving_runner import _chatml, prefix_reuse  # noqa: E402
from radixgate.gateway.server_process import ServerProcess  # noqa: E402

NUM_REQUESTS = 40
CONCURRENCY = 8  # after the first request, as a service sees them: several at once
POLICY = " ".join(
    f"Rule {i}: orders of type {i} ship from warehouse {i % 7} and may be returned within {20 + i} days."
    for i in range(10)
)
START = datetime(2026, 12, 1, 8, 0)


class Recorder:
    """An httpx client for the app's LLM that keeps each request's messages and response usage."""

    def __init__(self) -> None:
        self.messages: list[list[dict[str, Any]]] = []
        self.usage: list[dict[str, Any]] = []
        self.client = httpx.Client(
            timeout=120,
            transport=httpx.HTTPTransport(retries=3),  # reconnects on a refused or reset connection
            event_hooks={"request": [self._on_request], "response": [self._on_response]},
        )

    def _on_request(self, request: httpx.Request) -> None:
        self.messages.append(json.loads(request.content)["messages"])

    def _on_response(self, response: httpx.Response) -> None:
        response.read()
        self.usage.append(response.json()["usage"])

    def hit_rate(self) -> float:
        cached = sum(u["prompt_tokens_details"]["cached_tokens"] for u in self.usage)
        return cached / sum(u["prompt_tokens"] for u in self.usage)

    def ideal(self) -> float:
        return prefix_reuse([_chatml(m) for m in self.messages])[1]


@pytest.fixture
def server(live_server: Callable[..., ServerProcess]) -> ServerProcess:
    return live_server(KEYLESS)  # shared with other files: each test flushes and has templates of its own


def _flush(server: ServerProcess) -> None:
    httpx.post(server.base_url + "/flush_cache", timeout=30).raise_for_status()


def _row(server: ServerProcess, template: str) -> dict[str, Any]:
    rows = httpx.get(server.base_url + "/v1/prompt_stats", timeout=30).json()["templates"]
    return next(row for row in rows if row["template"] == template)


def _report(name: str, before: Recorder, after: Recorder) -> None:
    print(
        f"\n{name}: {NUM_REQUESTS} requests, hit rate before {before.hit_rate():.1%}, "
        f"after {after.hit_rate():.1%}, ideal {after.ideal():.1%}"
    )


def test_langchain_chain_switched_by_its_imports(server: ServerProcess):
    def run(chat_prompt_template: Any, chat_openai: Any) -> tuple[Recorder, str, int]:
        # The application: a support chain with the time in its system message.
        recorder = Recorder()
        prompt = chat_prompt_template.from_messages(
            [("system", "Current time: {now}. You are ACME's support agent. " + POLICY), ("human", "{question}")]
        )
        llm = chat_openai(model="tiny", base_url=server.api_url, api_key="-", max_tokens=2, http_client=recorder.client)
        chain = prompt | llm | StrOutputParser()
        inputs = [
            {"now": (START + timedelta(minutes=7 * i)).isoformat(), "question": f"Where is order {1000 + i}?"}
            for i in range(NUM_REQUESTS)
        ]
        chain.invoke(inputs[0])
        chain.batch(inputs[1:], config={"max_concurrency": CONCURRENCY})
        line = sys._getframe().f_lineno - 1
        return recorder, getattr(prompt, "radixgate_template", ""), line

    _flush(server)
    before, _, _ = run(PlainChatPromptTemplate, PlainChatOpenAI)
    _flush(server)
    after, template, line = run(rg_langchain.ChatPromptTemplate, rg_langchain.ChatOpenAI)
    _report("LangChain", before, after)
    assert after.hit_rate() >= 0.9 * after.ideal() and after.hit_rate() >= 2 * before.hit_rate()
    assert template.startswith("tests/e2e/test_integrations_live.py:")  # where the app built its prompt
    row = _row(server, template)
    assert row["requests"] == NUM_REQUESTS and row["distinct_static_prefixes"] == 1
    assert row["source"] == f"tests/e2e/test_integrations_live.py:{line}"  # chain.batch(...)


def test_llamaindex_query_engine_switched_by_its_imports(server: ServerProcess):
    index = SummaryIndex([TextNode(text=f"Warehouse {w} is open from {6 + w} to {18 + w}.") for w in range(7)])

    def run(qa_template: Any, openai_like: Any) -> tuple[Recorder, str, int]:
        recorder = Recorder()
        qa = qa_template.from_messages(
            [
                ("system", "Current time: {now}. You answer from ACME's handbook. " + POLICY),
                ("user", "Context:\n{context_str}\n\nQuestion: {query_str}"),
            ]
        )
        llm = openai_like(
            model="tiny",
            api_base=server.api_url,
            api_key="-",
            is_chat_model=True,
            max_tokens=2,
            http_client=recorder.client,
        )

        def ask(i: int) -> int:
            now = (START + timedelta(minutes=7 * i)).isoformat()
            engine = index.as_query_engine(llm=llm, text_qa_template=qa.partial_format(now=now))
            engine.query(f"When does warehouse {i % 7} open?")
            return sys._getframe().f_lineno - 1

        ask(0)
        with ThreadPoolExecutor(CONCURRENCY) as pool:
            (line, *_) = set(pool.map(ask, range(1, NUM_REQUESTS)))
        return recorder, getattr(qa, "radixgate_template", ""), line

    _flush(server)
    before, _, _ = run(PlainQATemplate, PlainOpenAILike)
    _flush(server)
    after, template, line = run(rg_llamaindex.ChatPromptTemplate, rg_llamaindex.OpenAILike)
    _report("LlamaIndex", before, after)
    assert after.hit_rate() >= 0.9 * after.ideal() and after.hit_rate() >= 2 * before.hit_rate()
    assert template.startswith("tests/e2e/test_integrations_live.py:")
    row = _row(server, template)
    assert row["requests"] == NUM_REQUESTS and row["distinct_static_prefixes"] == 1
    assert row["source"] == f"tests/e2e/test_integrations_live.py:{line}"  # engine.query(...)
