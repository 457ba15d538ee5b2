"""`cache_diagnostics`: one scenario per reason, over a tiny engine with 16-token pages and a small
pool, with history keeping on and off. Every `diverged_at_token` is checked against the first index
where the two token sequences the engine received differ (the compared request's prompt followed by
what it generated, all of which the engine cached), read from a recording of what reached the engine."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from recording_worker import Recording

from radixgate.gateway.app import create_app
from radixgate.gateway.config import GatewayConfig
from radixgate.gateway.diagnostics.requests import counts_exactly
from radixgate.gateway.workers.remote import OpenAIWorker
from radixgate.gateway.workers.worker import LocalWorker

PAGE = 16
# (scenario, expected, reported, diverged_at_token, first differing index): `pytest -s` prints the table
REPORT: list[tuple[str, str, str, Any, Any]] = []


@pytest.fixture(autouse=True, scope="module")
def _print_report() -> Iterator[None]:
    yield
    print("\n| scenario | expected | reported | diverged_at_token | first differing index |")
    print("|---|---|---|---|---|")
    for row in REPORT:
        print("| " + " | ".join(str(x) for x in row) + " |")


def scenario() -> str:
    return os.environ.get("PYTEST_CURRENT_TEST", "?").split("::")[-1].split(" ")[0]


def first_difference(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


class Gateway:
    def __init__(self, worker: LocalWorker, **config: Any) -> None:
        self.worker = Recording(worker)
        self.client = TestClient(create_app(GatewayConfig(**config), worker=self.worker))  # type: ignore[arg-type]
        self.client.__enter__()

    def post(self, route: str, body: dict[str, Any], key: str | None = None, status: int = 200) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        r = self.client.post(route, json=body, headers=headers)
        assert r.status_code == status, r.text
        return r.json()

    def chat(self, messages: list[dict[str, Any]], previous: str | None = None, **extra: Any) -> dict[str, Any]:
        body = {"model": "tiny", "messages": messages, "max_tokens": 4, "temperature": 1.0, "seed": 7}
        return self.post(
            "/v1/chat/completions", body | {"cache_diagnostics": {"previous_response_id": previous}} | extra
        )

    def complete(self, prompt: str, previous: str | None = None, **extra: Any) -> dict[str, Any]:
        body = {
            "model": "tiny",
            "prompt": prompt,
            "max_tokens": 4,
            "cache_diagnostics": {"previous_response_id": previous},
        }
        return self.post("/v1/completions", body | extra)

    def sent(self, response_id: str, choice: int = 0) -> list[int]:
        return self.worker.prompts[f"{response_id}-{choice}"]

    def received(self, response_id: str, choice: int = 0) -> list[int]:
        """What the engine received and cached for that response: prompt, then the generated ids."""
        rid = f"{response_id}-{choice}"
        return self.worker.prompts[rid] + self.worker.outputs[rid]

    def close(self) -> None:
        self.client.__exit__(None, None, None)
        self.worker.inner.check_idle_invariant()


@pytest.fixture
def raw(paged_worker: LocalWorker) -> Iterator[Gateway]:
    """For raw prompts (completions, /generate), which history keeping never touches."""
    gw = Gateway(paged_worker)
    yield gw
    gw.close()


@pytest.fixture(params=[True, False], ids=["keeping", "no-keeping"])
def gateway(request: pytest.FixtureRequest, paged_worker: LocalWorker) -> Iterator[Gateway]:
    gw = Gateway(paged_worker, history_keeping=request.param)
    yield gw
    gw.close()


def uid() -> str:
    return uuid.uuid4().hex[:10]


def system(tag: str, sentences: int = 30) -> str:
    return " ".join(f"[{tag}] Rule {i} of the assistant stays fixed." for i in range(sentences))


def reason(answer: dict[str, Any]) -> dict[str, Any]:
    diagnostics = answer["cache_diagnostics"]
    assert diagnostics["cached_tokens"] == answer["usage"]["prompt_tokens_details"]["cached_tokens"]
    miss = diagnostics["cache_miss_reason"]
    assert miss is not None, diagnostics
    assert miss["cache_missed_input_tokens"] == answer["usage"]["prompt_tokens"] - diagnostics["cached_tokens"]
    return miss


def check_diverged(gw: Gateway, answer: dict[str, Any], compared: dict[str, Any], kind: str) -> dict[str, Any]:
    miss = reason(answer)
    first = first_difference(gw.sent(answer["id"]), gw.received(compared["id"]))
    REPORT.append((scenario(), kind, miss["type"], miss["diverged_at_token"], first))
    assert miss["type"] == kind, miss
    assert miss["diverged_at_token"] == first
    return miss


def report(expected: str, diagnostics: dict[str, Any], case: str = "") -> None:
    miss = diagnostics["cache_miss_reason"]
    REPORT.append(
        (scenario() + case, expected, miss["type"] if miss else "null", miss and miss["diverged_at_token"], "-")
    )


def test_full_reuse_is_null(gateway: Gateway) -> None:
    messages = [{"role": "system", "content": system(f"full-{uid()}")}, {"role": "user", "content": "hi"}]
    first = gateway.chat(messages)
    again = gateway.chat(messages, first["id"])
    report("null", again["cache_diagnostics"])
    assert again["cache_diagnostics"] == {
        "cached_tokens": again["usage"]["prompt_tokens_details"]["cached_tokens"],
        "cache_miss_reason": None,
    }
    assert again["cache_diagnostics"]["cached_tokens"] >= again["usage"]["prompt_tokens"] - PAGE


def test_system_changed_at_a_known_character(gateway: Gateway) -> None:
    text = system(f"sys-{uid()}")
    first = gateway.chat([{"role": "system", "content": text}, {"role": "user", "content": "hi"}])
    at = text.index("Rule 25")
    changed = text[:at] + "RULE" + text[at + 4 :]
    second = gateway.chat([{"role": "system", "content": changed}, {"role": "user", "content": "hi"}], first["id"])
    miss = check_diverged(gateway, second, first, "system_changed")
    assert miss["message_index"] == 0
    # the token it names is where the text changed: decoded, the prompt up to it ends at "Rule 25"'s space
    content = gateway.worker.detokenize(gateway.sent(second["id"])[: miss["diverged_at_token"]]).split("system\n")[1]
    assert text[:at].startswith(content) and len(content) >= at - 1


def test_an_earlier_message_changed(gateway: Gateway) -> None:
    tag = f"msg-{uid()}"
    history = [
        {"role": "system", "content": system(tag, 10)},
        {"role": "user", "content": f"{tag}: first question about the weather in Lisbon"},
        {"role": "assistant", "content": "It is sunny in Lisbon today, with a light breeze from the sea."},
        {"role": "user", "content": "and tomorrow?"},
    ]
    first = gateway.chat(history)
    edited = [*history[:3], {"role": "user", "content": "and the day after tomorrow?"}]
    edited[1] = {"role": "user", "content": f"{tag}: first question about the weather in Porto"}
    miss = check_diverged(gateway, gateway.chat(edited, first["id"]), first, "messages_changed")
    assert miss["message_index"] == 1


def test_tools_reordered(gateway: Gateway) -> None:
    def tool(name: str) -> dict[str, Any]:
        params = {"type": "object", "properties": {"q": {"type": "string"}}}
        return {"type": "function", "function": {"name": name, "description": f"look up {name}", "parameters": params}}

    messages = [{"role": "system", "content": system(f"tools-{uid()}", 10)}, {"role": "user", "content": "hi"}]
    first = gateway.chat(messages, tools=[tool("weather"), tool("news")])
    second = gateway.chat(messages, first["id"], tools=[tool("news"), tool("weather")])
    miss = check_diverged(gateway, second, first, "tools_changed")
    assert miss["message_index"] is None


def test_raw_prompt_changed_midway(raw: Gateway) -> None:
    gateway = raw
    tag = uid()
    text = system(f"raw-{tag}", 30)
    first = gateway.complete(text)
    at = len(text) // 2
    second = gateway.complete(text[:at] + " CHANGED " + text[at:], first["id"])
    miss = check_diverged(gateway, second, first, "prompt_changed")
    assert miss["message_index"] is None
    native = gateway.post(
        "/generate",
        {
            "text": text[:at] + " OTHER " + text[at:],
            "sampling_params": {"max_new_tokens": 2},
            "cache_diagnostics": {"previous_response_id": first["id"]},
            "rid": f"gen-{tag}",
        },
    )
    meta = native["meta_info"]
    assert meta["cache_diagnostics"]["cached_tokens"] == meta["cached_tokens"]
    assert meta["cache_diagnostics"]["cache_miss_reason"]["type"] == "prompt_changed"
    sent = gateway.worker.prompts[next(r for r in gateway.worker.prompts if r.endswith(f"gen-{tag}"))]
    assert meta["cache_diagnostics"]["cache_miss_reason"]["diverged_at_token"] == first_difference(
        sent, gateway.received(first["id"])
    )


def test_below_one_page(raw: Gateway) -> None:
    gateway = raw
    text = system(f"page-{uid()}", 20)
    first = gateway.complete("Alpha. " + text)
    second = gateway.complete("Beta. " + text, first["id"])
    miss = check_diverged(gateway, second, first, "below_page")
    assert miss["diverged_at_token"] < PAGE


def test_unknown_and_other_tenants_ids_are_not_found(paged_worker: LocalWorker) -> None:
    gw = Gateway(paged_worker, api_keys={"key-a": "tenant-a", "key-b": "tenant-b"})
    try:
        body = {"model": "tiny", "prompt": system("tenant-ids", 20), "max_tokens": 2}
        mine = gw.post("/v1/completions", body | {"cache_diagnostics": {"previous_response_id": None}}, "key-a")
        cases = (
            ("key-b", mine["id"], "another tenant's id"),
            ("key-a", "cmpl-x", "unknown id"),
            ("key-b", "cmpl-x", ""),
        )
        for key, previous, case in cases:
            answer = gw.post("/v1/completions", body | {"cache_diagnostics": {"previous_response_id": previous}}, key)
            report("previous_response_not_found", answer["cache_diagnostics"], f" ({case or 'unknown id, tenant b'})")
            assert reason(answer) == {
                "type": "previous_response_not_found",
                "cache_missed_input_tokens": answer["usage"]["prompt_tokens"]
                - answer["usage"]["prompt_tokens_details"]["cached_tokens"],
                "diverged_at_token": None,
                "message_index": None,
            }
        again = gw.post("/v1/completions", body | {"cache_diagnostics": {"previous_response_id": mine["id"]}}, "key-a")
        assert again["cache_diagnostics"]["cache_miss_reason"] is None
    finally:
        gw.close()


def fill(gateway: Gateway, tag: str) -> None:
    """6 x ~290 new tokens through the 2048-token pool (one batch): older prompts' pages go."""
    prompts = [system(f"{tag}-{i}", 30) for i in range(6)]
    gateway.post("/v1/completions", {"model": "tiny", "prompt": prompts, "max_tokens": 1})


