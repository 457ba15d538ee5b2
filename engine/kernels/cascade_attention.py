"""Cascade decode attention (torch): a prefix shared by several running requests is read once.

When a batch of decoding requests shares a cached prefix (one system prompt, many users), plain
paged decode gathers that prefix's K/V once per request. Here each group's queries attend to
the shared prefix together (one gather, one matmul), each request attends to its own suffix, and
the two partial results merge exactly through their log-sum-exp (FlashInfer's cascade attention,
Hydragen). The result equals `decode_attention_torch` up to float rounding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from radixgate.engine.kernels.store_kv import read_slots


@dataclass
class CascadePlan:
    """groups[i] = (prefix_slots [P] int64, members [m] int64 rows of the batch); every request's
    remaining KV (all of it for requests in no group) is suffix_indices[suffix_indptr[b]:...]."""

    groups: list[tuple[torch.Tensor, torch.Tensor]]
    suffix_indptr: torch.Tensor
    suffix_indices: torch.Tensor


def _attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sm_scale: float, valid: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """q: [B, Hkv, G, D]; k, v: [B, L, Hkv, D] -> (o [B, Hkv, G, D], lse [B, Hkv, G])."""
    scores = torch.einsum("bhgd,blhd->bhgl", q, k) * sm_scale
    if valid is not None:
        scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    probs = torch.exp(scores - lse[..., None])
    return torch.einsum("bhgl,blhd->bhgd", probs, v), lse


def cascade_decode_attention_torch(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    plan: CascadePlan,
    sm_scale: float,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
) -> torch.Tensor:
    """q: [batch, num_heads, head_dim] -> o: same shape."""
    batch, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[1]
    qg = q.view(batch, num_kv_heads, num_heads // num_kv_heads, head_dim)
    # every request's own suffix, padded to the longest
    lens = plan.suffix_indptr[1:] - plan.suffix_indptr[:-1]
    pos = torch.arange(int(lens.max()), device=q.device)
    valid = pos[None, :] < lens[:, None]
    gather = torch.where(valid, plan.suffix_indptr[:-1, None] + pos[None, :], 0)
    slots = read_slots(plan.suffix_indices, gather)
    k = read_slots(k_cache, slots).to(q.dtype) * k_scale
    v = read_slots(v_cache, slots).to(q.dtype) * v_scale
    out, lse = _attend(qg, k, v, sm_scale, valid)
    for prefix_slots, members in plan.groups:
        kp = (read_slots(k_cache, prefix_slots).to(q.dtype) * k_scale)[None]  # [1, P, Hkv, D]
        vp = (read_slots(v_cache, prefix_slots).to(q.dtype) * v_scale)[None]
        m, group = members.numel(), qg.shape[2]
        # all members' queries of a KV head attend to the prefix in one pass: [1, Hkv, m * G, D]
        qm = qg[members].permute(1, 0, 2, 3).reshape(1, num_kv_heads, m * group, head_dim)
        op, lsep = _attend(qm, kp, vp, sm_scale, None)
        op = op.reshape(num_kv_heads, m, group, head_dim).permute(1, 0, 2, 3)  # [m, Hkv, G, D]
        lsep = lsep.reshape(num_kv_heads, m, group).permute(1, 0, 2)
        _merge_into(out, lse, members, op, lsep)
    return out.reshape(batch, num_heads, head_dim)


def _merge_into(
    out: torch.Tensor, lse: torch.Tensor, rows: torch.Tensor, o: torch.Tensor, lse_new: torch.Tensor
) -> None:
    """Combines partial attention results over disjoint KV sets: out/lse rows are updated in place."""
    total = torch.logaddexp(lse[rows], lse_new)
    out[rows] = out[rows] * torch.exp(lse[rows] - total)[..., None] + o * torch.exp(lse_new - total)[..., None]
    lse[rows] = total


def plan_cascade(
    prefix_nodes: list, kv_lens: list[int], table_rows: torch.Tensor, min_shared: int = 64
) -> CascadePlan | None:
    """Groups decoding requests by the deepest radix node at least two of them share.

    prefix_nodes[b] is request b's locked radix node (its cached prefix) or None; `depth` on a node
    counts tokens from the root, and a request's first `depth` slots are that path's slots.
    table_rows: [B, max_len] slot table rows of the batch. Returns None when nothing is shared."""
    chains: list[list] = []
    counts: dict[int, int] = {}
    for node in prefix_nodes:
        chain = []
        while node is not None and node.parent is not None:
            chain.append(node)
            counts[id(node)] = counts.get(id(node), 0) + 1
            node = node.parent
        chains.append(chain)
    starts: list[int] = []
    groups_by_node: dict[int, tuple[Any, list[int]]] = {}  # id -> (radix node, batch rows)
    for b, chain in enumerate(chains):
        shared = next((n for n in chain if counts[id(n)] >= 2 and n.depth >= min_shared), None)
        starts.append(shared.depth if shared is not None else 0)
        if shared is not None:
            groups_by_node.setdefault(id(shared), (shared, []))[1].append(b)
    if not groups_by_node:
        return None
    device = table_rows.device
    groups = [
        (table_rows[members[0], : node.depth], torch.tensor(members, dtype=torch.int64, device=device))
        for node, members in groups_by_node.values()
    ]
    starts_t = torch.tensor(starts, dtype=torch.int64, device=device)
    lens_t = torch.tensor(kv_lens, dtype=torch.int64, device=device) - starts_t
    indptr = torch.zeros(len(kv_lens) + 1, dtype=torch.int64, device=device)
    indptr[1:] = lens_t.cumsum(0)
    pos = torch.arange(table_rows.shape[1], device=device)
    mask = (pos[None, :] >= starts_t[:, None]) & (pos[None, :] < starts_t[:, None] + lens_t[:, None])
    return CascadePlan(groups, indptr, table_rows[mask])
