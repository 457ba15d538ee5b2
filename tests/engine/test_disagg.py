"""Prefill/decode disaggregation in-process: two engines joined by a transfer backend give the
co-located engine's greedy tokens, move only what the decode side lacks, and release every
reserved page when a transfer fails."""

from __future__ import annotations

import contextlib
import random
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from multiprocessing import shared_memory

import pytest

from radixgate.bench.pd_transfer import prompts_32
from radixgate.engine import SamplingParams
from radixgate.engine.disagg.decode import DecodeSide
from radixgate.engine.disagg.layout import HandshakeError, KVLayout, TransferError
from radixgate.engine.disagg.prefill import PrefillSide
from radixgate.engine.disagg.shm_backend import ShmSender
from radixgate.engine.disagg.transfer import TcpBackend, TcpReceiver, TcpSender, checksum

KEY = b"worker-key-for-tests"
GREEDY = SamplingParams(max_new_tokens=8, temperature=0.0)


def run_pd(prefill: PrefillSide, decode: DecodeSide, room: int, ids: list[int], sampling=GREEDY):
    with ThreadPoolExecutor(1) as pool:
        sent = pool.submit(prefill.prefill, room, ids, sampling)
        try:
            out, received = decode.generate(room, "127.0.0.1", prefill.bootstrap_port, ids, sampling)
        finally:
            result = sent.exception(timeout=60) or sent.result()
    return out, received, result


CALIBRATION = list(range(500, 564))  # FP8: every pool's scales come from this same first batch
CONFIGS = {"ps1": dict(page_size=1), "ps16_fp8": dict(page_size=16, kv_cache_dtype="fp8_e4m3")}


@pytest.fixture(scope="module")
def engines():
    """`engines(config, role)`: one engine per (config, role) for the module (building engines is
    what costs here); each test leaves them idle and leak-free (`pd` checks)."""
    from radixgate.engine import Engine, EngineConfig

    built: dict[tuple[str, str], Engine] = {}

    def get(config: str, role: str) -> Engine:
        if (config, role) not in built:
            engine = Engine(EngineConfig(chunked_prefill_size=128, max_total_tokens=16384, **CONFIGS[config]))
            engine.start()
            if role != "decode":
                engine.generate(input_ids=[CALIBRATION], sampling=GREEDY)
            built[config, role] = engine
        return built[config, role]

    yield get
    for engine in built.values():
        engine.shutdown()


@pytest.fixture
def pd(engines):
    sides: list = []

    def build(config="ps16_fp8", backend="tcp", decode_config=None, decode_backend=None):
        p = PrefillSide(engines(config, "prefill"), KEY, backend)
        d = DecodeSide(engines(decode_config or config, "decode"), KEY, decode_backend or backend, timeout_s=10)
        sides.extend((p, d))
        return p, d

    yield build
    for side in sides:
        side.close()
        side.engine.check_idle_invariant()


@pytest.mark.parametrize("config,backend", [("ps1", "tcp"), ("ps16_fp8", "shm")])
def test_pd_gives_the_colocated_greedy_tokens(engines, pd, config, backend):
    colocated = engines(config, "colocated")
    prefill, decode = pd(config, backend)
    prompts = prompts_32()
    with ThreadPoolExecutor(4) as pool:  # 4 transfers at a time; the co-located engine batches all 32
        pd_runs = list(pool.map(lambda room: run_pd(prefill, decode, room, prompts[room]), range(len(prompts))))
    expected = colocated.generate(input_ids=prompts, sampling=GREEDY)
    mismatches = [room for room, (out, _, _) in enumerate(pd_runs) if out.token_ids != expected[room].token_ids]
    assert mismatches == [], f"prompts whose PD tokens differ from the co-located engine's: {mismatches}"
    for out, received, sent in pd_runs:
        assert received.num_bytes == sent.num_sent_bytes == received.num_tokens * decode.layout.token_bytes
        assert out.cached_tokens == sent.output.cached_tokens
    assert sum(received.start > 0 for _, received, _ in pd_runs) >= 16, "the decode side reuses shared prefixes"
    # the chunked prompts' KV went out chunk by chunk, while their later chunks computed
    assert sum(sent.num_early_runs for _, _, sent in pd_runs) > 0
    assert decode.engine.pool.k_scales == prefill.engine.pool.k_scales
    colocated.check_idle_invariant()


