"""The router (policies, salted prefix index) and a pool of two real co-located engines behind one gateway:
admin role, per-tenant flush, the worker channel's salt header, /workers and draining."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from radixgate.gateway.app import create_app
from radixgate.gateway.config import GatewayConfig
from radixgate.gateway.tenancy.auth import read_keys_file
from radixgate.gateway.workers.pool import WorkerPool
from radixgate.gateway.workers.router import BLOCK_TOKENS, Candidate, PrefixIndex, Router, block_hashes
from radixgate.gateway.workers.worker import LocalWorker

KEYS = {"key-a": "router-a", "key-b": "router-b"}  # namespaces no other test of the shared engine uses
ADMIN = "admin-key"
WORKER_KEY = "worker-channel-key"


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _candidates(n: int, capacity_blocks: int = 1000) -> list[Candidate]:
    return [Candidate(f"w{i}", PrefixIndex(capacity_blocks)) for i in range(n)]


def test_prefix_index_is_salted_lru_of_blocks() -> None:
    ids = list(range(5 * BLOCK_TOKENS + 3))
    a, b = block_hashes(ids, "tenant:a"), block_hashes(ids, "tenant:b")
    assert len(a) == 5 and not set(a) & set(b)  # the same prompt under two salts shares nothing
    index = PrefixIndex(capacity_blocks=6)
    index.record(a, "tenant:a")
    assert index.match(a) == 5 and index.match(b) == 0
    assert index.match(block_hashes(ids[: 2 * BLOCK_TOKENS] + [-1] * 40, "tenant:a")) == 2
    other = block_hashes(list(range(1000, 1000 + 3 * BLOCK_TOKENS)), "tenant:a")
    index.record(other, "tenant:a")  # 8 blocks > 6: the oldest tails go, the shared heads stay
    assert len(index) == 6 and index.match(other) == 3 and index.match(a) == 3
    index.record(b, "tenant:b")
    index.clear("tenant:a", everything=False)
    assert index.match(a) == 0 and index.match(b) == 5


def test_cache_aware_follows_prefixes_and_ignores_other_tenants() -> None:
    router = Router("cache_aware")
    workers = _candidates(2)
    prompt = list(range(40 * BLOCK_TOKENS))
    first = router.choose(workers, prompt, "tenant:a")
    again = router.choose(workers, prompt + [7, 8], "tenant:a")
    assert again.worker_id == first.worker_id and again.matched_tokens == len(prompt)
    assert router.choose(workers, prompt, "tenant:b").matched_tokens == 0  # cached under another salt: no hit
    # Load counts: a worker busy with many tokens loses a request whose prefix it holds only in part.
    holder = next(w for w in workers if w.worker_id == first.worker_id)
    holder.num_tokens = 10 * len(prompt)
    short_overlap = prompt[: 2 * BLOCK_TOKENS] + list(range(10**6, 10**6 + 38 * BLOCK_TOKENS))
    assert router.choose(workers, short_overlap, "tenant:a").worker_id != first.worker_id


def test_hot_prefix_spreads_and_hints_place_new_prefixes() -> None:
    router = Router("cache_aware", balance_slack=1)
    workers = _candidates(3)
    hot = list(range(30 * BLOCK_TOKENS))
    chosen = []
    for i in range(6):  # none finishes: in-flight counts grow
        choice = router.choose(workers, hot + [i], None)
        next(w for w in workers if w.worker_id == choice.worker_id).num_requests += 1
        chosen.append(choice.worker_id)
    counts = [w.num_requests for w in workers]
    assert max(counts) - min(counts) <= 1, chosen  # the guard keeps one hot template from piling up
    router = Router("cache_aware")
    workers = _candidates(3)
    workers[0].num_requests = workers[0].num_tokens = 1  # the hint must beat a slightly lower load
    first = router.choose(workers, list(range(100, 200)), None, route_hint="support-bot")
    workers[0].num_requests = workers[0].num_tokens = 0
    unseen = router.choose(workers, list(range(5000, 5100)), None, route_hint="support-bot")
    assert unseen.worker_id == first.worker_id


def test_new_prefixes_partition_and_affinity_holds_under_imbalance() -> None:
    router = Router("cache_aware")
    workers = _candidates(2, capacity_blocks=200)
    templates = [list(range(10_000 * (t + 1), 10_000 * (t + 1) + 40 * BLOCK_TOKENS)) for t in range(8)]
    home = {t: router.choose(workers, templates[t] + [1], None).worker_id for t in range(8)}
    assert sorted(home.values()) == ["w0"] * 4 + ["w1"] * 4  # new prefixes split by content homed
    assert all(router.choose(workers, templates[t] + [2], None).worker_id == home[t] for t in range(8))
    holder = next(w for w in workers if w.worker_id == home[0])
    holder.num_tokens = 3 * len(templates[0])  # a queue shorter than what copying the prefix would cost
    assert router.choose(workers, templates[0] + [3], None).worker_id == home[0]
    holder.num_tokens = 20 * len(templates[0])  # far longer: worth computing it elsewhere
    assert router.choose(workers, templates[0] + [4], None).worker_id != home[0]
    holder.num_tokens = 0
    for w in workers:  # the guess forgot everything (a pool turned over): the home still holds
        w.index.clear()
    assert router.choose(workers, templates[5] + [5], None).worker_id == home[5]


def test_a_prefix_recomputed_on_its_home_does_not_make_that_worker_look_full() -> None:
    """New prefixes go by the content homed on each worker (what it will have to hold), not by the
    tokens it computed: a prefix evicted and recomputed there again and again is still one prefix."""
    router = Router("cache_aware")
    workers = _candidates(2, capacity_blocks=200)
    small, large = list(range(40 * BLOCK_TOKENS)), list(range(10_000, 10_000 + 50 * BLOCK_TOKENS))
    assert router.choose(workers, small + [0], None).worker_id == "w0"
    assert router.choose(workers, large + [0], None).worker_id == "w1"  # the least content homed: none
    for i in range(1, 11):
        for w in workers:  # evicted everywhere before it returns: its home computes it again
            w.index.clear()
        assert router.choose(workers, small + [i], None).worker_id == "w0"
    fresh = list(range(20_000, 20_000 + 40 * BLOCK_TOKENS))
    assert router.choose(workers, fresh + [0], None).worker_id == "w0"  # 40 blocks homed there, 50 on w1


def test_round_robin_and_least_load() -> None:
    workers = _candidates(3)
    rr = Router("round_robin")
    assert [rr.choose(workers, [1] * 40, None).worker_id for _ in range(4)] == ["w0", "w1", "w2", "w0"]
    workers[0].num_requests, workers[1].num_requests = 2, 1
    assert Router("least_load").choose(workers, [1] * 40, None).worker_id == "w2"
    with pytest.raises(ValueError, match="unknown router policy"):
        Router("random")


def test_keys_file_roles(tmp_path) -> None:
    (tmp_path / "keys.txt").write_text("k1 t1\nk2 ops admin  # operator\n")
    (tmp_path / "keys.json").write_text('{"k1": "t1", "k2": {"tenant": "ops", "role": "admin"}}')
    assert read_keys_file(tmp_path / "keys.txt") == read_keys_file(tmp_path / "keys.json")
    assert [e.role for e in read_keys_file(tmp_path / "keys.txt")] == ["tenant", "admin"]
    (tmp_path / "bad.txt").write_text("k1 t1 root\n")
    with pytest.raises(ValueError, match="role 'root'"):
        read_keys_file(tmp_path / "bad.txt")


@pytest.fixture(scope="module")
def second_worker() -> Iterator[LocalWorker]:
    from radixgate.engine import Engine, EngineConfig

    engine = Engine(EngineConfig(model_path="tiny", max_total_tokens=16384))
    yield LocalWorker(engine)
    engine.shutdown()


@pytest.fixture
def routed(worker: LocalWorker, second_worker: LocalWorker) -> Iterator[TestClient]:
    """A gateway routing over the suite's engine and a second one, with tenant, admin and worker keys."""
    pool = WorkerPool(worker.tokenizer, "tiny", worker_api_key=WORKER_KEY)  # the engine's: already loaded
    pool.add_local(worker)
    pool.add_local(second_worker)
    config = GatewayConfig(api_keys=KEYS, admin_api_keys=frozenset({ADMIN}), worker_api_key=WORKER_KEY)
    with TestClient(create_app(config, worker=pool)) as client:
        yield client
    second_worker.check_idle_invariant()


