"""What a gateway config puts in front of its routes: the co-located engine, or a pool of workers in
front of remote servers or of `dp_size` local engines, with the tokenizer the pool tokenizes with."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from typing import Any

from radixgate.engine.config import EngineConfig
from radixgate.engine.tiny_tokenizer import TINY_NAME, load_tiny_tokenizer

from ..config import GatewayConfig
from .pool import WorkerPool
from .worker import LocalWorker


def build_worker(config: GatewayConfig) -> LocalWorker | WorkerPool:
    """The worker a gateway config asks for: the co-located engine, or a pool of workers."""
    if config.disaggregation is not None and config.disaggregation.is_enabled:
        from radixgate.engine.engine import Engine

        from .pd_worker import DisaggWorker, transfer_key

        key = transfer_key(config.worker_api_key)
        return DisaggWorker(Engine(config.engine or EngineConfig()), config.disaggregation, key)
    if not config.is_routed:
        return LocalWorker.from_config(config.engine or EngineConfig())
    engine_config = config.engine or EngineConfig()
    model_path = engine_config.model_path
    name = "tiny" if model_path == "tiny" else os.path.basename(model_path.rstrip("/"))
    if config.pd_workers is not None:
        from .pd_router import PDRouter

        prefills, decodes = config.pd_workers
        return PDRouter(
            load_front_tokenizer(model_path),
            name,
            prefills,
            decodes,
            policy=config.router_policy or "cache_aware",
            worker_api_key=config.worker_api_key,
            allow_unsalted_workers=config.allow_unsalted_workers,
            health_check_interval_s=config.health_check_interval_s,
        )
    num_workers = config.dp_size if not config.workers else len(config.workers)
    pool = WorkerPool(
        load_front_tokenizer(model_path),
        name,
        policy=config.router_policy or ("cache_aware" if num_workers > 1 else "round_robin"),
        worker_api_key=config.worker_api_key,
        allow_unsalted_workers=config.allow_unsalted_workers,
        health_check_interval_s=config.health_check_interval_s,
    )
    for url in config.workers:
        pool.add_remote(url)
    if not config.workers:
        for rank in range(config.dp_size):
            # One engine per tp_size devices on a multi-GPU host (cuda:0, cuda:tp, ...); all on the CPU otherwise.
            device = engine_config.device
            if device.startswith("cuda") and ":" not in device:
                device = f"cuda:{rank * engine_config.tp_size}"
            pool.add_local(LocalWorker.from_config(replace(engine_config, device=device)))
    return pool


def load_front_tokenizer(model_path: str) -> Any:
    """The tokenizer (and chat template) alone: the front gateway never loads weights."""
    if model_path == TINY_NAME:
        return load_tiny_tokenizer()  # no weights written: the workers write their own checkpoint
    config_file = os.path.join(model_path, "tokenizer_config.json")
    declared = None
    if os.path.isfile(config_file):
        with open(config_file, encoding="utf-8") as f:
            declared = json.load(f).get("tokenizer_class")
    if declared == "PreTrainedTokenizerFast":  # AutoTokenizer's config classes would load torch
        from transformers import PreTrainedTokenizerFast

        return PreTrainedTokenizerFast.from_pretrained(model_path)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_path)
