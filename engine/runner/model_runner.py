"""Turns a scheduled batch into tensors, runs the model, returns logits of the sampled positions;
and, for embeddings, runs prompts as one prefill of their own and returns their pooled states."""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F

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

    @torch.inference_mode()
    def embed(self, input_ids: list[list[int]], vocab_size: int, context_len: int) -> torch.Tensor:
        """Each prompt's last-token final hidden state (after the final norm), L2-normalised, as
        vLLM pools decoder models: [len(input_ids), hidden] float32. The prompts run as one prefill
        over a scratch pool in the model's dtype, so the shared pool, the radix cache and the slot
        table are never touched and nothing is cached; prompts go in groups of at most `context_len`
        tokens, so the scratch KV is never larger than one full-context request's. Called in the
        engine's loop (`Engine.embed`)."""
        check_embed_inputs(input_ids, vocab_size, context_len)
        if type(self.model) is not LlamaForCausalLM:  # a tensor-parallel shard would wait on its ranks
            raise ValueError("embeddings need a single-device engine (tp_size 1)")
        groups: list[list[list[int]]] = [[]]
        for ids in input_ids:
            if groups[-1] and sum(map(len, groups[-1])) + len(ids) > context_len:
                groups.append([])
            groups[-1].append(ids)
        return torch.cat([self._embed_group(group) for group in groups])

    def _embed_group(self, input_ids: list[list[int]]) -> torch.Tensor:
        lens = [len(ids) for ids in input_ids]
        total, pool = sum(lens), self.pool
        dtype = self.model.model.embed_tokens.weight.dtype
        scratch = KVPool(total, pool.num_layers, pool.num_kv_heads, pool.head_dim, dtype, self.device)
        slots = torch.arange(total, device=self.device)
        indptr = self._tensor([0, *itertools.accumulate(lens)])  # [B+1]: no prefix, so q rows == kv rows
        positions = self._tensor([p for n in lens for p in range(n)])
        ctx = ForwardContext(type(self.backend)(scratch), False, slots, indptr, indptr, slots, max(lens))
        ids = self._tensor([t for prompt in input_ids for t in prompt])
        hidden = self.model.final_hidden(ids, positions, ctx, indptr[1:] - 1)  # [B, hidden]
        self.num_forward_tokens += total
        return F.normalize(hidden.float(), dim=-1)

    def _kv_indices(
        self, table: torch.Tensor, kv_lens: torch.Tensor, kv_indptr: torch.Tensor, total: int
    ) -> torch.Tensor:
        """Each request's KV slots, concatenated ([total]), from its slot-table row ([B, max_len]):
        a gather of known size (a boolean mask would read the count back from the device)."""
        owner = torch.repeat_interleave(torch.arange(len(kv_lens), device=self.device), kv_lens, output_size=total)
        return table[owner, torch.arange(total, device=self.device) - kv_indptr[:-1][owner]]


def check_embed_inputs(input_ids: list[list[int]], vocab_size: int, context_len: int) -> None:
    """Raises ValueError saying what to change when a prompt cannot be embedded."""
    if not input_ids:
        raise ValueError("no input to embed: send at least one prompt")
    for i, ids in enumerate(input_ids):
        if not ids:
            raise ValueError(f"input {i} is empty: send at least one token")
        bad = next((t for t in ids if not isinstance(t, int) or not 0 <= t < vocab_size), None)
        if bad is not None:
            raise ValueError(f"input {i}: token id {bad!r} is outside the vocabulary [0, {vocab_size})")
        if len(ids) > context_len:
            raise ValueError(
                f"input {i} has {len(ids)} tokens but the model's context window is {context_len}: "
                f"shorten it by at least {len(ids) - context_len} tokens"
            )