def _cached(client: TestClient, key: str, prompt: str, headers: dict[str, str] | None = None) -> int:
    body = {"model": "tiny", "prompt": prompt, "max_tokens": 1, "temperature": 0}
    r = client.post("/v1/completions", headers={**_auth(key), **(headers or {})}, json=body)
    assert r.status_code == 200, r.text
    return r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]


def test_pool_routes_tenants_apart_and_flushes_one_tenant(routed: TestClient, long_prefix) -> None:
    prompt = long_prefix("router-tenants")
    for key in ("key-a", "key-b"):  # other tests' prompts share a first token or two in these namespaces
        assert routed.post("/flush_cache", headers=_auth(key)).status_code == 200
    assert _cached(routed, "key-a", prompt + " first") == 0
    assert _cached(routed, "key-a", prompt + " second") > 300  # routed to the engine holding the prefix
    assert _cached(routed, "key-b", prompt + " second") == 0  # another tenant: no hit through the router
    assert _cached(routed, "key-b", prompt + " third") > 300
    workers = routed.get("/workers", headers=_auth(ADMIN)).json()["workers"]
    assert sum(w["requests"] for w in workers) == 4 and sum(w["cached_tokens"] for w in workers) > 600
    pool = routed.app.state.gateway.worker  # the history's per-request sample: the same figures as stats()
    stats, usage = pool.stats(), pool.usage()
    assert usage["cache_hit_rate"] > 0 and usage == {key: stats[key] for key in usage}
    r = routed.post("/flush_cache", headers=_auth("key-a"))
    assert r.status_code == 200 and "tenant" in r.json()["message"]
    assert _cached(routed, "key-a", prompt + " fourth") == 0  # a's namespace is gone everywhere
    assert _cached(routed, "key-b", prompt + " fourth") > 300  # b's cached tokens stayed in place


