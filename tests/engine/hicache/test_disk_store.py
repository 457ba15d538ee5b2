"""The disk tier alone: keys, round trips, faults and forgeries (each a counted miss), crash safety,
LRU budget."""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import struct
import subprocess
import sys
import textwrap

import pytest
import torch

from radixgate.engine.cache_secret import CacheSecret
from radixgate.engine.hicache.block_format import BlockFormat
from radixgate.engine.hicache.disk_store import DiskStore

BLOCK = 4
SHAPE = (2, 3)  # per-token KV shape: [kv_heads, head_dim]
LAYERS = 2
SECRET = CacheSecret(b"a test deployment's secret", True)


def make_store(root, capacity=1 << 20, fingerprint="fp", dtype=torch.float32, secret=SECRET) -> DiskStore:
    return DiskStore(str(root), capacity, fingerprint, BLOCK, dtype, SHAPE, LAYERS, BlockFormat(secret))


def block(seed: int, dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    k = torch.randn((LAYERS, BLOCK, *SHAPE), generator=g)
    v = torch.randn((LAYERS, BLOCK, *SHAPE), generator=g)
    return k.to(dtype), v.to(dtype)


def test_keys_chain_over_the_prefix_and_namespace(tmp_path):
    store = make_store(tmp_path)
    a = store.block_keys(list(range(10)), None)
    assert len(a) == 2  # the partial third block has no key
    b = store.block_keys([99] + list(range(1, 10)), None)
    assert a[1] != b[1], "a block's key must depend on every earlier token"
    assert store.block_keys(list(range(10)), "tenant-a") != a
    assert make_store(tmp_path, fingerprint="other-model").block_keys(list(range(10)), None) != a


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float8_e4m3fn])
def test_round_trip_is_bit_exact(tmp_path, dtype):
    store = make_store(tmp_path, dtype=dtype)
    key = store.block_keys(list(range(BLOCK)), None)[0]
    k, v = block(0, dtype)
    store.put(key, k, v)
    got = store.get(key)
    assert got is not None
    assert torch.equal(got[0].view(torch.uint8), k.view(torch.uint8))
    assert torch.equal(got[1].view(torch.uint8), v.view(torch.uint8))
    store.check_consistency()


def _stored(tmp_path, n=3):
    store = make_store(tmp_path)
    keys = store.block_keys(list(range(BLOCK * n)), None)
    for i, key in enumerate(keys):
        store.put(key, *block(i))
    return store, keys


def _flip(path):
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0x01
    open(path, "wb").write(bytes(data))


def _truncate(path):
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) - 7])


@pytest.mark.parametrize("fault", [_flip, _truncate, os.unlink])
def test_damaged_entry_is_a_counted_miss_never_served(tmp_path, fault):
    store, keys = _stored(tmp_path)
    fault(store.path(keys[1]))
    assert store.get(keys[0]) is not None
    assert store.get(keys[1]) is None
    assert store.num_read_failures == 1
    assert keys[1] not in store and not os.path.exists(store.path(keys[1]))
    assert store.num_cached_blocks(keys) == 1  # the prefix now ends before the bad block
    store.check_consistency()


def test_wrong_shape_or_dtype_is_a_miss(tmp_path):
    store, keys = _stored(tmp_path, n=1)
    other = DiskStore(str(tmp_path), 1 << 20, "fp", BLOCK, torch.float32, (3, 2), LAYERS, BlockFormat(SECRET))
    assert other.get(keys[0]) is None and other.num_read_failures == 1
    store2, keys2 = _stored(tmp_path / "b", n=1)
    assert make_store(tmp_path / "b", dtype=torch.float16).get(keys2[0]) is None


def test_restart_reads_the_directory(tmp_path):
    store, keys = _stored(tmp_path)
    again = make_store(tmp_path)
    assert again.num_cached_blocks(keys) == 3 and again.bytes_used == store.bytes_used
    assert torch.equal(again.get(keys[2])[0], block(2)[0])


def test_lru_removal_keeps_the_byte_budget_and_prefix_heads(tmp_path):
    store, keys = _stored(tmp_path, n=1)
    entry = store.bytes_used
    store = make_store(tmp_path / "b", capacity=3 * entry)
    a = store.block_keys(list(range(BLOCK * 2)), "a")
    b = store.block_keys(list(range(BLOCK * 2)), "b")
    for i, key in enumerate(a + b[:1]):
        store.put(key, *block(i))
    store.num_cached_blocks(a)  # a is used again: b[0] is now oldest
    store.put(b[1], *block(9))
    assert store.bytes_used <= 3 * entry
    assert store.num_cached_blocks(a) == 2 and b[0] not in store
    store.check_consistency()


