"""HiCache's tier controller: moves KV between the device pool, the host pool and the storage tiers
below them (the disk tier and the remote store, `StorageTier`s).

Where a cached token's KV lives (a radix node's `device_slots` and `host_slots`):

| tier   | holds                               | enters when                           | leaves when             |
|--------|-------------------------------------|---------------------------------------|-------------------------|
| device | nodes with `device_slots` (top)    | computed, or loaded back for a request | device LRU (demoted)    |
| host   | nodes with `host_slots`             | backed up (policy) or demoted          | host LRU eviction       |
| disk   | blocks keyed by chained prefix hash | written (policy) on a background thread | disk LRU over its bytes |
| remote | the same blocks, in a shared store   | written with the disk (policy), async   | the store's own policy  |

Write policies (as in SGLang):
- `write_through`: a node is backed up to host, and its blocks to disk and remote, when it is inserted.
- `write_through_selective`: backed up (host, disk, remote) once a request hits it; a node never
  hit is dropped from the device without a host copy.
- `write_back`: a node goes to host only when the device evicts it, and to disk and remote only
  when the host does.

Load-back: a request's prefix found on host or disk is copied into pages the request allocates, as
if it had computed them; inserting them into the tree afterwards turns host-only nodes back into
device nodes. Disk blocks are read on a prefetch thread while other requests run; the request
waits in the queue until its blocks are in memory. Host-only nodes on a matched path are
host-locked (`host_lock_ref`) from the match until their KV has been copied, so that the evictions
made to find room for the copy cannot take them.

Host eviction takes least-recently-used candidates: a host copy of a node still on the device (the
copy is dropped), or a host-only node without children (the node leaves the tree).
"""

from __future__ import annotations

import heapq
import itertools
from typing import TYPE_CHECKING

import torch

from ..config import HICACHE_WRITE_POLICIES
from ..kvcache.kv_pool import KVPool
from ..kvcache.radix_cache import RadixCache, TreeNode
from .disk_store import DiskStore
from .disk_tier import DiskTier
from .host_pool import HostPool
from .remote_tier import RemoteTier
from .storage_tier import ReadBlocks, copy_to_device

if TYPE_CHECKING:
    from ..distributed.tier_mirror import TierMirror


