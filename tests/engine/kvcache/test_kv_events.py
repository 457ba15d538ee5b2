"""KV events read by a subscriber written here from vLLM's published message definitions
(`vllm/distributed/kv_events.py`: EventBatch {ts, events, data_parallel_rank}; BlockStored {block_hashes,
parent_block_hash, token_ids, block_size, lora_id, medium, lora_name, ...}; BlockRemoved {block_hashes,
medium}; AllBlocksCleared), decoded with plain msgpack: no radixgate code on the reading side."""

from __future__ import annotations

import hashlib
import time

import cbor2
import msgpack
import pytest
import zmq

from radixgate.engine import SamplingParams
from radixgate.engine.protocol import block_hashes

END_SEQ = (-1).to_bytes(8, "big", signed=True)
STORED_FIELDS = ["type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium"]


class Subscriber:
    def __init__(self, endpoint: str, replay_endpoint: str) -> None:
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.sub.connect(endpoint)
        self.replay_endpoint = replay_endpoint
        self.batches: list[tuple[int, dict]] = []
        time.sleep(0.3)  # PUB/SUB: messages sent before the subscription lands are not delivered

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
def engine_and_sub(make_engine):
    engine = make_engine(enable_kv_events=True, max_total_tokens=256)
    info = engine.stats()["kv_events"]
    assert info["block_size"] == 16 and info["endpoint"].startswith("tcp://127.0.0.1:")
    sub = Subscriber(info["endpoint"], info["replay_endpoint"])
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
    assert first["block_hashes"][:2] == block_hashes(prompt, None, 16) == vllm_int_hashes(prompt, None)
    assert first["token_ids"][:32] == prompt[:32]
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
    assert set(block_hashes(list(range(2000, 2064)), None, 16)) & gone
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
    assert stored[0]["block_hashes"][:3] == vllm_int_hashes(prompt, "tenant-a")
    assert block_hashes(prompt, "tenant-a", 16) != block_hashes(prompt, "tenant-b", 16)
