"""History kept as generated, through the real `openai` client in-process: a conversation at
temperature 1 keeps the cache through every earlier reply; behind a template that rewrites replies
it cannot, and the diagnostics say `history_rerendered`. Also the miss metrics, and that tokens
recomputed after a retraction are never counted as cache hits."""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from typing import Any

import openai
from fastapi.testclient import TestClient
from recording_worker import Recording

from radixgate.gateway.app import create_app
from radixgate.gateway.config import GatewayConfig
from radixgate.gateway.workers.worker import LocalWorker

PAGE = 16  # the paged_worker's


def conversation(client: TestClient, turns: int, max_tokens: int, **request: Any) -> list[dict[str, Any]]:
    """`turns` chat turns through the `openai` client; per turn its usage and diagnostics."""
    sdk = openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=client, max_retries=0)
    tag = uuid.uuid4().hex[:8]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": f"[{tag}] You are a storyteller. Keep every story short and vivid."}
    ]
    previous, rows = None, []
    for turn in range(turns):
        messages.append({"role": "user", "content": f"Turn {turn}: continue the story about the lighthouse."})
        answer = sdk.chat.completions.create(
            model="tiny",
            messages=messages,  # type: ignore[arg-type]
            max_tokens=max_tokens,
            temperature=1.0,
            seed=100 + turn,
            extra_body={"cache_diagnostics": {"previous_response_id": previous}},
            **request,
        )
        assert answer.usage is not None and answer.usage.prompt_tokens_details is not None
        rows.append(
            {
                "prompt": answer.usage.prompt_tokens,
                "completion": answer.usage.completion_tokens,
                "cached": answer.usage.prompt_tokens_details.cached_tokens,
                "diagnostics": (answer.model_extra or {})["cache_diagnostics"],
            }
        )
        messages.append({"role": "assistant", "content": answer.choices[0].message.content})
        previous = answer.id
    return rows


def reusable(rows: Sequence[dict[str, Any]], turn: int) -> int:
    return rows[turn - 1]["prompt"] + rows[turn - 1]["completion"]


def test_turns_at_temperature_1_keep_the_cache_through_every_reply(paged_worker: LocalWorker) -> None:
    """Without keeping, the loss: test_cache_diagnostics.py's history_rerendered case and
    `radixgate bench multi-turn`."""
    with TestClient(create_app(GatewayConfig(), worker=paged_worker)) as client:
        kept = conversation(client, 5, 12)  # `radixgate bench multi-turn` runs 10 turns
    for turn in range(1, 5):
        assert kept[turn]["cached"] >= reusable(kept, turn) - PAGE - 1, (turn, kept)
        assert kept[turn]["diagnostics"]["cache_miss_reason"] is None
    paged_worker.check_idle_invariant()


class TransformingTemplate:
    """The real worker behind a chat template that rewrites each assistant message's text (as
    templates that drop reasoning blocks do): generated replies are never placed verbatim."""

    def __init__(self, inner: LocalWorker) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def render_chat(self, messages: Sequence[dict[str, Any]], tools: Any = None) -> str:
        rewritten = [dict(m, content=m["content"].upper()) if m["role"] == "assistant" else m for m in messages]
        return self.inner.render_chat(rewritten, tools)


def test_a_template_that_transforms_replies_is_diagnosed(paged_worker: LocalWorker) -> None:
    app = create_app(GatewayConfig(), worker=TransformingTemplate(paged_worker))  # type: ignore[arg-type]
    with TestClient(app) as client:
        sdk = openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=client, max_retries=0)
        messages: list[Any] = [{"role": "user", "content": f"[{uuid.uuid4().hex[:8]}] " + "Tell a story. " * 20}]
        first = sdk.chat.completions.create(model="tiny", messages=messages, max_tokens=40, seed=1)
        reply = first.choices[0].message.content or ""
        assert reply != reply.upper()
        follow = [*messages, {"role": "assistant", "content": reply}, {"role": "user", "content": "and then?"}]
        second = sdk.chat.completions.create(
            model="tiny",
            messages=follow,
            max_tokens=2,
            extra_body={"cache_diagnostics": {"previous_response_id": first.id}},
        )
        miss = (second.model_extra or {})["cache_diagnostics"]["cache_miss_reason"]
    assert miss is not None and miss["type"] == "history_rerendered" and miss["message_index"] == 1
    paged_worker.check_idle_invariant()


def metric(text: str, name: str, labels: str = "") -> float:
    pattern = re.escape(name) + (r"\{" + labels + r"[^}]*\}" if labels else r"(\{[^}]*\})?") + r" ([0-9.e+-]+)"
    return sum(float(m.group(m.lastindex or 1)) for m in re.finditer(pattern, text))


