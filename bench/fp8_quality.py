"""How much FP8 KV changes a model's predictions: `python -m radixgate.bench.fp8_quality`.

For each model and a fixed prompt set, the full-precision engine generates 64 greedy tokens.
Then both engines (full-precision KV and FP8 KV) score that same sequence in one prefill and
their next-token logits at the 64 generated positions are compared (teacher forcing, so one
early disagreement does not derail the rest):
  cosine     mean cosine similarity of the two logit vectors
  agreement  fraction of positions where the FP8 engine's argmax is the reference token
  free-run   fraction of the 64 tokens the FP8 engine itself generates greedily that equal the
             reference, position by position (after a first divergence they rarely match again)
  top-2 gap  median, over those positions, of the full-precision model's gap between its two
             largest logits divided by the logits' standard deviation: how decided the model is.
             FP8 rounding flips an argmax where it moves the logits by more than this gap, so a
             small gap together with a low cosine means many flips.
The models: the built-in tiny Llama and a random-weight Qwen2 checkpoint written on first use
(the default), and `trained`: the tiny model's architecture and tokenizer with weights trained
for a few minutes on CPU, a stand-in for a real model's confident predictions (built on first use).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import sys
import sysconfig
from dataclasses import dataclass

import torch

from radixgate.engine.kernels.fp8 import SCALE_HEADROOM, fp8_grid, quantize_fp8

PROMPTS = [
    "The quick brown fox jumps over the lazy dog. Then the dog",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "Paged attention stores the KV cache in fixed-size pages so that",
    "Once upon a time, in a kingdom by the sea, there lived",
    "Q: What is the capital of France?\nA:",
    "SELECT name, count(*) FROM orders GROUP BY name ORDER BY",
    "1, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144,",
    "You are a helpful assistant. Answer briefly and cite your sources. The user asks about tides:",
]
QWEN2_SHAPE = dict(
    hidden_size=256,
    intermediate_size=768,
    num_hidden_layers=4,
    num_attention_heads=8,
    num_key_value_heads=2,
    max_position_embeddings=4096,
)


@dataclass
class Quality:
    model: str
    kv_cache_dtype: str
    cosine: float
    agreement: float
    free_run: float
    top2_gap: float


def random_qwen2_checkpoint() -> str:
    """A random-weight Qwen2 checkpoint (attention biases, GQA 4:1, transformers' default
    initializer_range 0.02) with the tiny model's tokenizer."""
    from transformers import AutoTokenizer

    from radixgate.engine.config import default_model_cache_dir
    from radixgate.engine.models.tiny import ensure_tiny_checkpoint, write_random_checkpoint

    path = os.path.join(default_model_cache_dir(), "fp8-quality-qwen2-v2")
    if not os.path.isfile(os.path.join(path, "model.safetensors")):
        tokenizer = AutoTokenizer.from_pretrained(ensure_tiny_checkpoint())
        tmp = f"{path}.tmp-{os.getpid()}"
        write_random_checkpoint(tmp, "qwen2", vocab_size=len(tokenizer), tokenizer=tokenizer, seed=7, **QWEN2_SHAPE)
        try:
            os.rename(tmp, path)
        except OSError:  # another process wrote it first; its checkpoint is identical
            shutil.rmtree(tmp, ignore_errors=True)
    return path


TRAIN_STEPS, TRAIN_BATCH, TRAIN_SEQ_LEN, TRAIN_LR = 400, 4, 256, 3e-3
TRAIN_FILES = 80  # the first 80 modules of Python's standard library, in name order: ~520k tokens


