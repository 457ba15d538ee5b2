"""Turns a scheduled batch into tensors, runs the model, returns logits of the sampled positions."""

from __future__ import annotations

import torch

from ..kernels.cascade_attention import plan_cascade
from ..kvcache.kv_pool import KVPool
from ..kvcache.slot_table import SlotTable
from ..models.llama import LlamaForCausalLM
from ..scheduler.scheduler import Batch
from .attention import ForwardContext, create_backend
from .cuda_graph import DecodeGraphRunner
from .logprobs import PromptSpan, prompt_spans, record_prompt_logprobs


class ModelRunner:
    def __init__(self, model: LlamaForCausalLM, pool: KVPool, slot_table: SlotTable, attention_backend: str):
        self.model = model
        self.pool = pool
        self.slot_table = slot_table
        self.device = pool.device
        self.backend = create_backend(attention_backend, pool)
        self.num_forward_tokens = 0  # tokens run through the model since start (prefill + decode)
        self.num_prefill_tokens = 0
        self.decode_graphs: DecodeGraphRunner | None = None  # set by the engine on CUDA (cuda_graph.py)

    def _tensor(self, data: list[int]) -> torch.Tensor:
        return torch.tensor(data, dtype=torch.int64, device=self.device)

    @torch.inference_mode()
    def forward(self, batch: Batch, decode_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, list]:
        """Returns (logits [n, vocab], the n requests they belong to): one row per request whose
        computed tokens reach its last token this step (a mid-prompt chunk samples nothing).
        `decode_ids`: a decode step's input ids still on the device (the previous step's samples,
        scheduler/overlap.py) instead of each request's last token. Nothing is read back from the
        device here, so a GPU step can be queued while the host works on."""
        reqs = batch.reqs
        rows = self._tensor([r.table_row() for r in reqs])
        starts = [r.num_computed for r in reqs]
        ext = [r.extend_len for r in reqs]
        kv_len_list = [s + e for s, e in zip(starts, ext, strict=False)]
        kv_lens = self._tensor(kv_len_list)
        kv_indptr = torch.zeros(len(reqs) + 1, dtype=torch.int64, device=self.device)
        kv_indptr[1:] = kv_lens.cumsum(0)
        max_len = max(kv_len_list)
        table = self.slot_table.table[rows, :max_len]  # [B, max_len]
        kv_indices = self._kv_indices(table, kv_lens, kv_indptr, sum(kv_len_list))
        if batch.is_decode:
            input_ids = decode_ids if decode_ids is not None else self._tensor([r.last_token_id for r in reqs])
            positions = self._tensor(starts)
            qo_indptr = torch.arange(len(reqs) + 1, dtype=torch.int64, device=self.device)
        else:
            ids: list[int] = []
            pos: list[int] = []
            for r, s, e in zip(reqs, starts, ext, strict=False):
                ids += r.fill_ids()[s : s + e]
                pos += range(s, s + e)
            input_ids, positions = self._tensor(ids), self._tensor(pos)
            qo_indptr = torch.zeros(len(reqs) + 1, dtype=torch.int64, device=self.device)
            qo_indptr[1:] = self._tensor(ext).cumsum(0)
            self.num_prefill_tokens += sum(ext[: batch.num_prefills])  # not the decodes of a mixed batch
        out_slots = self.slot_table.table[rows.repeat_interleave(self._tensor(ext), output_size=sum(ext)), positions]
        graphs = self.decode_graphs  # CUDA: a decode step that fits its buffers is replayed (cuda_graph.py)
        if batch.is_decode and graphs is not None and graphs.can_run(len(reqs), sum(kv_len_list)):
            self.num_forward_tokens += len(reqs)
            return graphs.run(input_ids, positions, out_slots, kv_len_list, kv_indices), list(reqs)
        if batch.is_decode:  # every row (with decode_ids, the host does not know the last token yet)
            sampled = list(range(len(reqs)))
        else:
            sampled = [i for i, (r, s, e) in enumerate(zip(reqs, starts, ext, strict=False)) if s + e == r.num_tokens]
        sample_indices = qo_indptr[1:][sampled] - 1
        spans: list[PromptSpan] = []
        if not batch.is_decode:  # prompt logprobs: extra LM-head rows, after the sampled ones
            offsets = dict(zip(map(id, reqs), qo_indptr[:-1].tolist(), strict=True))
            prompt_rows: list[int] = []
            for req, first, count in prompt_spans(reqs, starts, ext):
                spans.append(PromptSpan(req, first, count, len(prompt_rows)))
                base = offsets[id(req)] - req.num_computed
                prompt_rows += range(base + first, base + first + count)
            if prompt_rows:
                sample_indices = torch.cat([sample_indices, self._tensor(prompt_rows)])
        ctx = ForwardContext(self.backend, batch.is_decode, out_slots, qo_indptr, kv_indptr, kv_indices, max(ext))
        if batch.is_decode and len(reqs) > 1 and self.backend.cascade_decode_attention is not None:
            ctx.cascade = plan_cascade([r.last_node for r in reqs], kv_len_list, table)
        logits = self.model(input_ids, positions, ctx, sample_indices)
        if spans:
            record_prompt_logprobs(logits[len(sampled) :], spans)
            logits = logits[: len(sampled)]
        self.num_forward_tokens += int(input_ids.numel())
        return logits, [reqs[i] for i in sampled]

    def _kv_indices(
        self, table: torch.Tensor, kv_lens: torch.Tensor, kv_indptr: torch.Tensor, total: int
    ) -> torch.Tensor:
        """Each request's KV slots, concatenated ([total]), from its slot-table row ([B, max_len]):
        a gather of known size (a boolean mask would read the count back from the device)."""
        owner = torch.repeat_interleave(torch.arange(len(kv_lens), device=self.device), kv_lens, output_size=total)
        return table[owner, torch.arange(total, device=self.device) - kv_indptr[:-1][owner]]