class TierController:
    def __init__(
        self,
        device: KVPool,
        host: HostPool,
        disk_tier: DiskTier | None,
        write_policy: str,
        remote_tier: RemoteTier | None = None,
    ):
        assert write_policy in HICACHE_WRITE_POLICIES, write_policy
        self.device = device
        self.host = host
        self.disk_tier = disk_tier
        self.remote_tier = remote_tier
        self.write_policy = write_policy
        self._tree: RadixCache | None = None
        self._heap: list[tuple[int, int, TreeNode]] = []  # host LRU, lazily invalidated
        self._seq = itertools.count()
        self.num_host_backup_tokens = 0
        self.num_host_loaded_tokens = 0
        self.num_disk_loaded_tokens = 0
        self.num_remote_loaded_tokens = 0
        self.mirror: TierMirror | None = None  # tensor parallelism: the same moves on ranks 1..N-1

    @property
    def tree(self) -> RadixCache:
        """The radix cache this controller serves, set once by `attach`."""
        assert self._tree is not None, "TierController used before attach()"
        return self._tree

    def attach(self, tree: RadixCache) -> None:
        self._tree = tree
        tree.demote = self._demote
        tree.free_host_slots = self.host.free

    # ---- device -> host -----------------------------------------------------------------------
    def _demote(self, node: TreeNode) -> bool:
        """Device eviction hook: True keeps the node in the tree as host-only."""
        if node.host_slots is not None:
            return True
        if self.write_policy == "write_through_selective":
            return False
        return self._copy_to_host(node)

    def _copy_to_host(self, node: TreeNode) -> bool:
        n = len(node.key)
        if not self.host.can_allocate(n):
            self.evict_host(n - self.host.available_tokens)
            if not self.host.can_allocate(n):
                return False
        slots = self.host.allocate(n)
        device_slots = node.device_slots
        assert device_slots is not None, "only a node on the device is copied to the host"
        ks, vs = self.device.read(torch.tensor(device_slots, dtype=torch.int64, device=self.device.device))
        self.host.write(slots, ks, vs)
        if self.mirror is not None:
            self.mirror.to_host(device_slots, slots)
        self.tree.set_host_slots(node, slots)
        self.num_host_backup_tokens += n
        self._push(node)
        return True

    def backup(self, node: TreeNode) -> None:
        """Backs up the device nodes on the path to `node` (host) and its full blocks (disk, remote)."""
        for n in self.tree.path_to(node):
            if n.device_slots is not None and n.host_slots is None:
                self._copy_to_host(n)
        self.write_storage(node)

    def on_insert(self, node: TreeNode) -> None:
        if self.write_policy == "write_through":
            self.backup(node)

    def on_hit(self, node: TreeNode | None) -> None:
        if self.write_policy == "write_through_selective" and node is not None and node.parent is not None:
            self.backup(node)

    # ---- host eviction ------------------------------------------------------------------------
    def _push(self, node: TreeNode) -> None:
        heapq.heappush(self._heap, (node.last_access, next(self._seq), node))
        if len(self._heap) > 4 * self.tree.num_nodes + 64:
            live = {id(e[2]): e for e in self._heap if self._is_host_evictable(e[2])}
            self._heap = list(live.values())
            heapq.heapify(self._heap)

    @staticmethod
    def _is_host_evictable(node: TreeNode) -> bool:
        return (
            not node.is_evicted
            and node.host_slots is not None
            and node.host_lock_ref == 0
            and (node.device_slots is not None or not node.children)
        )

    def evict_host(self, num_tokens: int) -> int:
        """Frees LRU host copies until `num_tokens` are freed or nothing is evictable."""
        freed = 0
        while freed < num_tokens and self._heap:
            access, _, node = heapq.heappop(self._heap)
            if not self._is_host_evictable(node):
                continue
            if access != node.last_access:  # touched since pushed: requeue at its new age
                self._push(node)
                continue
            freed += len(node.key)
            if node.device_slots is not None:
                self.tree.drop_host_slots(node)
                continue
            if self.write_policy == "write_back":
                self.write_storage(node)
            parent = node.parent
            assert parent is not None  # roots are never pushed
            self.tree.remove_subtree(node)
            if self._is_host_evictable(parent) and parent.parent is not None:
                self._push(parent)
        return freed

    def lock_host(self, node: TreeNode | None) -> None:
        while node is not None and node.parent is not None:
            node.host_lock_ref += 1
            node = node.parent

    def unlock_host(self, node: TreeNode | None) -> None:
        while node is not None and node.parent is not None:
            assert node.host_lock_ref > 0, "unlock_host on a node that is not host-locked"
            node.host_lock_ref -= 1
            if node.host_lock_ref == 0 and self._is_host_evictable(node):
                self._push(node)
            node = node.parent

    # ---- load-back ----------------------------------------------------------------------------
    def load(
        self,
        dst_slots: list[int],
        host_slots: list[int],
        disk: ReadBlocks | None,
        remote: ReadBlocks | None = None,
        rid: str = "",
    ) -> None:
        """Copies host KV, then disk KV, then remote KV into device slots `dst_slots` (in that order);
        under tensor parallelism every rank copies its own KV (`rid`: whose read blocks)."""
        copy_to_device(self.device, self.host, dst_slots, host_slots, (disk, remote))
        if self.mirror is not None:
            self.mirror.load(rid, dst_slots, host_slots, disk, remote)
        self.num_host_loaded_tokens += len(host_slots)
        self.num_disk_loaded_tokens += disk.num_tokens if disk is not None else 0
        self.num_remote_loaded_tokens += remote.num_tokens if remote is not None else 0

    # ---- storage tiers (disk, remote) ---------------------------------------------------------
    @property
    def disk(self) -> DiskStore | None:
        return self.disk_tier.ready_store if self.disk_tier is not None else None

    def match_storage(
        self, rid: str, tokens, namespace, num_in_memory: int
    ) -> tuple[ReadBlocks | None, ReadBlocks | None, bool]:
        """The prefix past the `num_in_memory` tokens on device and host: (disk part, remote part,
        still reading). The remote tier is asked once the disk's blocks are read, for the blocks
        past them."""
        disk = self.disk_tier.match(rid, tokens, namespace, num_in_memory) if self.disk_tier is not None else None
        if disk is not None and disk.is_loading:
            return None, None, True
        on_disk = disk.blocks if disk is not None else None
        if self.remote_tier is None:
            return on_disk, None, False
        remote = self.remote_tier.match(rid, tokens, namespace, num_in_memory + (on_disk.num_tokens if on_disk else 0))
        return on_disk, remote.blocks, remote.is_loading

    def write_storage(self, node: TreeNode) -> None:
        """Queues the full blocks of the path root..node that the disk tier and the remote store lack."""
        if self.disk_tier is None and self.remote_tier is None:
            return
        path, namespace = self.tree.path_to(node), self.tree.namespace_of(node)
        if self.disk_tier is not None:
            self.disk_tier.write_path(path, namespace)
        if self.remote_tier is not None:
            stored = self.remote_tier.write_path(path, namespace)
            if stored and self.tree.events is not None:  # every worker on the store can load these
                tokens = [t for n in path for t in n.key][:stored]
                self.tree.events.stored_prefix(tokens, namespace, "REMOTE")

    def wait_prefetch(self, timeout: float) -> None:
        if self.disk_tier is not None:
            self.disk_tier.wait(timeout)
        if self.remote_tier is not None:
            self.remote_tier.wait(timeout)

    def forget(self, rid: str) -> None:
        if self.mirror is not None:
            self.mirror.forget(rid)
        if self.disk_tier is not None:
            self.disk_tier.forget(rid)
        if self.remote_tier is not None:
            self.remote_tier.forget(rid)

    def drain(self) -> None:
        """Waits for every background disk and remote read and write to finish."""
        if self.disk_tier is not None:
            self.disk_tier.drain()
        if self.remote_tier is not None:
            self.remote_tier.drain()

    # ---- lifecycle and checks -----------------------------------------------------------------
    def check_idle_invariant(self) -> None:
        """Host: free + held by tree nodes == capacity, no host lock; disk: nothing in flight, index
        matches the files."""
        tree = self.tree
        assert tree.host_size + self.host.available_tokens == self.host.capacity, (
            f"host KV leak: available {self.host.available_tokens} + in tree {tree.host_size} "
            f"!= capacity {self.host.capacity}"
        )
        nodes = list(tree.iter_nodes())
        assert sum(len(n.key) for n in nodes if n.host_slots is not None) == tree.host_size, (
            "host_size disagrees with the tree"
        )
        assert not [n for n in nodes if n.host_lock_ref], "radix nodes still host-locked while idle"
        assert all(n.device_slots is not None or n.host_slots is not None for n in nodes), "a node with no KV anywhere"
        if self.disk_tier is not None:
            self.disk_tier.check_idle()
        if self.remote_tier is not None:
            self.remote_tier.check_idle()

    def stats(self, device_used_tokens: int) -> dict[str, object]:
        """Per-tier figures for `Engine.stats()` (token counters are totals since start)."""
        disk = {
            "hicache_bytes_used_disk": 0,
            "hicache_disk_capacity_bytes": 0,
            "hicache_disk_entries": 0,
            "hicache_backup_tokens_disk": 0,
            "hicache_disk_read_failures": 0,
            "hicache_disk_write_failures": 0,
        }
        return {
            "hicache_write_policy": self.write_policy,
            "hicache_bytes_used_device": device_used_tokens * self.host.bytes_per_token,
            "hicache_host_capacity_tokens": self.host.capacity,
            "hicache_host_used_tokens": self.tree.host_size,
            "hicache_bytes_used_host": self.tree.host_size * self.host.bytes_per_token,
            "hicache_loaded_tokens_host": self.num_host_loaded_tokens,
            "hicache_loaded_tokens_disk": self.num_disk_loaded_tokens,
            "hicache_backup_tokens_host": self.num_host_backup_tokens,
            **(self.disk_tier.stats() if self.disk_tier is not None else disk),
            "hicache_loaded_tokens_remote": self.num_remote_loaded_tokens,
            **(self.remote_tier.stats() if self.remote_tier is not None else {}),
        }

    def close(self) -> None:
        if self.disk_tier is not None:
            self.disk_tier.close()
        if self.remote_tier is not None:
            self.remote_tier.close()