def trained_tiny_checkpoint() -> str:
    """The tiny model trained with next-token loss on Python's standard library source, from its
    random weights, for TRAIN_STEPS steps (about 12 minutes on two CPU cores; written once).

    Random-weight models spread their predictions almost evenly over the vocabulary, so FP8
    rounding decides many near-ties; trained models do not. This one learns enough to lean on
    its context: scoring with each layer's V rows shuffled across positions changes most of
    its argmaxes (it changes nearly all of the random models' too)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from radixgate.engine.config import default_model_cache_dir
    from radixgate.engine.models.tiny import ensure_tiny_checkpoint

    path = os.path.join(default_model_cache_dir(), "fp8-quality-trained-tiny-v1")
    if os.path.isfile(os.path.join(path, "model.safetensors")):
        return path
    source = ensure_tiny_checkpoint()
    tokenizer = AutoTokenizer.from_pretrained(source)
    files = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))[:TRAIN_FILES]
    text = "".join(open(f, encoding="utf-8", errors="replace").read() for f in files)
    corpus = torch.tensor(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=TRAIN_LR, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=TRAIN_LR, total_steps=TRAIN_STEPS, pct_start=0.1)
    losses = []
    columns = (
        TextColumn("training the tiny model on the standard library"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]:.2f}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, transient=True) as progress:
        task = progress.add_task("train", total=TRAIN_STEPS, loss=float("nan"))
        for _ in range(TRAIN_STEPS):
            starts = torch.randint(0, len(corpus) - TRAIN_SEQ_LEN, (TRAIN_BATCH,)).tolist()
            batch = torch.stack([corpus[s : s + TRAIN_SEQ_LEN] for s in starts])
            loss = model(input_ids=batch, labels=batch).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            losses.append(loss.item())
            progress.update(task, advance=1, loss=statistics.fmean(losses[-20:]))
    tmp = f"{path}.tmp-{os.getpid()}"
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    with open(os.path.join(tmp, "training.json"), "w") as f:
        json.dump(
            {
                "steps": TRAIN_STEPS,
                "batch": TRAIN_BATCH,
                "seq_len": TRAIN_SEQ_LEN,
                "lr": TRAIN_LR,
                "corpus_tokens": len(corpus),
                "corpus_files": [os.path.basename(f) for f in files],
                "final_loss": statistics.fmean(losses[-20:]),
            },
            f,
            indent=1,
        )
    try:
        os.rename(tmp, path)
    except OSError:  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
    return path


@torch.inference_mode()
def score_logits(engine, token_ids: list[int], first: int) -> torch.Tensor:
    """Logits [len - first - 1, vocab] predicting tokens first+1.. of `token_ids`, from one
    prefill through the engine's model, pool and attention backend. It writes pool slots
    directly, so call it only on an idle engine whose cache was flushed."""
    from radixgate.engine.runner.attention import ForwardContext

    assert engine.flush_cache(), "the engine must be idle"
    n = len(token_ids)
    device = engine.pool.device
    assert n <= engine.pool.num_slots
    slots = torch.arange(n, dtype=torch.int64, device=device)
    bounds = torch.tensor([0, n], dtype=torch.int64, device=device)
    ctx = ForwardContext(engine.runner.backend, False, slots, bounds, bounds, slots)
    ids = torch.tensor(token_ids, dtype=torch.int64, device=device)
    return engine.runner.model(ids, slots, ctx, torch.arange(first, n - 1, device=device))


def measure(
    model_path: str,
    kv_cache_dtypes: list[str],
    prompts: list[str],
    num_tokens: int,
    attention_backend: str = "torch",
    device: str = "cpu",
    dtype: str = "float32",
) -> list[Quality]:
    make = _engine_factory(model_path, attention_backend, device, dtype)
    ref_engine = make("auto")
    prompt_ids, ref_tokens, ref_logits = _reference(ref_engine, prompts, num_tokens)
    ref_engine.shutdown()
    ref = torch.cat(ref_logits).float()
    top2 = ref.topk(2, dim=-1).values
    top2_gap = float(((top2[:, 0] - top2[:, 1]) / ref.std(dim=-1)).median())
    name = os.path.basename(model_path.rstrip("/"))
    results = []
    for kv in kv_cache_dtypes:
        engine = make(kv)
        # The first batch calibrates the FP8 scales, as in serving.
        own_tokens = [o.token_ids for o in engine.generate(input_ids=prompt_ids, sampling=_greedy(num_tokens))]
        logits = [score_logits(engine, p + t, len(p) - 1) for p, t in zip(prompt_ids, ref_tokens, strict=False)]
        engine.shutdown()
        free = [
            sum(a == b for a, b in zip(own, t, strict=False)) / len(t)
            for own, t in zip(own_tokens, ref_tokens, strict=False)
        ]
        results.append(Quality(name, kv, *_compare(logits, ref_logits, ref_tokens), sum(free) / len(free), top2_gap))
    return results


# Where the error comes from: the full-precision engine with its store step rounding K and/or V
# before they enter the pool. A scale shared over `dims` maps the largest magnitude there to
# half of e4m3's range, as the FP8 pool's per-layer scales do.
E4M3_PER_LAYER, E4M3_PER_HEAD, E4M3_PER_TOKEN = (0, 1, 2), (0, 2), (1, 2)
ABLATIONS = [
    ("K, V rounded to bfloat16", "bfloat16", "bfloat16"),
    ("K to e4m3 (V exact)", E4M3_PER_LAYER, None),
    ("V to e4m3 (K exact)", None, E4M3_PER_LAYER),
    ("K, V to e4m3", E4M3_PER_LAYER, E4M3_PER_LAYER),
    ("K, V to e4m3, a scale per head", E4M3_PER_HEAD, E4M3_PER_HEAD),
    ("K, V to e4m3, a scale per token", E4M3_PER_TOKEN, E4M3_PER_TOKEN),
    ("V rows shuffled across positions", None, "shuffle"),
]


def _perturb(x: torch.Tensor, how) -> torch.Tensor:
    # x: [num_tokens, num_kv_heads, head_dim]
    if how is None:
        return x
    if how == "bfloat16":
        return x.to(torch.bfloat16).to(x.dtype)
    if how == "shuffle":
        return x[torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(0)).to(x.device)]
    e4m3 = torch.float8_e4m3fn
    scale = x.abs().amax(dim=how, keepdim=True).clamp_min(1e-30) * SCALE_HEADROOM / fp8_grid(e4m3).max_value
    return quantize_fp8(x, e4m3, scale).to(x.dtype) * scale  # the pool's own rounding, finer scales


def measure_ablations(
    model_path: str,
    prompts: list[str],
    num_tokens: int,
    attention_backend: str = "torch",
    device: str = "cpu",
    dtype: str = "float32",
) -> list[tuple[str, float, float]]:
    """(ablation, cosine, agreement) for each of ABLATIONS, against the unperturbed engine."""
    engine = _engine_factory(model_path, attention_backend, device, dtype)("auto")
    prompt_ids, ref_tokens, ref_logits = _reference(engine, prompts, num_tokens)
    backend, store = engine.runner.backend, engine.runner.backend.store_kv
    results = []
    for name, k_how, v_how in ABLATIONS:

        def perturbed_store(k_cache, v_cache, k, v, *args, k_how=k_how, v_how=v_how):
            return store(k_cache, v_cache, _perturb(k, k_how), _perturb(v, v_how), *args)

        backend.store_kv = perturbed_store  # an instance attribute, over the class's kernel
        logits = [score_logits(engine, p + t, len(p) - 1) for p, t in zip(prompt_ids, ref_tokens, strict=False)]
        results.append((name, *_compare(logits, ref_logits, ref_tokens)))
    del backend.store_kv
    engine.shutdown()
    return results


def _engine_factory(model_path: str, attention_backend: str, device: str, dtype: str):
    from radixgate.engine import Engine, EngineConfig

    def make(kv: str) -> Engine:
        return Engine(
            EngineConfig(
                model_path=model_path,
                kv_cache_dtype=kv,
                attention_backend=attention_backend,
                device=device,
                dtype=dtype,
                max_total_tokens=8192,
            )
        )

    return make


def _greedy(num_tokens: int):
    from radixgate.engine import SamplingParams

    return SamplingParams(max_new_tokens=num_tokens, temperature=0.0, ignore_eos=True)


def _reference(engine, prompts: list[str], num_tokens: int):
    """The prompts' ids, the engine's greedy continuations, and its logits scoring them."""
    prompt_ids = [engine.tokenizer.encode(p, add_special_tokens=False) for p in prompts]
    tokens = [o.token_ids for o in engine.generate(input_ids=prompt_ids, sampling=_greedy(num_tokens))]
    logits = [score_logits(engine, p + t, len(p) - 1) for p, t in zip(prompt_ids, tokens, strict=False)]
    return prompt_ids, tokens, logits


def _compare(logits: list[torch.Tensor], ref_logits: list[torch.Tensor], ref_tokens: list[list[int]]):
    """(mean cosine, top-1 agreement with the reference tokens) over every scored position."""
    cos = torch.cat(
        [
            torch.nn.functional.cosine_similarity(a.float(), b.float(), dim=-1)
            for a, b in zip(logits, ref_logits, strict=False)
        ]
    )
    agree = torch.cat(
        [(a.argmax(-1).cpu() == torch.tensor(t)).float() for a, t in zip(logits, ref_tokens, strict=False)]
    )
    return float(cos.mean()), float(agree.mean())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--models",
        nargs="+",
        default=["tiny", "qwen2"],
        help="'tiny', 'qwen2' (a random-weight Qwen2), 'trained' (the tiny model trained "
        "briefly; about 12 minutes the first time) or checkpoint folders",
    )
    parser.add_argument("--kv-cache-dtypes", nargs="+", default=["fp8_e4m3", "fp8_e5m2"])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--attention-backend", default="torch")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument(
        "--ablations",
        action="store_true",
        help="also show where the error comes from: K or V alone, other scale groupings, "
        "bfloat16 rounding, V shuffled (does the model use its context?)",
    )
    args = parser.parse_args(argv)
    builders = {"qwen2": random_qwen2_checkpoint, "trained": trained_tiny_checkpoint}
    paths = [builders[model]() if model in builders else model for model in args.models]
    run = dict(attention_backend=args.attention_backend, device=args.device, dtype=args.dtype)
    print(f"{'model':<30} {'kv dtype':<10} {'cosine':>9} {'agreement':>10} {'free-run':>9} {'top-2 gap':>10}")
    for path in paths:
        for q in measure(path, args.kv_cache_dtypes, PROMPTS, args.tokens, **run):
            print(
                f"{q.model:<30} {q.kv_cache_dtype:<10} {q.cosine:>9.6f} {q.agreement:>10.1%} {q.free_run:>9.1%} "
                f"{q.top2_gap:>10.2f}"
            )
            sys.stdout.flush()
    if args.ablations:
        print(f"\n{'model':<30} {'K/V entering a full-precision pool':<36} {'cosine':>9} {'agreement':>10}")
        for path in paths:
            for name, cosine, agreement in measure_ablations(path, PROMPTS, args.tokens, **run):
                print(f"{os.path.basename(path.rstrip('/')):<30} {name:<36} {cosine:>9.6f} {agreement:>10.1%}")
                sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
