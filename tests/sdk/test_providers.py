"""Provider cache hints from one Prompt: Anthropic requests (validated against the `anthropic` package's
request types, breakpoints within the limits) and OpenAI's prompt_cache_key. No network."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import radixgate as rg
from radixgate._providers import ANTHROPIC_MIN_CACHE_TOKENS, anthropic_min_cache_tokens

anthropic_types = pytest.importorskip("anthropic.types")
from pydantic import TypeAdapter  # noqa: E402

REQUEST = TypeAdapter(anthropic_types.MessageCreateParams)
SONNET = "claude-sonnet-4-5-20250929"  # 1,024-token minimum


def _text(num_tokens: int, word: str) -> str:
    return f"{word} " * num_tokens  # one cl100k token per repeated word


def _validated(request: dict[str, Any]) -> dict[str, Any]:
    """`request` through the anthropic package's MessageCreateParams, lazy iterables consumed."""

    def force(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: force(v) for k, v in value.items()}
        if isinstance(value, (list, tuple, Iterator)) or type(value).__name__ == "ValidatorIterator":
            return [force(v) for v in value]
        return value

    return force(REQUEST.validate_python(request))


def _breakpoints(request: dict[str, Any]) -> list[str]:
    blocks = list(request.get("system", []))
    for message in request["messages"]:
        blocks.extend(message["content"])
    return [b["text"].split()[0] for b in blocks if "cache_control" in b]


def _prompt(*segments: rg.Segment) -> rg.Prompt:
    return rg.Prompt(*segments, rg.context("Now: 2026-12-01T08:00"), rg.user("Where is my order?"), template="t")


def test_one_cacheable_segment():
    request = _prompt(rg.system(_text(1200, "policy"))).to_anthropic(model=SONNET, max_tokens=64)
    assert _validated(request)["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert _breakpoints(request) == ["policy"]
    assert request["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Now: 2026-12-01T08:00\n\nWhere is my order?"}]}
    ]


def test_two_segments_and_history_break_where_other_requests_share():
    past = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi there"}]
    prompt = _prompt(rg.system(_text(1100, "policy")), rg.document(_text(300, "manual")), rg.history(past))
    request = prompt.to_anthropic(model=SONNET, max_tokens=64, ttl="1h", temperature=0.0)
    _validated(request)
    assert _breakpoints(request) == ["policy", "manual", "hi"]  # the end of each cacheable level
    assert request["messages"][-1]["role"] == "user" and request["temperature"] == 0.0
    assert request["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}


def test_five_segments_get_at_most_four_breakpoints_none_under_the_minimum():
    prompt = _prompt(
        rg.system(_text(600, "intro")),  # under 1,024 on its own: no breakpoint here
        rg.system(_text(600, "rules"), name="rules"),
        rg.examples([("a", "b")]),
        rg.document(_text(200, "docone"), name="d1"),
        rg.document(_text(200, "doctwo"), name="d2"),
    )
    request = prompt.to_anthropic(model=SONNET, max_tokens=64)
    _validated(request)
    assert len(request["system"]) == 5
    assert sorted(_breakpoints(request)) == sorted(["rules", "#", "docone", "doctwo"])
    haiku = prompt.to_anthropic(model="claude-3-5-haiku-20241022", max_tokens=64, warn=False)
    assert _breakpoints(haiku) == ["doctwo"]  # 2,048 minimum: only the whole prefix is long enough


def test_short_static_prefix_warns_and_marks_nothing():
    prompt = _prompt(rg.system(_text(1500, "policy")))
    with pytest.warns(rg.ShortStaticPrefixWarning, match="4096"):
        request = prompt.to_anthropic(model="claude-haiku-4-5-20251001", max_tokens=64)
    assert _breakpoints(_validated(request)) == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        prompt.to_anthropic(model=SONNET, max_tokens=64)


def test_minimum_table_matches_the_longest_prefix_and_is_conservative_for_unknown_models():
    assert anthropic_min_cache_tokens("claude-opus-4-5-20251101") == 4096
    assert anthropic_min_cache_tokens("claude-opus-4-20250514") == 1024
    assert anthropic_min_cache_tokens("claude-3-haiku-20240307") == 2048
    assert anthropic_min_cache_tokens("claude-next") == max(ANTHROPIC_MIN_CACHE_TOKENS.values())


def test_history_with_a_system_role_is_refused():
    prompt = _prompt(rg.system("x"), rg.history([{"role": "system", "content": "no"}]))
    with pytest.raises(ValueError, match="user' or 'assistant"):
        prompt.to_anthropic(model=SONNET, max_tokens=8, warn=False)


def test_openai_prompt_cache_key_is_the_static_hash_shared_across_tails():
    base = rg.Prompt(rg.system(_text(1100, "policy")), template="support")
    one = base.extend(rg.context("User 1"), rg.user("A?"))
    two = base.extend(rg.context("User 2"), rg.document("other docs"), rg.user("B?"))
    assert one.prompt_cache_key == two.prompt_cache_key == base.static_prefix_hash
    assert rg.openai_cache_hints(one) == {"prompt_cache_key": one.static_prefix_hash}
    other = rg.Prompt(rg.system(_text(1100, "policies")), rg.user("A?"), template="support")
    assert other.prompt_cache_key != one.prompt_cache_key
    with pytest.warns(rg.ShortStaticPrefixWarning, match="1024"):
        rg.openai_cache_hints(rg.Prompt(rg.system("Be brief."), rg.user("Hi"), template="short"))


def test_client_sends_the_prompt_cache_key_for_prompts_only():
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        usage = {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
        choice = {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
        return httpx.Response(200, json={"id": "c", "created": 0, "model": "m", "choices": [choice], "usage": usage})

    http = httpx.Client(transport=httpx.MockTransport(handler))
    with rg.Client(base_url="http://radixgate.test/v1", http_client=http, model="m", send_metadata=False) as client:
        prompt = rg.Prompt(rg.system("Be brief."), rg.user("Hi"), template="t")
        client.chat(prompt)
        client.chat([{"role": "user", "content": "Hi"}])
    assert bodies[0]["prompt_cache_key"] == prompt.static_prefix_hash and "metadata" not in bodies[0]
    assert "prompt_cache_key" not in bodies[1]
