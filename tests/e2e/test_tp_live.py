"""`radixgate serve --tp-size 2` on the CPU: answers the `openai` client, reports twice the TP=1 KV
capacity at the same per-rank budget, hands back an aborted stream's pages, answers 503 once a rank
dies, and leaves no process behind."""

from __future__ import annotations

import time

import httpx
import openai
import psutil
import pytest
import torch

from radixgate.engine.engine import _CPU_KV_BUDGET_BYTES
from radixgate.engine.kvcache.kv_pool import KVPool
from radixgate.engine.models.tiny import TINY_SHAPE
from radixgate.gateway.server_process import ServerProcess


def test_serve_tp2_answers_reports_capacity_fails_loudly_and_cleans_up() -> None:
    with ServerProcess(["--tp-size", "2", "--enable-debug-endpoints"]) as server:
        assert server.process is not None
        family = psutil.Process(server.process.pid).children(recursive=True)
        ranks = [p for p in family if "multiprocessing" in " ".join(p.cmdline()) and "tracker" not in p.cmdline()[-1]]
        assert len(ranks) == 1, [p.cmdline() for p in family]

        client = openai.OpenAI(base_url=server.api_url, api_key="unused", max_retries=0, timeout=60)
        reply = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "Hello"}], max_tokens=5, temperature=0
        )
        assert reply.usage is not None and reply.usage.completion_tokens == 5

        stream = client.completions.create(model="tiny", prompt="abort me", max_tokens=200, stream=True)
        next(iter(stream))
        stream.close()  # the client goes away mid-stream: its request is aborted, its pages handed back
        assert httpx.get(f"{server.base_url}/debug/check_idle_invariant", timeout=30).status_code == 200

        info = httpx.get(f"{server.base_url}/server_info", timeout=30).json()
        heads = TINY_SHAPE["num_key_value_heads"]
        head_dim = TINY_SHAPE["hidden_size"] // TINY_SHAPE["num_attention_heads"]
        tp1_tokens = _CPU_KV_BUDGET_BYTES // KVPool.bytes_per_token(
            TINY_SHAPE["num_hidden_layers"], heads, head_dim, torch.float32
        )
        assert info["tp_size"] == 2 and info["kv_heads_per_rank"] == heads // 2
        assert info["max_total_num_tokens"] == 2 * tp1_tokens

        ranks[0].kill()  # a rank dies: the next request fails loudly, never hangs
        deadline = time.monotonic() + 10  # the server reaps it at its next liveness check: a zombie till then
        while ranks[0].is_running() and ranks[0].status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(openai.APIStatusError) as failed:
            client.completions.create(model="tiny", prompt="after the rank died", max_tokens=3)
        assert failed.value.status_code == 503 and "rank 1" in failed.value.message, failed.value.message
        assert httpx.get(f"{server.base_url}/health", timeout=30).status_code == 503
    gone, alive = psutil.wait_procs(family, timeout=15)
    assert not alive, [p.cmdline() for p in alive]
