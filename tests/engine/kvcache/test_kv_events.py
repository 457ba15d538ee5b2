"""KV events read by a subscriber written here from vLLM's published message definitions
(`vllm/distributed/kv_events.py`: EventBatch {ts, events, data_parallel_rank}; BlockStored {block_hashes,
parent_block_hash, token_ids, block_size, lora_id, medium, lora_name, ...}; BlockRemoved {block_hashes,
medium}; AllBlocksCleared), decoded with plain msgpack: no radixgate code on the reading side. What
a listener learns is kept small: no token ids unless asked for, hashes keyed by the cache secret."""

from __future__ import annotations

import hashlib
import time

import cbor2
import msgpack
import pytest
import zmq

from radixgate.engine import SamplingParams
from radixgate.engine.cache_secret import CacheSecret, load_cache_secret
from radixgate.engine.kvcache.kv_events import KVEventRecorder
from radixgate.engine.protocol import block_hashes

END_SEQ = (-1).to_bytes(8, "big", signed=True)
STORED_FIELDS = ["type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium"]


class Subscriber:
    def __init__(self, endpoint: str, replay_endpoint: str, publisher) -> None:
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.sub.connect(endpoint)
        self.replay_endpoint = replay_endpoint
        self.batches: list[tuple[int, dict]] = []
        deadline = time.monotonic() + 10  # PUB/SUB drops what is sent before the subscription lands
        while not publisher.num_subscriptions:
            assert time.monotonic() < deadline, "the publisher never heard the subscription"
            time.sleep(0.005)

    def poll(self, timeout_s: float = 5.0, until=lambda events: True) -> list[dict]:
        deadline = time.monotonic() + timeout_s
        events: list[dict] = []
        while time.monotonic() < deadline:
            if self.sub.poll(50):
                topic, seq, payload = self.sub.recv_multipart()
                batch = msgpack.unpackb(payload)
                self.batches.append((int.from_bytes(seq, "big"), batch))
                events += batch["events"]
                if until(events):
                    return events
        return events

    def replay(self, start_seq: int) -> list[tuple[int, dict]]:
        dealer = self.ctx.socket(zmq.DEALER)
        dealer.connect(self.replay_endpoint)
        dealer.send_multipart([b"", start_seq.to_bytes(8, "big")])
        out = []
        while dealer.poll(5000):
            _, seq, payload = dealer.recv_multipart()
            if seq == END_SEQ:
                break
            out.append((int.from_bytes(seq, "big"), msgpack.unpackb(payload)))
        dealer.close(linger=0)
        return out

    def close(self) -> None:
        self.sub.close(linger=0)
        self.ctx.term()


@pytest.fixture
def engine_and_sub(make_engine, request):
    config = getattr(request, "param", None)
    engine = make_engine(kv_events_config=config, enable_kv_events=config is None, max_total_tokens=256)
    info = engine.stats()["kv_events"]
    assert info["block_size"] == 16 and info["endpoint"].startswith("tcp://127.0.0.1:")
    sub = Subscriber(info["endpoint"], info["replay_endpoint"], engine.kv_events.publisher)
    yield engine, sub
    sub.close()