def test_reuse_sends_only_the_pages_past_the_decode_prefix(pd):
    prefill, decode = pd()
    rng = random.Random(7)
    prefix = [rng.randrange(1000, 60000) for _ in range(2000)]
    first, second = prefix + [11, 12, 13, 14, 15], prefix + [21, 22, 23]
    _, got1, sent1 = run_pd(prefill, decode, 1, first)
    assert (got1.start, got1.num_tokens) == (0, len(first))
    out, got2, sent2 = run_pd(prefill, decode, 2, second)
    tb = decode.layout.token_bytes
    assert got2.start == 2000  # the page-aligned shared prefix, held by the decode worker
    assert got2.num_bytes == sent2.num_sent_bytes == (len(second) - 2000) * tb  # counted on both ends
    assert sent2.output.cached_tokens == 2000 and out.cached_tokens == 2000  # the prefill worker's cache
    assert decode.num_received_bytes == prefill.num_sent_bytes == (len(first) + len(second) - 2000) * tb


def test_handshake_refuses_mismatched_layouts_naming_them(pd):
    for kwargs, words in [
        (
            dict(config="ps16_fp8", decode_config="ps1"),
            "page size \\(--page-size\\): 16 on the prefill worker, 1 on the decode worker",
        ),
        (
            dict(config="ps1", decode_config="ps16_fp8"),
            "KV dtype \\(--kv-cache-dtype\\): float32 on the prefill worker, float8_e4m3fn on the decode",
        ),
        (dict(backend="tcp", decode_backend="shm"), "transfer backend"),
    ]:
        prefill, decode = pd(**kwargs)
        with pytest.raises(HandshakeError, match=words):
            decode.generate(0, "127.0.0.1", prefill.bootstrap_port, list(range(100, 140)), GREEDY)
        decode.engine.check_idle_invariant()
    layout = decode.layout
    other = KVLayout(**{**layout.to_dict(), "tp_rank": 1})
    with pytest.raises(HandshakeError, match="tp_rank: 0 on the prefill worker, 1 on the decode worker"):
        layout.check_peer(other)


def test_wrong_worker_key_is_refused(pd):
    prefill, decode = pd()
    decode.key = b"another key"
    with pytest.raises(HandshakeError, match="authentication failed"):
        decode.generate(0, "127.0.0.1", prefill.bootstrap_port, list(range(100, 140)), GREEDY)
    assert prefill.server.num_refused == 1


class _FaultySender(TcpSender):
    """A real TCP sender that corrupts or stops after its first chunk."""

    def __init__(self, sock, fault):
        super().__init__(sock)
        self.fault, self.num_put = fault, 0

    def put(self, offset, data):
        self.num_put += 1
        if self.num_put == 2 and self.fault == "die":
            self.sock.shutdown(2)  # the prefill worker is gone mid-transfer
            raise ConnectionResetError("prefill died")
        digest = checksum(data)
        if self.num_put == 2 and self.fault == "corrupt":
            data = bytearray(data)
            data[5] ^= 0xFF
            data = memoryview(data)
        self.write(offset, data, digest)


class _FaultyBackend(TcpBackend):
    def __init__(self, fault):
        super().__init__()
        self.fault = fault

    def sender(self, sock, descriptor, total_bytes):
        return _FaultySender(sock, self.fault)


@pytest.mark.parametrize("fault,message", [("corrupt", "checksum"), ("die", "mid-transfer|closed|refused")])
def test_a_failed_transfer_releases_the_reserved_pages_and_is_never_decoded(pd, fault, message):
    prefill, decode = pd()
    prefill.chunk_tokens = 16  # several chunks
    prefill.backend = _FaultyBackend(fault)
    ids = list(range(1000 + len(fault), 1100))  # a prompt of each test's own
    with pytest.raises(TransferError, match=message):
        run_pd(prefill, decode, 3, ids)
    decode.engine.check_idle_invariant()  # every reserved page free or in the tree
    tree = decode.engine.cache_manager.radix_cache
    assert tree.match(ids).device_slots == [], "nothing of a failed transfer enters the decode worker's tree"
    prefill.backend = TcpBackend()
    out, received, _ = run_pd(prefill, decode, 4, ids)  # both sides work on afterwards
    assert received.start == 0 and len(out.token_ids) == GREEDY.max_new_tokens


