"""`/v1/embeddings` through openai, LangChain and LlamaIndex, equal to transformers' last hidden
state pooled the same way (last token, after the final norm, L2-normalised); tenants, metrics, the
400s that name their field, and the capability on pools of workers."""

from __future__ import annotations

import base64
import socket
import struct
import time

import openai
import pytest
import torch
from fastapi.testclient import TestClient
from hf_reference import hf_embeddings
from in_thread_server import serve_in_thread

from radixgate.gateway.app import app_state, create_app
from radixgate.gateway.config import GatewayConfig
from radixgate.gateway.workers.pool import WorkerPool

TOLERANCE = 1e-5
TEXTS = ["The radix tree keeps shared prefixes once.", "embeddings: the last token's state", "x"]
KEYS = {"key-a": "tenant-a", "key-b": "tenant-b"}
ADMIN = "admin-key"


@pytest.fixture(scope="module")
def reference(worker) -> torch.Tensor:
    """transformers' vectors for TEXTS, tokenized as the route does (the tokenizer's special tokens)."""
    from radixgate.engine.models.tiny import ensure_tiny_checkpoint

    ids = [worker.tokenize(t, add_special_tokens=True) for t in TEXTS]
    return hf_embeddings(ensure_tiny_checkpoint(), ids)


def _max_diff(vectors, reference: torch.Tensor) -> float:
    return (torch.tensor(vectors, dtype=torch.float32) - reference).abs().max().item()


def test_openai_client_float_and_base64_match_transformers(client: TestClient, reference: torch.Tensor) -> None:
    oai = openai.OpenAI(base_url="http://testserver/v1", api_key="none", http_client=client)
    default = oai.embeddings.create(model="tiny", input=TEXTS)  # the client asks for base64 and decodes it
    assert [d.index for d in default.data] == [0, 1, 2]
    assert _max_diff([d.embedding for d in default.data], reference) < TOLERANCE
    floats = oai.embeddings.create(model="tiny", input=TEXTS, encoding_format="float")
    assert [d.embedding for d in floats.data] == [d.embedding for d in default.data]
    assert (
        default.usage.prompt_tokens
        == default.usage.total_tokens
        == sum(len(client.post("/tokenize", json={"prompt": t}).json()["tokens"]) for t in TEXTS)
    )
    one = {"model": "tiny", "input": TEXTS[0]}
    packed = base64.b64decode(
        client.post("/v1/embeddings", json={**one, "encoding_format": "base64"}).json()["data"][0]["embedding"]
    )
    plain = client.post("/v1/embeddings", json=one).json()["data"][0]["embedding"]  # float is the default
    assert list(struct.unpack(f"<{len(packed) // 4}f", packed)) == plain  # little-endian float32, bit for bit


def test_langchain_and_llamaindex_match_transformers(client: TestClient, reference: torch.Tensor) -> None:
    from langchain_openai import OpenAIEmbeddings
    from llama_index.embeddings.openai_like import OpenAILikeEmbedding

    lc = OpenAIEmbeddings(
        model="tiny",
        base_url="http://testserver/v1",
        api_key="none",
        http_client=client,
        check_embedding_ctx_length=False,
    )
    assert _max_diff(lc.embed_documents(TEXTS), reference) < TOLERANCE
    assert _max_diff([lc.embed_query(TEXTS[1])], reference[1:2]) < TOLERANCE
    li = OpenAILikeEmbedding(model_name="tiny", api_base="http://testserver/v1", http_client=client, max_retries=0)
    assert _max_diff(li.get_text_embedding_batch(TEXTS), reference) < TOLERANCE
    assert _max_diff([li.get_query_embedding(TEXTS[2])], reference[2:3]) < TOLERANCE


def test_token_id_inputs_batched_and_alone(client: TestClient, worker, reference: torch.Tensor) -> None:
    ids = [worker.tokenize(t, add_special_tokens=True) for t in TEXTS]
    batched = client.post("/v1/embeddings", json={"model": "tiny", "input": ids}).json()
    assert _max_diff([d["embedding"] for d in batched["data"]], reference) < TOLERANCE
    alone = client.post("/v1/embeddings", json={"model": "tiny", "input": ids[0]}).json()
    assert _max_diff([alone["data"][0]["embedding"]], reference[:1]) < TOLERANCE
    assert alone["usage"]["prompt_tokens"] == len(ids[0])
    native = client.post("/v1/embeddings", json={"model": "tiny", "input": ids[0], "dimensions": len(reference[0])})
    assert native.status_code == 200  # the model's own size is accepted


