"""Tool plans, forced-call grammars and streamed tool_calls deltas (no model needed), plus the
gateway's answers to requests that get tools or constraints wrong (the shared tiny engine)."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from radixgate.gateway.api.errors import APIError
from radixgate.gateway.features.tool_calls import ToolPlan
from radixgate.gateway.features.tool_parsers import get_parser

ADD = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
TOOLS = [{"type": "function", "function": {"name": "add", "parameters": ADD}}]


def _plan(tool_choice, parallel: bool = True) -> ToolPlan:
    return ToolPlan.of(TOOLS, tool_choice, parallel, get_parser("qwen25"))


def _stream(plan: ToolPlan, pieces: list[str], reason: str = "stop") -> tuple[list[dict], str]:
    stream = plan.stream()
    deltas = [d for piece in pieces for d in stream.feed(piece)]
    tail, finish = stream.finish(reason)
    return deltas + tail, finish


def _joined_calls(deltas: list[dict]) -> dict[int, dict]:
    calls: dict[int, dict] = {}
    for delta in deltas:
        for piece in delta.get("tool_calls", []):
            call = calls.setdefault(piece["index"], {"name": None, "arguments": ""})
            if "id" in piece:
                assert piece["id"].startswith("call_") and piece["type"] == "function"
                call["name"] = piece["function"]["name"]
            call["arguments"] += piece["function"].get("arguments", "")
    return calls


def test_auto_streams_text_then_calls_and_never_leaks_markup() -> None:
    pieces = ["Sure", ", one moment. <tool", "_call>\n", '{"name": "add", "arguments": {"a": 1}}\n</tool_call>']
    deltas, finish = _stream(_plan("auto"), pieces)
    content = "".join(d.get("content", "") for d in deltas)
    assert content == "Sure, one moment. "  # streamed as it came, up to where the call starts
    assert _joined_calls(deltas) == {0: {"name": "add", "arguments": '{"a": 1}'}}
    assert finish == "tool_calls"


def test_auto_malformed_call_comes_back_as_text() -> None:
    pieces = ["Hi <tool_call>", '{"name": "add", "argu']  # ended by a stop sequence, not the token limit
    deltas, finish = _stream(_plan("auto"), pieces, "stop")
    assert "".join(d.get("content", "") for d in deltas) == "Hi <tool_call>" + '{"name": "add", "argu'
    assert finish == "stop" and _joined_calls(deltas) == {}


def test_named_streams_arguments_as_they_come() -> None:
    plan = _plan({"type": "function", "function": {"name": "add"}})
    assert json.loads(plan.grammar()[1]) == ADD
    deltas, finish = _stream(plan, ['{"a"', ": 7}"])
    assert _joined_calls(deltas) == {0: {"name": "add", "arguments": '{"a": 7}'}} and finish == "tool_calls"


def test_required_grammar_and_result() -> None:
    kind, source = _plan("required", parallel=False).grammar()
    schema = json.loads(source)
    assert kind == "json_schema" and schema["maxItems"] == 1 and schema["minItems"] == 1
    content, calls, finish = _plan("required").result('[{"name": "add", "parameters": {"a": 2}}]', "stop")
    assert content is None and finish == "tool_calls"
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [("add", {"a": 2})]
    content, calls, finish = _plan("required").result('[{"name": "add", "param', "length")  # cut: see _length tests
    assert (content, [c["function"]["name"] for c in calls], finish) == (None, ["add"], "length")


@pytest.mark.parametrize(
    "tools, tool_choice, match",
    [
        (TOOLS, {"type": "function", "function": {"name": "sub"}}, "not in 'tools'"),
        (None, "required", "needs at least one tool"),
        (TOOLS, "sometimes", "tool_choice must be"),
        ([{"type": "function", "function": {"description": "no name"}}], "auto", "each tool must be"),
    ],
)
def test_bad_tool_requests_are_400(tools, tool_choice, match: str) -> None:
    with pytest.raises(APIError, match=match) as caught:
        ToolPlan.of(tools, tool_choice, True, get_parser("qwen25"))
    assert caught.value.status == 400


def test_gateway_answers_400_to_bad_history_schemas_and_mixed_constraints(client: TestClient) -> None:
    base = {"model": "tiny", "max_tokens": 4}
    broken_history = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function"}]},
    ]
    cases = [
        {"messages": broken_history, "tools": TOOLS},
        {"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema"}},
        {"messages": [{"role": "user", "content": "x"}], "guided_regex": "[0-9", "temperature": 0},
        {
            "messages": [{"role": "user", "content": "x"}],
            "guided_regex": "a",
            "response_format": {"type": "json_object"},
        },
    ]
    for body in cases:
        response = client.post("/v1/chat/completions", json={**base, **body})
        assert response.status_code == 400, (body, response.text)
        assert response.json()["error"]["message"]
    choice = client.post(
        "/v1/chat/completions",
        json={**base, "messages": [{"role": "user", "content": "x"}], "guided_choice": ["yes", "no"], "max_tokens": 8},
    ).json()["choices"][0]
    assert choice["message"]["content"] in ("yes", "no") and choice["finish_reason"] == "stop"


def test_completions_and_generate_take_the_constraint_extras(client: TestClient) -> None:
    text = client.post(
        "/v1/completions",
        json={"model": "tiny", "prompt": "Answer:", "max_tokens": 8, "structured_outputs": {"regex": "(yes|no)"}},
    ).json()["choices"][0]["text"]
    assert text in ("yes", "no")
    out = client.post(
        "/generate",
        json={"text": "Pick:", "sampling_params": {"ebnf": 'root ::= "red" | "blue"', "max_new_tokens": 8}},
    ).json()
    assert out["text"] in ("red", "blue") and out["meta_info"]["finish_reason"]["type"] == "stop"
    bad_schema = {"json_schema": "{not json", "max_new_tokens": 2}
    bad = client.post("/generate", json={"text": "x", "sampling_params": bad_schema})
    assert bad.status_code == 400 and "json_schema" in bad.json()["error"]["message"]
