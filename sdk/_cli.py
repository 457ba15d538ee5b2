"""The `radixgate` command: a thin dispatcher. Each subcommand's module is imported only when it runs,
so `radixgate bench serving` never imports torch and `radixgate serve` never imports the linter."""

from __future__ import annotations

import importlib
import sys

# A command's missing third-party module -> the extra that installs it (anything else: `serve`).
EXTRA_OF_MODULE = {"ray": "ray", "lm_eval": "eval", "redis": "redis", "langchain_core": "langchain"}

# subcommand words -> (module, help). Each module exposes `main(argv: list[str] | None) -> int`.
COMMANDS: dict[tuple[str, ...], tuple[str, str]] = {
    ("serve",): ("radixgate.gateway.cli", "run the OpenAI-compatible server with the co-located engine"),
    ("stats",): ("radixgate.gateway.observe.prompt_stats_cli", "print a server's per-template statistics as JSON"),
    ("check-template",): (
        "radixgate.gateway.features.template_check",
        "does a chat template extend each turn's prompt + reply (or break the cache)?",
    ),
    ("bench", "offline"): ("radixgate.bench.offline", "benchmark the engine in-process (radix cache vs none vs HF)"),
    ("bench", "serving"): ("radixgate.bench.serving", "load-test any OpenAI-compatible server"),
    ("bench", "roofline"): ("radixgate.bench.roofline", "prefill and decode as a fraction of this machine's roofline"),
    ("bench", "pd-transfer"): ("radixgate.bench.pd_transfer", "KV transfer speed of the P/D backends vs plain copies"),
    ("bench", "pd-interference"): (
        "radixgate.bench.pd_interference",
        "stream latency under long prompts: PD vs co-located",
    ),
    ("bench", "mixed-chunk"): ("radixgate.bench.mixed_chunk", "stream latency as long prompts arrive, mixed or not"),
    ("bench", "router"): ("radixgate.bench.router", "routing policies over local workers: hit rate vs ideal, req/s"),
    ("bench", "ray"): ("radixgate.bench.ray", "the router workload on Ray Serve replicas beside local workers"),
    ("bench", "field-table"): ("radixgate.bench.field_table", "write docs/gateway.md's request-field table"),
    ("bench", "agent-session"): ("radixgate.bench.agent_session", "a multi-turn agent on /v1/responses: cache reuse"),
    ("bench", "multi-turn"): ("radixgate.bench.multi_turn", "chat history kept as generated vs re-tokenized; overhead"),
    ("bench", "hicache"): ("radixgate.bench.hicache", "HiCache tiers on a multi-turn agent workload"),
    ("bench", "trace"): ("radixgate.bench.trace", "replay a Mooncake trace: hit rate per eviction policy vs Belady"),
    ("bench", "retention"): ("radixgate.bench.retention", "priority TTFT under overload, TTL pins, noisy neighbour"),
    ("bench", "kernels"): ("radixgate.bench.kernels", "decode and extend attention kernels (meant for a GPU)"),
    ("bench", "gpu-engine"): ("radixgate.bench.gpu_engine", "the engine on an 8B-shaped checkpoint, 16-bit vs FP8 KV"),
    ("bench", "cuda-graph"): ("radixgate.bench.cuda_graph", "decode as CUDA graphs vs eager: equality, tokens/s"),
    ("bench", "fp8-quality"): ("radixgate.bench.fp8_quality", "FP8 vs full-precision KV: logits and greedy tokens"),
    ("bench", "compile-check"): ("radixgate.bench.compile_check", "compile the Triton kernels for a GPU, without one"),
    ("bench", "gateway"): ("radixgate.bench.gateway", "gateway overhead: in-process engine vs loopback HTTP"),
    ("bench", "gateway-figures"): ("radixgate.bench.gateway_figures", "the gateway's checks against live servers"),
    ("bench", "screenshot"): ("radixgate.bench.screenshot", "screenshot the dashboard in headless Chromium"),
    ("bench", "lint"): ("radixgate.bench.lint", "promptlint speed on a generated corpus"),
    ("bench", "lint-eval"): ("radixgate.bench.lint_eval", "promptlint precision and recall on the labeled corpus"),
    ("bench", "lint-realworld"): ("radixgate.bench.lint_realworld", "promptlint on real applications, hand-labeled"),
    ("bench", "docgen"): ("radixgate.bench.docgen", "write docs/rules.md from the rule catalog"),
    ("bench", "tp"): ("radixgate.bench.tp", "tensor parallelism: TP=1 vs TP=2 tokens/s and the fidelity table"),
    ("bench", "constrained"): ("radixgate.bench.constrained", "tokens/s with and without a JSON schema, batch 16"),
    ("demo",): ("radixgate.bench.demo", "the closed loop: bad app, promptlint, fixed app, before/after"),
}


def _usage() -> str:
    lines = ["usage: radixgate COMMAND [ARGS]", "", "commands:"]
    for words, (_, help_text) in COMMANDS.items():
        lines.append(f"  {' '.join(words):<22} {help_text}")
    lines.append("")
    lines.append("Run `radixgate COMMAND --help` for a command's options.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    for words, (module_name, _) in sorted(COMMANDS.items(), key=lambda kv: -len(kv[0])):
        if tuple(args[: len(words)]) == words:
            try:
                module = importlib.import_module(module_name)
                return int(module.main(args[len(words) :]) or 0)
            except ModuleNotFoundError as exc:
                missing = (exc.name or "").partition(".")[0]
                if not missing or missing == "radixgate":
                    raise  # our own module: a bug, not an install to finish
                extra = EXTRA_OF_MODULE.get(missing, "serve")
                command = " ".join(("radixgate", *words))
                print(
                    f"{command} needs the '{extra}' extra ({missing} is not installed): "
                    f"pip install 'radixgate[{extra}]'",
                    file=sys.stderr,
                )
                return 2
    if args and args[0] not in ("-h", "--help"):
        print(f"radixgate: unknown command {' '.join(args[:2])!r}\n", file=sys.stderr)
        print(_usage(), file=sys.stderr)
        return 2
    print(_usage())
    return 0


if __name__ == "__main__":
    sys.exit(main())