@pytest.mark.parametrize(
    ("body", "param", "fragment"),
    [
        ({"input": ""}, "input", "empty string"),
        ({"input": []}, "input", "empty"),
        ({"input": [[1, 2], []]}, "input", "empty token list"),
        ({"input": ["text", [1, 2]]}, "input", "mixes strings and token ids"),
        ({"input": ["text", 5]}, "input", "mixes strings and token ids"),
        ({"input": [1] * 8193}, "input", "context is 8192 tokens"),
        ({"input": "x", "encoding_format": "int8"}, "encoding_format", "float"),
        ({"input": "x", "dimensions": 64}, "dimensions", "not a Matryoshka model"),
        ({"input": "x", "truncate_prompt_tokens": 8}, "truncate_prompt_tokens", "not supported"),
        ({"input": "x", "normalize": False}, "normalize", "always L2-normalised"),
        ({"input": [[1, 10**9]]}, "input", "outside the vocabulary"),
        ({"input": ["x"] * 2049}, "input", "at most 2048"),
    ],
)
def test_bad_requests_are_400s_naming_the_field(client: TestClient, body, param, fragment) -> None:
    r = client.post("/v1/embeddings", json={"model": "tiny", **body})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and fragment in error["message"], error


def test_unknown_model_is_404(client: TestClient) -> None:
    r = client.post("/v1/embeddings", json={"model": "nope", "input": "x"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


def test_tenants_are_counted_apart_and_limited(make_client) -> None:
    keyed = make_client(api_keys=KEYS, admin_api_keys=[ADMIN], rate_limit_tpm=40)
    auth = {k: {"Authorization": f"Bearer {k}"} for k in (*KEYS, ADMIN)}
    assert keyed.post("/v1/embeddings", json={"model": "tiny", "input": "x"}).status_code == 401
    r = keyed.post("/v1/embeddings", headers=auth["key-a"], json={"model": "tiny", "input": ["tenant a", "again"]})
    assert r.status_code == 200
    tokens_a = r.json()["usage"]["prompt_tokens"]
    a_view = keyed.get("/dashboard/data", headers=auth["key-a"]).json()
    b_view = keyed.get("/dashboard/data", headers=auth["key-b"]).json()
    assert sum(p["requests"] for p in a_view["points"]) == 1
    assert sum(p["embedding_tokens_per_s"] for p in a_view["points"]) == tokens_a
    assert sum(p["requests"] + p["embedding_tokens_per_s"] for p in b_view["points"]) == 0  # nothing of a's
    metrics = keyed.get("/metrics", headers=auth[ADMIN]).text
    assert 'radixgate:requests_total{endpoint="embeddings",model_name="tiny",outcome="ok"} 1.0' in metrics
    # the same token-per-minute limit as generation (admitted while the bucket is positive, billed in
    # full): a's budget runs out, b's is its own
    spend = {"model": "tiny", "input": [[7] * 39]}
    assert keyed.post("/v1/embeddings", headers=auth["key-a"], json=spend).status_code == 200
    over = keyed.post("/v1/embeddings", headers=auth["key-a"], json=spend)
    assert over.status_code == 429 and over.json()["error"]["code"] == "rate_limit_tokens"
    assert (
        keyed.post("/v1/embeddings", headers=auth["key-b"], json={"model": "tiny", "input": [[7] * 39]}).status_code
        == 200
    )
    assert app_state(keyed.app).num_queued == 0


def _closed_port() -> int:
    """A port nothing listens on: connecting to it is refused."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        return closed.getsockname()[1]


def _front(worker, urls: list[str]) -> TestClient:
    """A routing gateway over the workers at `urls`."""
    pool = WorkerPool(worker.tokenizer, "tiny", health_check_interval_s=0.2)
    for url in urls:
        pool.add_remote(url)
    return TestClient(create_app(GatewayConfig(), worker=pool))


def test_pool_routes_embeddings_only_to_members_that_embed(worker) -> None:
    """A radixgate member gets them at its own /v1/embeddings (an OpenAI-compatible member beside it
    never does); a pool with no member that embeds is a 400, one whose embedders are down a 503."""
    back = create_app(GatewayConfig(), worker=worker)
    ids = [worker.tokenize(t, add_special_tokens=True) for t in TEXTS]
    body = {"model": "tiny", "input": ids}
    with TestClient(back) as direct:
        expected = direct.post("/v1/embeddings", json=body).json()["data"]
    refused = f"http://127.0.0.1:{_closed_port()}"
    with serve_in_thread(back, "worker") as url, _front(worker, [url, f"openai+{refused}"]) as front:
        pool = app_state(front.app).worker
        deadline = time.monotonic() + 30
        while not any(m.is_healthy for m in pool.members.values()):
            assert time.monotonic() < deadline, "the radixgate member never became healthy"
            time.sleep(0.05)
        r = front.post("/v1/embeddings", json=body)
        assert r.status_code == 200, r.text
        assert r.json()["data"] == expected
        kinds = {m.kind: m.num_requests for m in pool.members.values()}
        assert kinds == {"radixgate": 1, "openai": 0}
    with serve_in_thread(back, "worker") as url, _front(worker, [f"openai+{url}"]) as front:
        r = front.post("/v1/embeddings", json=body)
        assert r.status_code == 400 and "not served by any worker of this pool" in r.json()["error"]["message"]
    with _front(worker, [refused]) as front:
        r = front.post("/v1/embeddings", json=body)
        assert r.status_code == 503 and r.json()["error"]["code"] == "engine_unavailable"  # as generation answers


def test_a_big_request_reaches_the_engine_loop_in_context_sized_groups() -> None:
    """`LocalWorker.embed` hands the loop one group at a time, so decode steps run between them."""
    from radixgate.gateway.workers.embeddings import token_groups

    prompts = [[1] * 3, [2] * 3, [3] * 5, [4] * 9]
    assert token_groups(prompts, 6) == [[[1] * 3, [2] * 3], [[3] * 5], [[4] * 9]]
    assert token_groups(prompts, 100) == [prompts]


def test_a_tenants_embeddings_through_a_remote_worker_stay_its_own(worker) -> None:
    """Front (tenant keys) -> radixgate worker (the worker key): the worker runs the request for the
    front's tenant (its salt header accepted on the worker channel only) and the front counts it for
    that tenant alone."""
    worker_key = "embed-worker-key"
    back = create_app(GatewayConfig(worker_api_key=worker_key), worker=worker)
    pool = WorkerPool(worker.tokenizer, "tiny", worker_api_key=worker_key, health_check_interval_s=0.2)
    config = GatewayConfig(api_keys=KEYS, admin_api_keys=frozenset({ADMIN}), worker_api_key=worker_key)
    with serve_in_thread(back, "worker") as url, TestClient(create_app(config, worker=pool)) as front:
        member = pool.add_remote(url)
        deadline = time.monotonic() + 30
        while not member.is_healthy:
            assert time.monotonic() < deadline, "the worker never became healthy"
            time.sleep(0.05)
        a, b = ({"Authorization": f"Bearer {k}"} for k in KEYS)
        r = front.post("/v1/embeddings", headers=a, json={"model": "tiny", "input": TEXTS[:2]})
        assert r.status_code == 200, r.text
        assert len(r.json()["data"]) == 2 and member.num_requests == 1
        view_a, view_b = (front.get("/dashboard/data", headers=h).json() for h in (a, b))
        assert sum(p["requests"] for p in view_a["points"]) == 1
        assert sum(p["requests"] for p in view_b["points"]) == 0
        # a client cannot hand the worker a salt itself: only the worker channel may
        salted = {**a, "X-Radixgate-Cache-Salt": "tenant:tenant-b"}
        assert front.post("/v1/embeddings", headers=salted, json={"model": "tiny", "input": "x"}).status_code == 403