def test_admin_paths_need_an_admin_key(routed: TestClient) -> None:
    for path in ("/workers", "/metrics"):
        assert routed.get(path, headers=_auth("key-a")).status_code == 403, path
        assert routed.get(path, headers=_auth(ADMIN)).status_code == 200, path
    assert routed.get("/dashboard/data", headers=_auth("key-a")).json()["scope"] == {
        "role": "tenant",
        "tenant": "router-a",
    }
    metrics = routed.get("/metrics", headers=_auth(ADMIN)).text
    assert 'radixgate:worker_requests_total{model_name="tiny",url="local:w0",worker="w0"}' in metrics
    assert routed.get("/server_info", headers=_auth(ADMIN)).json()["router_policy"] == "cache_aware"
    # A client never sets a salt; a tenant key that tries is refused, before anything runs.
    r = routed.post(
        "/v1/completions",
        headers={**_auth("key-a"), "X-Radixgate-Cache-Salt": "tenant:router-b"},
        json={"model": "tiny", "prompt": "x", "max_tokens": 1},
    )
    assert r.status_code == 403 and "salt" in r.json()["error"]["message"]


def test_public_metrics_and_single_engine_has_no_workers(make_client) -> None:
    c = make_client(api_keys=KEYS, public_metrics=True)
    assert c.get("/metrics").status_code == 200
    assert c.get("/workers", headers=_auth("key-a")).status_code == 403
    admin = make_client(api_keys=KEYS, admin_api_keys=frozenset({ADMIN}))
    assert admin.get("/workers", headers=_auth(ADMIN)).status_code == 404


def test_worker_channel_sets_the_salt(routed: TestClient, long_prefix) -> None:
    """What a front gateway sends a radixgate worker: the worker key plus the tenant's salt."""
    prompt = long_prefix("router-channel")
    channel = {"X-Radixgate-Cache-Salt": "tenant:router-a"}
    assert _cached(routed, WORKER_KEY, prompt + " one", channel) < 10
    assert _cached(routed, "key-a", prompt + " two") > 300  # the same namespace as tenant-a's key
    assert _cached(routed, WORKER_KEY, prompt + " three") < 10  # no salt header: the unsalted namespace


