"""Template credit from the gateway to the tree, over the shared engine: a returning SDK-tagged
template's static prefix gets `cache_credit` (its first request none), the question after it none;
`/generate`'s `cache_credit` (what a front sends its radixgate workers) reaches the tree as sent and
survives the native encoding; a bad one is a 400 naming it. The tree keeps the credit under every
policy; only `template` evicts by it (tests/engine/kvcache/test_template_credit.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from radixgate.engine.protocol import MAX_CREDIT_REQUESTS, SamplingParams
from radixgate.gateway.generation import TEMPLATE_CREDIT_REQUESTS


@pytest.fixture
def tree(client: TestClient, worker) -> Iterator:
    assert client.post("/flush_cache").status_code == 200  # every node is this test's
    yield worker.engine.cache_manager.radix_cache
    assert client.post("/flush_cache").status_code == 200


def _credited(cache) -> list[tuple[int, int]]:
    """(depth, credit) of every credited node."""
    return sorted((node.depth, node.credit) for node in cache.iter_nodes() if node.credit)


def test_a_returning_templates_static_prefix_is_credited_and_its_first_request_is_not(
    client: TestClient, tree, long_prefix
) -> None:
    static = long_prefix("credit-routes", sentences=8)
    meta = {"prompt_template": "credit-routes", "static_prefix_chars": str(len(static))}

    def ask(question: str) -> dict:
        body = {"model": "tiny", "prompt": f"{static} {question}", "max_tokens": 1, "temperature": 0, "metadata": meta}
        r = client.post("/v1/completions", json=body)
        assert r.status_code == 200, r.text
        return r.json()["usage"]

    first = ask("What is the first question about?")
    assert _credited(tree) == []  # nothing measured of the template yet
    ask("And what would a second question ask?")
    credited = _credited(tree)
    assert credited, "the returning template's static prefix got no credit"
    deepest = max(depth for depth, _ in credited)
    assert 0 < deepest < first["prompt_tokens"]  # the static prefix only, never the question after it
    assert all(credit >= TEMPLATE_CREDIT_REQUESTS for _, credit in credited)  # ticks: >= 1 per request


def test_an_untagged_repeat_gets_no_credit(client: TestClient, tree, long_prefix) -> None:
    prompt = long_prefix("credit-untagged", sentences=8)
    for _ in range(2):
        body = {"model": "tiny", "prompt": prompt, "max_tokens": 1, "temperature": 0}
        assert client.post("/v1/completions", json=body).status_code == 200
    assert _credited(tree) == []


def test_generate_cache_credit_reaches_the_tree_and_a_bad_one_is_a_400(client: TestClient, tree) -> None:
    ids = list(range(40, 90))
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 1}, "cache_credit": [32, 5]}
    r = client.post("/generate", json=body)
    assert r.status_code == 200, r.text
    credited = _credited(tree)
    assert credited and max(depth for depth, _ in credited) <= 32
    for bad in ([0, 5], [32, 0], [32, MAX_CREDIT_REQUESTS + 1], [32], "lots", [1.5, 2]):
        r = client.post("/generate", json={**body, "cache_credit": bad})
        assert r.status_code == 400, bad
        assert r.json()["error"]["param"] == "cache_credit" and "prefix tokens" in r.json()["error"]["message"], bad
    assert client.post("/generate", json={**body, "cache_credit": []}).status_code == 200  # none asked


def test_cache_credit_survives_the_native_encoding_a_front_sends() -> None:
    sampling = SamplingParams(max_new_tokens=2, cache_credit=(48, TEMPLATE_CREDIT_REQUESTS))
    native = sampling.to_native()
    assert native["cache_credit"] == [48, TEMPLATE_CREDIT_REQUESTS]
    assert SamplingParams.from_native(native) == sampling
    with pytest.raises(ValueError, match="cache_credit"):
        SamplingParams(cache_credit=(48, 0))
