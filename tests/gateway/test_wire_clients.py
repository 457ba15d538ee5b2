"""Frameworks over `/v1/responses` and `/v1/messages`, in-process over the shared engine: LangChain's
`ChatOpenAI(use_responses_api=True)` (invoke and stream), `langchain-anthropic`'s `ChatAnthropic`
(invoke, stream, a forced tool), one `openai-agents` turn with a forced function tool, and LiteLLM's
`anthropic/` provider (completion, stream, a forced tool)."""

from __future__ import annotations

import asyncio
import json
import os

import anthropic
import httpx
import pytest
from fastapi.testclient import TestClient

WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 8}},
    "required": ["city"],
    "additionalProperties": False,
}


def test_langchain_chat_openai_on_the_responses_api(client: TestClient) -> None:
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(
        model="tiny",
        base_url=f"{client.base_url}/v1",
        api_key="unused",
        http_client=client,
        use_responses_api=True,
        temperature=0,
        max_tokens=5,
        max_retries=0,
    )
    answer = llm.invoke("[lc-responses] Name three rivers.")
    assert answer.text and answer.usage_metadata is not None and answer.usage_metadata["output_tokens"] == 5
    chunks = list(llm.stream("[lc-responses] Name three rivers."))
    streamed = "".join(c.text for c in chunks)
    assert streamed == answer.text  # greedy: the same words, one delta at a time
    assert sum((c.usage_metadata or {}).get("output_tokens", 0) for c in chunks) == 5
    tool = {"type": "function", "function": {"name": "get_weather", "description": "", "parameters": WEATHER_SCHEMA}}
    forced = llm.model_copy(update={"max_tokens": 100}).bind_tools([tool], tool_choice="get_weather")
    called = forced.invoke("[lc-responses] Weather in Rome?")
    assert called.tool_calls and called.tool_calls[0]["name"] == "get_weather"
    assert set(called.tool_calls[0]["args"]) == {"city"}


def test_langchain_chat_anthropic(client: TestClient) -> None:
    from langchain_anthropic import ChatAnthropic

    llm = ChatAnthropic(model="tiny", api_key="unused", temperature=0, max_tokens=5, max_retries=0)
    # ChatAnthropic builds its own httpx client; point its anthropic client at the app instead
    llm.__dict__["_client"] = anthropic.Anthropic(
        base_url=str(client.base_url), api_key="unused", http_client=client, max_retries=0
    )
    answer = llm.invoke("[lc-anthropic] Name three rivers.")
    assert answer.text and answer.usage_metadata is not None and answer.usage_metadata["output_tokens"] == 5
    assert answer.response_metadata["stop_reason"] == "max_tokens"
    streamed = "".join(c.text for c in llm.stream("[lc-anthropic] Name three rivers."))
    assert streamed == answer.text
    tool = {"name": "get_weather", "description": "The weather.", "input_schema": WEATHER_SCHEMA}
    called = llm.bind_tools([tool], tool_choice="get_weather").invoke("[lc-anthropic] Weather in Oslo?", max_tokens=100)
    assert called.tool_calls and called.tool_calls[0]["name"] == "get_weather"
    assert set(called.tool_calls[0]["args"]) == {"city"}


def test_openai_agents_turn_with_a_forced_tool(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")
    from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, function_tool
    from openai import AsyncOpenAI

    calls: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        calls.append(city)
        return f"Sunny in {city}"

    async def run() -> object:
        transport = httpx.ASGITransport(app=client.app)
        async with httpx.AsyncClient(transport=transport, base_url=str(client.base_url)) as http:
            sdk = AsyncOpenAI(base_url=f"{client.base_url}/v1", api_key="unused", http_client=http, max_retries=0)
            agent = Agent(
                name="weather",
                instructions="Call get_weather for the city the user names.",
                tools=[get_weather],
                model=OpenAIResponsesModel(model="tiny", openai_client=sdk),
                model_settings=ModelSettings(tool_choice="get_weather", max_tokens=100, temperature=0),
                tool_use_behavior="stop_on_first_tool",
            )
            return await asyncio.wait_for(Runner.run(agent, "[agents] Weather in Lima?", max_turns=2), timeout=120)

    assert os.environ["OPENAI_AGENTS_DISABLE_TRACING"] == "1"
    result = asyncio.run(run())
    assert len(calls) == 1 and result.final_output == f"Sunny in {calls[0]}"  # type: ignore[attr-defined]
    call = next(item for item in result.new_items if item.type == "tool_call_item")  # type: ignore[attr-defined]
    assert json.loads(call.raw_item.arguments) == {"city": calls[0]}


def test_litellm_anthropic_provider(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no download of the cost map
    import litellm
    from litellm.llms.custom_httpx.http_handler import HTTPHandler

    def complete(**kwargs: object) -> object:
        return litellm.completion(
            model="anthropic/tiny", api_base=str(client.base_url), api_key="unused", temperature=0,
            client=HTTPHandler(client=client), **kwargs,
        )  # fmt: skip

    user = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "[litellm] Name a river."}]
    answer = complete(messages=user, max_tokens=4)
    assert answer.choices[0].finish_reason == "length" and answer.usage.completion_tokens == 4  # type: ignore[attr-defined]
    streamed = complete(messages=user, max_tokens=4, stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in streamed)  # type: ignore[attr-defined]
    assert text == answer.choices[0].message.content  # type: ignore[attr-defined]
    tool = {"type": "function", "function": {"name": "get_weather", "description": "", "parameters": WEATHER_SCHEMA}}
    called = complete(
        messages=user[1:],
        tools=[tool],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=100,
    )
    (call,) = called.choices[0].message.tool_calls  # type: ignore[attr-defined]
    assert call.function.name == "get_weather" and set(json.loads(call.function.arguments)) == {"city"}
