"""A tensor-parallel process group: the store rank 0 hosts, the collectives the layers call.

The group is a bare c10d backend (gloo on CPU, NCCL on CUDA) on a store of its own, not torch's
default process group, so several engines (`--dp-size` replicas of `--tp-size` ranks) can live in
one gateway process. Every collective has the group's timeout: a rank that stops answering fails
the step instead of hanging it."""

from __future__ import annotations

import datetime
import socket
from typing import Any

import torch
import torch.distributed as dist

from ..config import tp_timeout_s


class TPGroup:
    """`rank` of `size` ranks meeting at tcp://127.0.0.1:`port`. Rank 0 creates the store (on a free
    port) before the other ranks start; `connect()` on every rank then builds the backend."""

    def __init__(self, rank: int, size: int, port: int = 0, device: str = "cpu", timeout_s: float | None = None):
        self.rank, self.size, self.device = rank, size, torch.device(device)
        # a dead peer fails a collective at once; the timeout is for one that hangs
        self.timeout = datetime.timedelta(seconds=timeout_s if timeout_s is not None else tp_timeout_s())
        listen_fd = None
        if rank == 0:
            # Rank 0 listens on loopback only (the store alone would bind every interface), on a port
            # the kernel picks: no race between choosing and binding. The store owns the socket.
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.bind(("127.0.0.1", 0))
            listener.listen(size * 4)
            port = listener.getsockname()[1]
            listen_fd = listener.detach()
        self.store = dist.TCPStore(
            "127.0.0.1",
            port,
            size,
            rank == 0,
            timeout=self.timeout,
            wait_for_workers=False,
            master_listen_fd=listen_fd,
            use_libuv=False,
        )
        self.port = self.store.port
        self.store_alive = True
        self.backend: Any = None  # a c10d ProcessGroupGloo / ProcessGroupNCCL

    @property
    def init_method(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def connect(self) -> None:
        """Joins the other ranks; returns once all `size` have connected (or raises after the timeout)."""
        prefixed = dist.PrefixStore("tp", self.store)
        if self.device.type == "cuda":
            nccl_options = dist.ProcessGroupNCCL.Options()
            nccl_options._timeout = self.timeout
            self.backend = dist.ProcessGroupNCCL(prefixed, self.rank, self.size, nccl_options)
        else:
            # bound to loopback, as GLOO_SOCKET_IFNAME=lo would, without changing the process's environment
            options = dist.ProcessGroupGloo._Options()  # type: ignore[attr-defined]
            options._timeout = self.timeout
            options._devices = [dist.ProcessGroupGloo.create_device(interface="lo")]
            self.backend = dist.ProcessGroupGloo(prefixed, self.rank, self.size, options)

    def _pg(self) -> Any:
        assert self.backend is not None, "TPGroup.connect() must run before any collective"
        return self.backend

    def broadcast(self, tensor: torch.Tensor) -> torch.Tensor:
        """In place from rank 0 to every rank."""
        self._pg().broadcast(tensor, 0).wait(self.timeout)
        return tensor

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum over ranks, in place; every rank ends with the same values."""
        self._pg().allreduce([tensor]).wait(self.timeout)
        return tensor

    def gather_last_dim(self, tensor: torch.Tensor) -> torch.Tensor | None:
        """Rank 0: every rank's `tensor` (same shape) concatenated along the last dimension, in rank
        order; other ranks: None."""
        options = dist.GatherOptions()
        options.rootRank = 0
        options.timeout = self.timeout
        tensor = tensor.contiguous()
        if self.rank == 0:
            parts = [torch.empty_like(tensor) for _ in range(self.size)]
            self._pg().gather([parts], [tensor], options).wait(self.timeout)
            return torch.cat(parts, dim=-1)
        self._pg().gather([], [tensor], options).wait(self.timeout)
        return None

    def close(self) -> None:
        """Drops the backend and the store (rank 0's listening socket)."""
        backend, self.backend = self.backend, None
        if backend is not None and hasattr(backend, "shutdown"):
            try:
                backend.shutdown()
            except RuntimeError:
                pass  # a peer already gone: nothing left to tear down with it
        if self.store_alive:
            self.store_alive = False
            del self.store  # rank 0: closes the listening socket