def test_evicted_under_a_small_pool_and_cold(raw: Gateway) -> None:
    gateway, tag = raw, f"evict-{uid()}"
    text = system(tag, 30)
    first = gateway.complete(text)
    fill(gateway, f"{tag}-filler")
    recent = gateway.complete(text + " more", None)  # without an id: the recent prompt that shared more
    miss, shared = reason(recent), first_difference(gateway.sent(recent["id"]), gateway.received(first["id"]))
    REPORT.append((scenario() + " (id null)", "evicted", miss["type"], miss["diverged_at_token"], shared))
    assert miss["type"] == "evicted"
    assert miss["diverged_at_token"] == shared
    fill(gateway, f"{tag}-filler-again")
    again = gateway.complete(text, first["id"])
    check_diverged(gateway, again, first, "evicted")
    # without an id: against the tenant's recent prompts; the first one shared more than was cached
    question = " ".join(f"Question {i} is new." for i in range(8))
    recent = gateway.complete(text + question, None)  # `again` cached it again: the rest is new
    report("cold", recent["cache_diagnostics"])
    assert reason(recent)["type"] == "cold"
    cold = gateway.complete(system(f"{tag}-never-seen", 30), None)
    report("cold", cold["cache_diagnostics"])
    assert reason(cold)["type"] == "cold"