def vllm_int_hashes(tokens: list[int], salt: str | None, block_size: int = 16, seed: str = "0") -> list[int]:
    """vLLM's chain as its kv_cache_utils computes it with sha256_cbor and PYTHONHASHSEED=seed, then
    its integer form for events (the digest's low 64 bits)."""

    def sha256_cbor(value: object) -> bytes:
        return hashlib.sha256(cbor2.dumps(value, canonical=True)).digest()

    parent, out = sha256_cbor(seed), []
    for i in range(len(tokens) // block_size):
        extra = (salt,) if i == 0 and salt is not None else None
        parent = sha256_cbor((parent, tuple(tokens[i * block_size : (i + 1) * block_size]), extra))
        out.append(int.from_bytes(parent, "big") & ((1 << 64) - 1))
    return out


def _stored(events: list[dict]) -> list[dict]:
    return [e for e in events if e["type"] == "BlockStored"]


def test_stored_blocks_decode_with_vllms_fields_and_hashes_chain(engine_and_sub) -> None:
    engine, sub = engine_and_sub
    prompt = list(range(1000, 1040))  # 2 full blocks of 16 and 8 tokens
    engine.generate(input_ids=[prompt], sampling=SamplingParams(max_new_tokens=1, temperature=0))
    events = sub.poll(until=lambda ev: _stored(ev))
    stored = _stored(events)
    assert stored, f"no BlockStored among {events}"
    first = stored[0]
    assert list(first)[: len(STORED_FIELDS)] == STORED_FIELDS
    assert first["medium"] == "GPU" and first["block_size"] == 16 and first["parent_block_hash"] is None
    seed = load_cache_secret().events_hash_seed("0")  # what a vLLM-format consumer is configured with
    assert first["block_hashes"][:2] == block_hashes(prompt, None, 16, seed) == vllm_int_hashes(prompt, None, seed=seed)
    assert not set(first["block_hashes"]) & set(vllm_int_hashes(prompt, None)), "unkeyed hashes confirm guesses"
    assert first["token_ids"] == [], "a prompt's tokens are its text: sent only when asked for"
    batch = sub.batches[0][1]
    assert set(batch) >= {"ts", "events", "data_parallel_rank"}


def test_flush_and_eviction_are_announced_and_replay_resends_from_a_sequence_number(engine_and_sub) -> None:
    engine, sub = engine_and_sub
    engine.generate(input_ids=[list(range(2000, 2064))], sampling=SamplingParams(max_new_tokens=1, temperature=0))
    sub.poll(until=lambda ev: _stored(ev))
    # Fill the 256-token pool with other prompts: the first one's blocks are evicted.
    for base in (3000, 4000, 5000, 6000):
        engine.generate(input_ids=[list(range(base, base + 80))], sampling=SamplingParams(max_new_tokens=1))
    removed = sub.poll(until=lambda ev: any(e["type"] == "BlockRemoved" for e in ev))
    gone = {h for e in removed if e["type"] == "BlockRemoved" for h in e["block_hashes"]}
    seed = load_cache_secret().events_hash_seed("0")
    assert set(block_hashes(list(range(2000, 2064)), None, 16, seed)) & gone
    assert engine.flush_cache()
    engine.step()  # the loop publishes what a step changed
    cleared = sub.poll(until=lambda ev: any(e["type"] == "AllBlocksCleared" for e in ev))
    assert any(e["type"] == "AllBlocksCleared" for e in cleared)
    seqs = [seq for seq, _ in sub.batches]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "sequence numbers run without gaps"
    replayed = sub.replay(seqs[1])
    assert [seq for seq, _ in replayed] == seqs[1:]
    assert [b["events"] for _, b in replayed] == [b["events"] for _, b in sub.batches[1:]]


def test_two_tenants_sending_one_prompt_get_disjoint_hashes(engine_and_sub) -> None:
    engine, sub = engine_and_sub
    prompt = list(range(7000, 7048))
    for salt in ("tenant-a", "tenant-b"):
        engine.generate(input_ids=[prompt], sampling=SamplingParams(max_new_tokens=1), cache_salt=salt)
    stored = _stored(sub.poll(until=lambda ev: len(_stored(ev)) >= 2))
    a, b = ({h for e in stored[i : i + 1] for h in e["block_hashes"]} for i in (0, 1))
    assert a and b and not a & b
    secret = load_cache_secret()
    salt, seed = secret.events_salt("tenant-a"), secret.events_hash_seed("0")
    assert stored[0]["extra_keys"][0] == [salt], "the tenant's name never reaches a listener"
    assert stored[0]["block_hashes"][:3] == vllm_int_hashes(prompt, salt, seed=seed)
    assert not a & set(vllm_int_hashes(prompt, "tenant-a")), "hashes cannot be computed from the tenant's name"


@pytest.mark.parametrize(
    "engine_and_sub",
    [
        '{"enable_kv_cache_events": true, "endpoint": "tcp://127.0.0.1:*", "replay_endpoint": "tcp://127.0.0.1:*",'
        ' "include_token_ids": true}'
    ],
    indirect=True,
)
def test_token_ids_are_sent_when_the_config_asks_for_them(engine_and_sub) -> None:
    engine, sub = engine_and_sub
    prompt = list(range(8000, 8040))
    engine.generate(input_ids=[prompt], sampling=SamplingParams(max_new_tokens=1, temperature=0))
    first = _stored(sub.poll(until=lambda ev: _stored(ev)))[0]
    assert first["token_ids"][:32] == prompt[:32]
    assert engine.stats()["kv_events"]["include_token_ids"] is True


def test_block_hashes_depend_on_the_secret() -> None:
    def hashes(key: bytes) -> list[int]:
        recorder = KVEventRecorder(16, None, "0", CacheSecret(key, True))
        recorder.stored_prefix(list(range(64)), "tenant:acme", "REMOTE")
        return recorder.pending[0].block_hashes

    mine, theirs = hashes(b"this deployment's secret"), hashes(b"another deployment's secret")
    assert len(mine) == 4 and not set(mine) & set(theirs)
    assert mine == hashes(b"this deployment's secret")
    assert not set(mine) & set(block_hashes(list(range(64)), "tenant:acme", 16))  # the unkeyed computation
    plain = KVEventRecorder(16, None, "0", keyed_hashes=False)  # "keyed_hashes": false, for a plain-seed consumer
    plain.stored_prefix(list(range(64)), "tenant:acme", "REMOTE")
    assert plain.pending[0].block_hashes == block_hashes(list(range(64)), "tenant:acme", 16)