def test_a_corrupted_shm_chunk_is_detected_and_its_segment_never_reused(pd, monkeypatch):
    """The shm sender hashes what it meant to copy: bytes that differ in the segment fail the check."""
    prefill, decode = pd(backend="shm")
    prefill.chunk_tokens = 16  # several chunks
    segments: list[str] = []
    real_copy = ShmSender.copy

    def corrupting_copy(self, offset, data):
        digest = real_copy(self, offset, data)
        segments.append(self.segment.name)
        if len(segments) == 2:
            self.segment.buf[offset + 5] ^= 0xFF  # what landed is not what was sent
        return digest

    monkeypatch.setattr(ShmSender, "copy", corrupting_copy)
    ids = list(range(1200, 1300))
    with pytest.raises(TransferError, match="checksum"):
        run_pd(prefill, decode, 6, ids)
    decode.engine.check_idle_invariant()
    assert decode.engine.cache_manager.radix_cache.match(ids).device_slots == []
    with pytest.raises(FileNotFoundError):  # unlinked, never handed to a later transfer
        shared_memory.SharedMemory(name=segments[0])
    monkeypatch.undo()
    out, received, _ = run_pd(prefill, decode, 7, ids)  # both sides work on afterwards
    assert received.start == 0 and len(out.token_ids) == GREEDY.max_new_tokens


def test_a_tcp_receiver_lands_every_chunk_in_one_buffer_kept_for_the_next_transfer():
    backend = TcpBackend()
    tx, rx = socket.socketpair()
    try:
        chunks = [bytes([i]) * n for i, n in enumerate((3000, 1000, 5000), start=1)]
        receiver = backend.receiver(rx, sum(map(len, chunks)))
        buffers = []
        for chunk in chunks:
            tx.sendall(chunk)
            view = receiver.take(0, len(chunk))
            assert bytes(view) == chunk
            buffers.append(receiver.buffer)
            del view
        assert buffers[0] is buffers[1] and len(buffers[2]) == 5000  # grown only for the larger chunk
        receiver.close()
        assert backend.receiver(rx, 10).buffer is buffers[2]  # the next transfer starts with it
    finally:
        tx.close()
        rx.close()


def test_a_dying_receiver_fails_the_prefill_and_releases_both_sides(pd, monkeypatch):
    prefill, decode = pd()
    prefill.chunk_tokens = 16

    def take_then_die(self, offset, nbytes):
        self.sock.close()  # the decode worker is gone mid-transfer
        raise ConnectionResetError("decode died")

    monkeypatch.setattr(TcpReceiver, "take", take_then_die)
    with pytest.raises(TransferError):
        run_pd(prefill, decode, 5, list(range(1000, 1100)))
    prefill.engine.check_idle_invariant()
    decode.engine.check_idle_invariant()


def test_bootstrap_and_transfer_time_out(pd):
    prefill, decode = pd()
    prefill.server.timeout_s = 0.3
    with pytest.raises(TransferError, match="no decode worker registered bootstrap_room 9"):
        prefill.prefill(9, list(range(100, 140)), GREEDY)
    decode.timeout_s = 0.5  # registered, but no prefill request ever claims the room
    with pytest.raises(TransferError):
        decode.generate(10, "127.0.0.1", prefill.bootstrap_port, list(range(100, 140)), GREEDY)
    decode.engine.check_idle_invariant()


def test_concurrent_transfers_share_one_bootstrap_server(pd):
    prefill, decode = pd()
    prompts = prompts_32(seed=3)[:8]
    results: dict[int, list[int]] = {}

    def one(room):
        out, _, _ = run_pd(prefill, decode, 100 + room, prompts[room])
        results[room] = out.token_ids

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(results) == list(range(len(prompts)))
    assert all(len(t) == GREEDY.max_new_tokens for t in results.values())