def test_history_rerendered_without_keeping_and_kept_with_it(paged_worker: LocalWorker) -> None:
    def floor(n: int) -> int:
        return n - n % PAGE

    for keeping in (True, False):
        gw = Gateway(paged_worker, history_keeping=keeping)
        try:
            messages = [
                {"role": "system", "content": system(f"hist-{uid()}", 10)},
                {"role": "user", "content": "tell me a story"},
            ]
            for seed in range(10):  # without keeping: until the re-tokenized reply departs a page before its end
                first = gw.chat(messages, max_tokens=24 if keeping else 40, seed=seed)
                reply = first["choices"][0]["message"]["content"]
                follow = [*messages, {"role": "assistant", "content": reply}, {"role": "user", "content": "go on"}]
                second = gw.chat(follow, first["id"])
                sent, received = gw.sent(second["id"]), gw.received(first["id"])
                if keeping or floor(first_difference(sent, received)) < floor(min(len(sent), len(received)) - 1):
                    break
            if keeping:
                report("null (history kept)", second["cache_diagnostics"])
                assert second["cache_diagnostics"]["cache_miss_reason"] is None
                assert sent[: len(received)] == received
            else:
                miss = check_diverged(gw, second, first, "history_rerendered")
                assert miss["message_index"] == 2
        finally:
            gw.close()


