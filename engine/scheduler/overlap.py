"""Overlap scheduling (SGLang's overlap scheduler): decode step N+1 is scheduled and launched before
step N's tokens are read back, so on a GPU the host's work (reading the tokens, stop checks,
detokenizing, streaming, scheduling) runs while the device computes.

Decode step N+1 feeds each request the token step N sampled. Here that token stays on the device:
step N+1's input ids are step N's sampled ids (gathered on the device when requests left the batch
in between), and only the KV bookkeeping
(`Scheduler.advance`: one more computed token per request) is done at launch. After launching
N+1, the host waits for step N's ids alone (a copy to pinned memory with its own event, not the
whole stream) and applies them: output ids, stop checks, streaming. A request that finished at
step N has already been launched in N+1; that row's token is dropped when N+1 completes, and its
KV (written by N+1 at a slot released to the cache or freed) is only read by later steps, which
the device runs after N+1.

Step N+1 runs ahead only when it is sure to be a pure decode of step N's requests (or of those
still running):
nothing to prefill (no chunk in progress, no waiting request that could be admitted), pages for
every request's next token without retracting, and every request sampling plainly: no grammar,
penalties, logit bias, pending `min_new_tokens` or logprobs, whose processors read the host's
output ids that lag one step here. Otherwise step N is completed first and the engine's
synchronous step runs. `enable_overlap_schedule` turns it on; off by default until measured on a
GPU (`radixgate bench cuda-graph`), where it pays; on a CPU every op is synchronous and it only
reorders work (the tests run it there to check it gives the same tokens)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from .request import Req, ReqStatus
from .scheduler import Batch

if TYPE_CHECKING:
    from ..engine import Engine


def samples_plainly(req: Req) -> bool:
    """No logits processor or logprob for this request reads its output ids on the host."""
    p = req.sampling
    return (
        req.grammar is None
        and req.logprobs is None
        and not p.logit_bias
        and p.frequency_penalty == 0.0
        and p.presence_penalty == 0.0
        and p.repetition_penalty == 1.0
        and p.min_new_tokens <= len(req.output_ids)
    )


@dataclass
class Launched:
    batch: Batch
    ids: torch.Tensor  # [B] sampled token ids, on the device
    host: torch.Tensor  # the same ids, copied to host memory (pinned on CUDA)
    ready: torch.cuda.Event | None  # recorded after the copy; None on CPU


class RunAhead:
    def __init__(self, engine: Engine):
        self.engine = engine
        self.inflight: Launched | None = None
        self.num_launched = 0  # decode steps launched ahead of the previous step's tokens

    def step(self) -> bool:
        """One round: returns False when there was nothing to run or complete."""
        prev, self.inflight = self.inflight, None
        rows = self._continues(prev.batch.reqs) if prev is not None else None
        if prev is not None and rows is not None:
            batch = self.engine.scheduler.schedule()
            assert batch is not None and batch.is_decode and len(batch.reqs) == len(rows)
            same = len(rows) == len(prev.batch.reqs)
            self.inflight = self._launch(
                batch, prev.ids if same else prev.ids[torch.tensor(rows, device=prev.ids.device)]
            )
            self._complete(prev)
            return True
        if prev is not None:
            self._complete(prev)
        batch = self.engine.scheduler.schedule()
        if batch is None:
            return prev is not None
        if batch.is_decode and all(samples_plainly(r) for r in batch.reqs):
            self.inflight = self._launch(batch, None)
        else:
            self.engine.run_batch(batch)
        return True

    def _continues(self, reqs: list[Req]) -> list[int] | None:
        """When the next schedule() is certain to be a decode of `reqs` (less those that finished
        or were aborted since) that retracts nothing: the rows of `reqs` it runs, in order."""
        sched = self.engine.scheduler
        cm = sched.cache_manager
        if not sched.running or sched.may_prefill():
            return None
        rows: list[int] = []
        row = 0
        for req in sched.running:  # removing requests keeps the others' order
            while row < len(reqs) and reqs[row] is not req:
                row += 1
            if row == len(reqs) or not samples_plainly(req):
                return None
            rows.append(row)
            row += 1
        if not cm.ensure_decode_pages(sched.running):
            return None
        return rows

    def _launch(self, batch: Batch, input_ids: torch.Tensor | None) -> Launched:
        engine = self.engine
        logits, reqs = engine.runner.forward(batch, input_ids)
        assert len(reqs) == len(batch.reqs), "every request of a decode step samples"
        ids = engine.sampler.sample(logits, reqs)
        engine.scheduler.advance(batch)
        ready = None
        if ids.device.type == "cuda":
            host = torch.empty(ids.shape, dtype=ids.dtype, pin_memory=True)
            host.copy_(ids, non_blocking=True)
            ready = torch.cuda.Event()
            ready.record()
        else:
            host = ids
        self.num_launched += input_ids is not None
        return Launched(batch, ids, host, ready)

    def _complete(self, launched: Launched) -> None:
        if launched.ready is not None:
            launched.ready.synchronize()
        engine = self.engine
        for req, token in zip(launched.batch.reqs, launched.host.tolist(), strict=True):
            if req.status is ReqStatus.FINISHED:
                continue  # finished (or aborted) after this step was launched: its row is dropped
            engine.scheduler.accept_token(req, token)
            engine.num_generation_tokens += 1
            engine._after_token(req)