def test_tenant_salts_survive_the_handoff_and_must_agree(pd):
    prefill, decode = pd()
    ids = list(range(3000, 3080))
    with ThreadPoolExecutor(1) as pool:
        sent = pool.submit(prefill.prefill, 20, ids, GREEDY, "tenant-a")
        out, received = decode.generate(20, "127.0.0.1", prefill.bootstrap_port, ids, GREEDY, "tenant-a")
        sent.result(timeout=60)
    tree = decode.engine.cache_manager.radix_cache
    assert len(tree.match(ids, "tenant-a").device_slots) == 80  # inserted under the tenant's namespace
    assert tree.match(ids, None).device_slots == []  # and nowhere else
    with ThreadPoolExecutor(1) as pool:  # the two roles name different tenants: refused, nothing decoded
        sent = pool.submit(prefill.prefill, 21, ids, GREEDY, "tenant-b")
        with pytest.raises(TransferError, match="another prompt or tenant"):
            decode.generate(21, "127.0.0.1", prefill.bootstrap_port, ids, GREEDY, "tenant-a")
        with pytest.raises(TransferError):
            sent.result(timeout=60)


def test_a_cancelled_decode_shuts_its_transfer_and_releases_the_pages(pd):
    """The router went away while the KV was on the way (or a retry replaced the prefill worker):
    `cancel` shuts the connection the decode side waits on, so it fails at once (not at its
    time-out) and frees its reservation."""
    prefill, decode = pd()
    decode.timeout_s = 120.0  # a failure below is the cancel's, not the time-out's
    ids = list(range(4000, 4100))
    with ThreadPoolExecutor(1) as pool:
        started = pool.submit(decode.start, 30, "127.0.0.1", prefill.bootstrap_port, ids, GREEDY, None, "cancel-me")
        registration = prefill.server.wait_room(30, timeout_s=60)  # registered: the KV is awaited
        try:
            decode.cancel("cancel-me")
            with pytest.raises(TransferError) as failed:
                started.result(timeout=60)
        finally:
            registration.sock.close()
    assert "timed out" not in str(failed.value)
    decode.engine.check_idle_invariant()
    decode.cancel("cancel-early")  # cancelled before it connected: refused once it does
    with pytest.raises(TransferError, match="cancelled"):
        decode.start(31, "127.0.0.1", prefill.bootstrap_port, ids, GREEDY, None, "cancel-early")
    decode.engine.check_idle_invariant()


@contextlib.contextmanager
def _waiting(prefill: PrefillSide, room: int) -> Iterator[Future]:
    """`prefill.prefill(room)` running in a thread, once it waits for its room's decode worker."""
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(prefill.prefill, room, list(range(100, 140)), GREEDY)
        for _ in range(3000):
            if prefill.num_waiting:
                break
            threading.Event().wait(0.01)
        assert prefill.num_waiting == 1, "the prefill never waited for its room"
        yield future


def test_a_room_fails_at_once_when_its_decode_worker_is_refused_or_its_request_cancelled(pd):
    """The prefill side waits for a room no longer than it must: a decode worker refused at the
    handshake names the room it came for, and a cancelled request (its router saw the decode side
    fail first) stops waiting; a decode worker registering after the cancel is refused at once."""
    ids = list(range(100, 140))
    for backends, room, error in [(("tcp", "shm"), 40, HandshakeError), (("tcp", "tcp"), 41, TransferError)]:
        prefill, decode = pd(backend=backends[0], decode_backend=backends[1])
        prefill.server.timeout_s = prefill.timeout_s = decode.timeout_s = 120.0  # never the time-outs below
        with _waiting(prefill, room) as waiting:
            if error is HandshakeError:
                with pytest.raises(HandshakeError, match="transfer backend"):
                    decode.generate(room, "127.0.0.1", prefill.bootstrap_port, ids, GREEDY)
            else:
                prefill.cancel(room, "gone")
            with pytest.raises(error, match="transfer backend" if error is HandshakeError else "cancelled"):
                waiting.result(timeout=30)  # well inside the room's time-out
        assert prefill.num_waiting == 0
        if error is TransferError:
            with pytest.raises(TransferError, match=f"bootstrap_room {room} failed: .*cancelled"):
                decode.generate(room, "127.0.0.1", prefill.bootstrap_port, ids, GREEDY)
        decode.engine.check_idle_invariant()
        prefill.engine.check_idle_invariant()
