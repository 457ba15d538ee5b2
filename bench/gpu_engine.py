"""The engine end to end on a Llama-3.1-8B-shaped random-weight checkpoint, 16-bit KV vs FP8 KV.

    radixgate bench gpu-engine                      # on a CUDA machine: bf16, 8B shape
    radixgate bench gpu-engine --shape small --device cpu --num-requests 4 --output-len 4   # smoke test

Writes the checkpoint once (random bf16 weights generated on the device, safetensors shards, the
tiny model's tokenizer), then for each KV dtype: builds an engine, runs a batch of requests that
share a prefix (cold), runs it again (warm, served from the prefix cache), and prints the KV
capacity, throughput, time to first token and cache hits. The last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
from safetensors.torch import save_file

SHAPES = {
    # Llama-3.1-8B: 32 layers, 32 query heads, 8 KV heads, head_dim 128.
    "8b": dict(
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        vocab_size=128256,
    ),
    "small": dict(
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=2,
        vocab_size=100352,
    ),
}


def write_checkpoint(path: str, shape: dict, device: str, seed: int = 0) -> str:
    """A Llama checkpoint of `shape` with N(0, 0.02) bf16 weights, one safetensors shard per 4 layers."""
    from transformers import AutoTokenizer

    from radixgate.engine.models.tiny import ensure_tiny_checkpoint

    if os.path.isfile(os.path.join(path, "model.safetensors.index.json")):
        return path
    os.makedirs(path, exist_ok=True)
    config = dict(
        architectures=["LlamaForCausalLM"],
        model_type="llama",
        rms_norm_eps=1e-5,
        rope_theta=500000.0,
        rope_scaling=dict(
            rope_type="llama3",
            factor=8.0,
            low_freq_factor=1.0,
            high_freq_factor=4.0,
            original_max_position_embeddings=8192,
        ),
        max_position_embeddings=16384,
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
        bos_token_id=100257,
        eos_token_id=100257,
        **shape,
    )
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    AutoTokenizer.from_pretrained(ensure_tiny_checkpoint()).save_pretrained(path)
    gen = torch.Generator(device=device).manual_seed(seed)
    h, inter, vocab = shape["hidden_size"], shape["intermediate_size"], shape["vocab_size"]
    head_dim = h // shape["num_attention_heads"]
    kv = shape["num_key_value_heads"] * head_dim

    def rand(*dims: int) -> torch.Tensor:
        return (torch.randn(dims, generator=gen, device=device, dtype=torch.float32) * 0.02).to(torch.bfloat16).cpu()

    weight_map: dict[str, str] = {}
    shards: list[dict[str, torch.Tensor]] = [
        {
            "model.embed_tokens.weight": rand(vocab, h),
            "lm_head.weight": rand(vocab, h),
            "model.norm.weight": torch.ones(h, dtype=torch.bfloat16),
        }
    ]
    for first in range(0, shape["num_hidden_layers"], 4):
        shard = {}
        for i in range(first, min(first + 4, shape["num_hidden_layers"])):
            p = f"model.layers.{i}."
            shard.update(
                {
                    p + "self_attn.q_proj.weight": rand(h, h),
                    p + "self_attn.k_proj.weight": rand(kv, h),
                    p + "self_attn.v_proj.weight": rand(kv, h),
                    p + "self_attn.o_proj.weight": rand(h, h),
                    p + "mlp.gate_proj.weight": rand(inter, h),
                    p + "mlp.up_proj.weight": rand(inter, h),
                    p + "mlp.down_proj.weight": rand(h, inter),
                    p + "input_layernorm.weight": torch.ones(h, dtype=torch.bfloat16),
                    p + "post_attention_layernorm.weight": torch.ones(h, dtype=torch.bfloat16),
                }
            )
        shards.append(shard)
    for n, shard in enumerate(shards):
        name = f"model-{n:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, os.path.join(path, name), metadata={"format": "pt"})
        weight_map.update({k: name for k in shard})
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    return path


def run_workload(engine, prompts: list[list[int]], output_len: int) -> dict:
    from radixgate.engine import SamplingParams

    sampling = SamplingParams(max_new_tokens=output_len, temperature=0.0, ignore_eos=True)
    t0 = time.time()
    outs = engine.generate(input_ids=prompts, sampling=sampling)
    seconds = time.time() - t0
    ttft = [o.times["first_token"] - o.times["arrival"] for o in outs]
    decode = [(o.times["finished"] - o.times["first_token"]) / max(len(o.token_ids) - 1, 1) for o in outs]
    return dict(
        seconds=round(seconds, 3),
        output_tok_s=round(sum(len(o.token_ids) for o in outs) / seconds, 1),
        input_tok_s=round(sum(o.prompt_tokens for o in outs) / seconds, 1),
        cached_tokens=sum(o.cached_tokens for o in outs),
        ttft_median_ms=round(statistics.median(ttft) * 1e3, 1),
        time_per_output_token_ms=round(statistics.median(decode) * 1e3, 2),
    )


def bench_engine(path: str, kv_cache_dtype: str, args) -> dict:
    from radixgate.engine import Engine, EngineConfig

    engine = Engine(
        EngineConfig(
            model_path=path,
            device=args.device,
            dtype=args.dtype,
            kv_cache_dtype=kv_cache_dtype,
            page_size=16,
            attention_backend=args.attention_backend,
            mem_fraction_static=args.mem_fraction,
            max_running_requests=max(args.num_requests, 1),
            chunked_prefill_size=8192,
            max_prefill_tokens=16384,
        )
    )
    model = engine.runner.model
    if next(model.parameters()).device != engine.pool.device:
        print(
            f"  note: the loader left the weights on {next(model.parameters()).device}; moving them to "
            f"{engine.pool.device}"
        )
        model.to(engine.pool.device)
    gen = torch.Generator().manual_seed(0)
    shared = torch.randint(0, 100000, (args.shared_prefix,), generator=gen).tolist()
    prompts = [
        shared + torch.randint(0, 100000, (args.prompt_len - args.shared_prefix,), generator=gen).tolist()
        for _ in range(args.num_requests)
    ]
    run_workload(engine, prompts[:1], 2)  # warm-up: compiles kernels, sets FP8 scales
    engine.flush_cache()
    cold = run_workload(engine, prompts, args.output_len)
    warm = run_workload(engine, prompts, args.output_len)
    stats = engine.stats()
    engine.shutdown()
    result = dict(
        kv_cache_dtype=stats["kv_cache_dtype"],
        attention_backend=engine.runner.backend.name,
        max_total_num_tokens=stats["max_total_num_tokens"],
        kv_pool_gib=round(engine.pool.nbytes / 2**30, 2),
        cold=cold,
        warm=warm,
        cache_hit_rate=round(stats["cache_hit_rate"], 3),
    )
    del engine, model
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shape", choices=sorted(SHAPES), default="8b")
    p.add_argument("--checkpoint-dir", default=None)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--kv-cache-dtypes", nargs="+", default=["auto", "fp8_e4m3"])
    p.add_argument("--attention-backend", default="auto")
    p.add_argument("--mem-fraction", type=float, default=0.3)
    p.add_argument("--num-requests", type=int, default=64)
    p.add_argument("--prompt-len", type=int, default=1024)
    p.add_argument("--shared-prefix", type=int, default=512)
    p.add_argument("--output-len", type=int, default=128)
    args = p.parse_args(argv)
    path = args.checkpoint_dir or os.path.join(os.environ.get("TMPDIR", "/tmp"), f"radixgate-llama-{args.shape}-random")
    t0 = time.time()
    write_checkpoint(path, SHAPES[args.shape], args.device)
    print(f"checkpoint: {path} ({time.time() - t0:.0f} s)")
    results = []
    for kv in args.kv_cache_dtypes:
        r = bench_engine(path, kv, args)
        results.append(r)
        print(
            f"kv {r['kv_cache_dtype']:<9} ({r['attention_backend']}): capacity {r['max_total_num_tokens']} tokens "
            f"in {r['kv_pool_gib']} GiB | cold {r['cold']['output_tok_s']} out tok/s, "
            f"TTFT {r['cold']['ttft_median_ms']} ms, "
            f"TPOT {r['cold']['time_per_output_token_ms']} ms | warm {r['warm']['output_tok_s']} out tok/s, "
            f"TTFT {r['warm']['ttft_median_ms']} ms, cached {r['warm']['cached_tokens']} tokens"
        )
    print("RESULT " + json.dumps(dict(shape=args.shape, device=args.device, results=results)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