def test_drain_removes_a_worker(worker: LocalWorker, long_prefix) -> None:
    """A worker of its own is drained (leaving the pool shuts its engine down): the module's second
    worker stays up for the tests after this one, in any order."""
    from radixgate.engine import Engine, EngineConfig

    own = LocalWorker(Engine(EngineConfig(model_path="tiny", max_total_tokens=4096)))
    pool = WorkerPool(worker.tokenizer, "tiny", worker_api_key=WORKER_KEY)
    pool.add_local(worker)
    pool.add_local(own)
    config = GatewayConfig(api_keys=KEYS, admin_api_keys=frozenset({ADMIN}), worker_api_key=WORKER_KEY)
    try:
        with TestClient(create_app(config, worker=pool)) as routed:
            _drain_and_serve(routed, long_prefix)
    finally:
        own.engine.shutdown()


def _drain_and_serve(routed: TestClient, long_prefix) -> None:
    workers = routed.get("/workers", headers=_auth(ADMIN)).json()["workers"]
    r = routed.delete(f"/workers/{workers[1]['id']}", headers=_auth(ADMIN))
    assert r.status_code == 200 and r.json()["removed"]
    assert routed.delete("/workers/nope", headers=_auth(ADMIN)).status_code == 404
    assert [w["id"] for w in routed.get("/workers", headers=_auth(ADMIN)).json()["workers"]] == [workers[0]["id"]]
    assert _cached(routed, "key-b", long_prefix("router-drain")) < 10  # still served, by the one left
    r = routed.post("/workers", headers=_auth(ADMIN), json={"url": "ftp://nowhere"})
    assert r.status_code == 400 and "openai+http" in r.json()["error"]["message"]


def test_unsalted_workers_refuse_tenants_unless_allowed(worker: LocalWorker) -> None:
    """A plain OpenAI worker cannot keep tenants apart; a dead one is skipped, then refused with 503."""
    import asyncio

    from radixgate.engine.protocol import GenerateRequest, SamplingParams
    from radixgate.gateway.api.errors import APIError

    async def first_error(pool: WorkerPool, salt: str | None) -> APIError:
        member = pool.add_remote("openai+http://127.0.0.1:9")  # nothing listens on the discard port
        member.is_healthy = True  # as if its last health check had passed
        with pytest.raises(APIError) as caught:
            request = GenerateRequest("r1", [1, 2, 3], SamplingParams(max_new_tokens=1), cache_salt=salt)
            async for _ in pool.stream(request):
                pass
        await pool.stop()
        return caught.value

    strict = asyncio.run(first_error(WorkerPool(worker.tokenizer, "tiny"), "tenant:a"))
    assert strict.status == 503 and strict.code == "no_salted_worker"
    lenient = WorkerPool(worker.tokenizer, "tiny", allow_unsalted_workers=True)
    error = asyncio.run(first_error(lenient, "tenant:a"))  # tried, failed before its first byte, no other worker
    assert error.code == "no_worker_available" and "w0" in error.message
    assert "127.0.0.1:9" not in error.message  # the client learns the worker's id, never its address
    member = next(iter(lenient.members.values()))
    assert not member.is_healthy and member.num_retried_away == 1  # refused connection: out until a check passes


def test_serve_flags_build_a_routing_config(tmp_path) -> None:
    from radixgate.gateway.cli import build_parser, engine_config, gateway_config

    (tmp_path / "workers.txt").write_text("# fleet\nhttp://10.0.0.2:30000\nopenai+http://10.0.0.3:8000  # vLLM\n")
    (tmp_path / "keys.txt").write_text("ka tenant-a\nkops ops admin\n")
    args = build_parser().parse_args(
        ["--worker", "http://10.0.0.1:30000", "--workers-file", str(tmp_path / "workers.txt")]
        + ["--api-keys-file", str(tmp_path / "keys.txt"), "--admin-api-key", "root", "--worker-api-key", "wk"]
        + ["--router-policy", "least_load", "--allow-unsalted-workers", "--public-metrics"]
    )
    config = gateway_config(args, engine_config(args))
    assert config.workers == ("http://10.0.0.1:30000", "http://10.0.0.2:30000", "openai+http://10.0.0.3:8000")
    assert config.is_routed and config.router_policy == "least_load" and config.allow_unsalted_workers
    assert config.admin_api_keys == {"kops", "root"} and config.api_keys == {"ka": "tenant-a", "kops": "ops"}
    assert config.worker_api_key == "wk" and config.public_metrics
    assert gateway_config(build_parser().parse_args(["--dp-size", "2"]), None).is_routed
    with pytest.raises(ValueError, match="openai\\+http"):
        gateway_config(build_parser().parse_args(["--worker", "10.0.0.1:30000"]), None)