_CRASH_WRITER = textwrap.dedent("""
    import os, signal, sys, torch
    from radixgate.engine.cache_secret import CacheSecret
    from radixgate.engine.hicache.block_format import BlockFormat
    from radixgate.engine.hicache.disk_store import DiskStore
    fmt = BlockFormat(CacheSecret(b"a test deployment's secret", True))
    store = DiskStore(sys.argv[1], 1 << 20, "fp", 4, torch.float32, (2, 3), 2, fmt)
    key = store.block_keys(list(range(4)), None)[0]
    mode = sys.argv[2]
    if mode == "before_rename":
        os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)
    else:   # killed halfway through writing the payload
        real_open = os.fdopen
        class Half:
            def __init__(self, f): self.f, self.n = f, 0
            def __enter__(self): return self
            def __exit__(self, *a): return False
            def write(self, b):
                self.n += 1
                if self.n == 2:
                    self.f.write(b[:len(b) // 2]); self.f.flush(); os.kill(os.getpid(), signal.SIGKILL)
                self.f.write(b)
        os.fdopen = lambda fd, mode: Half(real_open(fd, mode))
    store.put(key, torch.ones(2, 4, 2, 3), torch.ones(2, 4, 2, 3))
""")


@pytest.mark.parametrize("mode", ["before_rename", "mid_write"])
def test_process_killed_while_writing_leaves_nothing_served(tmp_path, mode):
    proc = subprocess.run([sys.executable, "-c", _CRASH_WRITER, str(tmp_path), mode], timeout=60, capture_output=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    assert os.listdir(tmp_path / "tmp"), "the killed writer should have left its temporary file"
    store = make_store(tmp_path)
    key = store.block_keys(list(range(BLOCK)), None)[0]
    assert key not in store and store.get(key) is None and len(store) == 0
    assert not os.listdir(tmp_path / "tmp"), "a restart removes temporary files"
    store.check_consistency()


def _unkeyed_keys(tokens, namespace, fingerprint):
    """The block keys as they were computed without a secret (sha256 from the fingerprint and namespace)."""
    h = hashlib.sha256(f"{fingerprint}|{namespace!r}|{BLOCK}".encode())
    keys = []
    for start in range(0, len(tokens) - BLOCK + 1, BLOCK):
        h = hashlib.sha256(h.digest() + struct.pack(f"<{BLOCK}i", *tokens[start : start + BLOCK]))
        keys.append(h.hexdigest())
    return keys


def test_keys_cannot_be_computed_without_the_secret(tmp_path):
    tokens = list(range(BLOCK * 3))
    keys = make_store(tmp_path).block_keys(tokens, "tenant:acme")
    assert set(keys).isdisjoint(_unkeyed_keys(tokens, "tenant:acme", "fp"))
    other = make_store(tmp_path / "b", secret=CacheSecret(b"another deployment's secret", True))
    assert set(keys).isdisjoint(other.block_keys(tokens, "tenant:acme"))
    assert make_store(tmp_path / "c").block_keys(tokens, "tenant:acme") == keys  # same secret: same keys


def test_forged_or_foreign_entries_are_counted_logged_misses(tmp_path, caplog, forge):
    store, keys = _stored(tmp_path)
    path = store.path(keys[1])
    with open(path, "rb") as f:
        entry = f.read()
    with open(path, "wb") as f:
        f.write(forge(entry))
    foreign = make_store(tmp_path / "b", secret=CacheSecret(b"another deployment's secret", True))
    foreign.put(keys[2], *block(5))  # a valid entry under this key, tagged with another secret
    os.replace(foreign.path(keys[2]), store.path(keys[2]))
    with caplog.at_level(logging.WARNING, logger="radixgate.engine.hicache.disk_store"):
        assert store.get(keys[0]) is not None
        assert store.get(keys[1]) is None and store.get(keys[2]) is None
    assert store.num_read_failures == 2
    assert "not written with this cache secret" in caplog.records[0].getMessage()
    assert len(caplog.records) == 1, "the second failure within the interval is not logged"