def test_streaming_and_several_choices(gateway: Gateway) -> None:
    text = system(f"stream-{uid()}")
    first = gateway.chat([{"role": "system", "content": text}, {"role": "user", "content": "hi"}])
    changed = [{"role": "system", "content": text.replace("Rule 20", "RULE 20")}, {"role": "user", "content": "hi"}]
    body = {
        "model": "tiny",
        "messages": changed,
        "max_tokens": 4,
        "stream": True,
        "n": 2,
        "cache_diagnostics": {"previous_response_id": first["id"]},
    }
    with gateway.client.stream("POST", "/v1/chat/completions", json=body) as r:
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    last = events[-1]
    assert last["choices"] == [] and last["usage"] is not None  # the usage chunk, though include_usage was not set
    finishing = {c["index"]: c["cache_diagnostics"] for e in events for c in e["choices"] if c.get("finish_reason")}
    assert sorted(finishing) == [0, 1] and last["cache_diagnostics"] == finishing[0]
    for i, diagnostics in finishing.items():  # a choice admitted after the other's prefill hits its prefix
        sent, miss = gateway.sent(last["id"], i), diagnostics["cache_miss_reason"]
        if miss is None:
            assert diagnostics["cached_tokens"] >= len(sent) - PAGE
        else:
            shared = first_difference(sent, gateway.received(first["id"]))
            REPORT.append(
                (scenario() + f" (choice {i})", "system_changed", miss["type"], miss["diverged_at_token"], shared)
            )
            assert miss["type"] == "system_changed"
            assert miss["diverged_at_token"] == shared
    assert any(d["cache_miss_reason"] is not None for d in finishing.values())
    changed[0]["content"] = text.replace("Rule 21", "RULE 21")
    whole = gateway.chat(changed, first["id"], n=2)
    reasons = [c["cache_diagnostics"]["cache_miss_reason"] for c in whole["choices"]]
    assert whole["cache_diagnostics"] == whole["choices"][0]["cache_diagnostics"]
    assert {r["type"] for r in reasons if r is not None} == {"system_changed"}
    plain = gateway.post("/v1/chat/completions", {"model": "tiny", "messages": changed, "max_tokens": 1})
    assert "cache_diagnostics" not in plain and "cache_diagnostics" not in plain["choices"][0]


@pytest.mark.parametrize(
    ("value", "param"),
    [
        (3, "cache_diagnostics"),
        ("id", "cache_diagnostics"),
        ({"previous_response_id": 5}, "cache_diagnostics.previous_response_id"),
        ({"previous_message_id": "x"}, "cache_diagnostics.previous_message_id"),
    ],
)
@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/completions", "/generate"])
def test_a_bad_field_is_a_400_naming_it(client: TestClient, route: str, value: Any, param: str) -> None:
    body: dict[str, Any] = {"model": "tiny", "max_tokens": 1, "cache_diagnostics": value}
    if route == "/generate":
        body = {"text": "hi", "sampling_params": {"max_new_tokens": 1}, "cache_diagnostics": value}
    elif route == "/v1/completions":
        body["prompt"] = "hi"
    else:
        body["messages"] = [{"role": "user", "content": "hi"}]
    r = client.post(route, json=body)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


def test_foreign_workers_answer_unavailable(worker: LocalWorker, make_client: Callable[..., TestClient]) -> None:
    assert counts_exactly(worker)
    assert not counts_exactly(OpenAIWorker("http://127.0.0.1:9", None, worker.tokenize))