def test_misses_are_counted_by_reason_and_retracted_recomputes_never_count_as_hits() -> None:
    from radixgate.engine import Engine, EngineConfig

    engine = Engine(EngineConfig(model_path="tiny", max_total_tokens=320, page_size=16))
    try:
        with TestClient(create_app(GatewayConfig(), worker=LocalWorker(engine))) as client:
            prompts = [[1000 + (i * 131 + j * 7) % 90000 for j in range(70)] for i in range(6)]
            sampling = {"max_new_tokens": 24, "temperature": 0.0, "ignore_eos": True}
            answers = client.post("/generate", json={"input_ids": prompts, "sampling_params": sampling}).json()
            assert engine.stats()["num_retracted_reqs"] > 0  # the pool ran out: some were retracted, recomputed
            # a retracted request finds its own KV in the tree when re-admitted: never reported as cached
            assert [a["meta_info"]["cached_tokens"] for a in answers] == [0] * 6
            text = client.get("/metrics").text
            assert metric(text, "radixgate:prefix_cache_hits_total") == 0
            assert metric(text, "radixgate:cached_fraction_sum") == 0
            assert metric(text, "radixgate:cached_fraction_count") == 6
            assert metric(text, "radixgate:cache_missed_tokens_total", 'model_name="tiny",reason="cold"') == 6 * 70
            # a repeat is served from cache: counted as cached, its fraction near 1, no miss added
            fresh = {"input_ids": [7 + j for j in range(70)], "sampling_params": sampling | {"max_new_tokens": 1}}
            client.post("/generate", json=fresh)
            assert client.post("/generate", json=fresh).json()["meta_info"]["cached_tokens"] >= 70 - PAGE
            text = client.get("/metrics").text
            assert metric(text, "radixgate:cached_fraction_sum") >= (70 - PAGE) / 70
            assert metric(text, "radixgate:cache_missed_tokens_total") == 7 * 70
        engine.check_idle_invariant()
    finally:
        engine.shutdown()


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The forecast for a city.",
        "parameters": {
            "type": "object",
            # Lower-case letters only: at temperature 1 the tiny model can write characters the
            # template's JSON rendering escapes, and then the reply is (rightly) not placed verbatim.
            "properties": {"city": {"type": "string", "pattern": "^[a-z]{1,8}$"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}


def test_an_agent_loop_keeps_its_tool_calls(worker: LocalWorker) -> None:
    """A forced call at temperature 1 (its output is the arguments), sent back as the assistant's
    tool_calls: the next prompt begins with the previous one and holds the arguments as the ids they
    were generated as; the markup the template writes around them is new, and diagnosed so."""
    recording = Recording(worker)
    with TestClient(create_app(GatewayConfig(), worker=recording)) as client:  # type: ignore[arg-type]
        sdk = openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=client, max_retries=0)
        messages: list[Any] = [
            {"role": "system", "content": "[agent-loop] You plan trips. Ask for the weather first."},
            {"role": "user", "content": "Where should I go this weekend?"},
        ]
        choice = {"type": "function", "function": {"name": "get_weather"}}
        previous: Any = None
        for turn in range(3):
            answer = sdk.chat.completions.create(
                model="tiny",
                messages=messages,
                tools=[WEATHER],  # type: ignore[list-item]
                tool_choice=choice,  # type: ignore[arg-type]
                max_tokens=30,
                temperature=1.0,
                seed=7 + turn,  # seeded: a call the length cut leaves unfinished is not JSON, so not kept
                extra_body={"cache_diagnostics": {"previous_response_id": previous and previous.id}},
            )
            assert answer.usage is not None and answer.usage.prompt_tokens_details is not None
            assert answer.choices[0].finish_reason == "tool_calls", answer.choices[0]
            sent = recording.prompts[f"{answer.id}-0"]
            if previous is not None:
                before = recording.prompts[f"{previous.id}-0"]
                assert sent[: len(before)] == before
                assert answer.usage.prompt_tokens_details.cached_tokens >= len(before) - 1
                generated = recording.outputs[f"{previous.id}-0"]  # the ids, not a re-tokenization of the text
                generated = generated[:-1] if worker.detokenize(generated[-1:]) == "<|im_end|>" else generated
                assert any(sent[k : k + len(generated)] == generated for k in range(len(before), len(sent)))
                miss = (answer.model_extra or {})["cache_diagnostics"]["cache_miss_reason"]
                assert miss["type"] == "history_rerendered" and miss["diverged_at_token"] == len(before), miss
            call = answer.choices[0].message.tool_calls[0]  # type: ignore[index]
            messages.append({"role": "assistant", "content": None, "tool_calls": [call.model_dump()]})
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21 C."})
            messages.append({"role": "user", "content": "And after that?"})
            previous = answer
    worker.check_idle_invariant()
