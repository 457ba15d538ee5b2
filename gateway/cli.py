"""`radixgate serve`: flags named like SGLang's `launch_server`, the engine in-process, uvicorn in front."""

from __future__ import annotations

import argparse
import dataclasses
import gc
import logging
import os
import socket
import sys
from typing import Any

from .api.middleware import LOOPBACK_HOSTS
from .cli_retention import RETENTION_FLAGS, add_retention_flags, tenant_weights
from .config import GatewayConfig
from .tenancy.secrets import install_key_reload, load_keys, worker_key
from .workers.pd_router import add_pd_flags, disaggregation_of, pd_workers_of
from .workers.remote import parse_worker_url
from .workers.router import POLICIES

# flag dest -> EngineConfig field; passed only when given, so the engine's defaults stay the defaults.
ENGINE_FLAGS = (
    "model_path",
    "device",
    "dtype",
    "page_size",
    "max_total_tokens",
    "mem_fraction_static",
    "kv_cache_dtype",
    "schedule_policy",
    "chunked_prefill_size",
    "disable_radix_cache",
    "radix_eviction_policy",
    "attention_backend",
    "max_running_requests",
    "cuda_graph_max_bs",
    "disable_cuda_graph",
    "enable_overlap_schedule",
    "enable_hicache",
    "hicache_ratio",
    "hicache_storage_dir",
    "hicache_storage_size",
    "hicache_storage_backend",
    "hicache_storage_backend_extra_config",
    "kv_events_config",
    "enable_kv_events",
    "tp_size",
    *RETENTION_FLAGS,
)

TRACING_HELP = """\
traces (OpenTelemetry; spans join the caller's W3C traceparent / tracestate / baggage):
  OTEL_TRACES_EXPORTER                  none (default), console, otlp; a comma list
  OTEL_EXPORTER_OTLP_PROTOCOL           http/protobuf (default) or grpc
  OTEL_EXPORTER_OTLP_TRACES_PROTOCOL    the same, for traces only (wins over the above)
  OTEL_EXPORTER_OTLP_ENDPOINT           collector URL (default http://localhost:4318, grpc :4317)
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT    the traces URL itself (http: include /v1/traces)
  OTEL_EXPORTER_OTLP_HEADERS            key=value,... sent to the collector
  OTEL_EXPORTER_OTLP_INSECURE           true: grpc without TLS
  OTEL_SERVICE_NAME                     service.name (default radixgate)
  OTEL_RESOURCE_ATTRIBUTES              key=value,... on every span
  OTEL_PROPAGATORS                      trace context formats read and sent (default tracecontext,baggage)
  OTEL_SDK_DISABLED                     true: no spans at all
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="radixgate serve",
        description="OpenAI-compatible server with the co-located "
        "radixgate engine, per-tenant cache isolation, metrics, traces and a dashboard.",
        epilog=TRACING_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--model-path",
        default="tiny",
        help="a local Hugging Face checkpoint folder, or 'tiny' (the built-in test model; default)",
    )
    p.add_argument("--served-model-name", default=None, help="the model id clients send (default: from the model)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=30000, help="0 picks a free port (printed at startup)")
    e = p.add_argument_group("engine")
    e.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default cpu)")
    e.add_argument(
        "--dtype", default=None, help="float32, float16 or bfloat16 for weights and activations (default float32)"
    )
    e.add_argument("--page-size", type=int, default=None, help="tokens per KV page (default 1)")
    e.add_argument(
        "--max-total-tokens",
        type=int,
        default=None,
        help="KV pool size in tokens (default: from --mem-fraction-static)",
    )
    e.add_argument(
        "--mem-fraction-static", type=float, default=None, help="share of device memory for the KV pool (default 0.2)"
    )
    e.add_argument("--kv-cache-dtype", default=None, help="auto, or an FP8 type the engine supports")
    e.add_argument("--schedule-policy", default=None, help="lpm (longest prefix match) or fcfs")
    e.add_argument(
        "--chunked-prefill-size",
        type=int,
        default=None,
        help="prefill long prompts in chunks of this many tokens (default 2048)",
    )
    e.add_argument("--disable-radix-cache", action="store_true", default=None, help="recompute every prompt")
    e.add_argument("--radix-eviction-policy", help="lru (default), lfu, slru, priority, fifo, mru or filo")
    add_retention_flags(e)
    e.add_argument("--attention-backend", default=None, help="auto, torch or triton (default auto)")
    e.add_argument(
        "--max-running-requests", type=int, default=None, help="requests decoded together at most (default 128)"
    )
    e.add_argument("--tp-size", type=int, default=None, help="split the model over this many ranks (tensor parallel)")
    e.add_argument("--cuda-graph-max-bs", type=int, default=None, help="decode batch sizes captured as CUDA graphs")
    e.add_argument("--disable-cuda-graph", action="store_true", default=None, help="run decode steps eagerly")
    e.add_argument(
        "--enable-overlap-schedule", action="store_true", default=None, help="launch decode step N+1 before N's tokens"
    )
    e.add_argument("--enable-hicache", action="store_true", default=None, help="spill KV to host memory / disk")
    e.add_argument("--hicache-ratio", type=float, default=None, help="host tier size / device tier size")
    e.add_argument("--hicache-storage-dir", default=None, help="folder for the disk tier")
    e.add_argument("--hicache-storage-size", type=float, default=None, help="GB the disk tier keeps (default 16)")
    e.add_argument(
        "--cache-secret-file",
        default=None,
        help="a file holding the deployment's cache secret, which keys the disk and remote tiers and the KV "
        "events' hashes (same as $RADIXGATE_CACHE_SECRET_FILE; default: random per process)",
    )
    e.add_argument(
        "--hicache-storage-backend", default=None, choices=["redis"], help="remote tier shared by every worker"
    )
    e.add_argument(
        "--hicache-storage-backend-extra-config",
        default=None,
        help='JSON: {"url": "redis://127.0.0.1:6379/0", "key_prefix": ..., "ttl_s": ..., "timeout_s": ...}',
    )
    e.add_argument(
        "--kv-events-config",
        default=None,
        help="vLLM's JSON: publish KV events (ZMQ) for routers, e.g. "
        '\'{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:5557", '
        '"replay_endpoint": "tcp://*:5558", "topic": "kv", "block_size": 16}\'',
    )
    e.add_argument(
        "--enable-kv-events",
        action="store_true",
        default=None,
        help="publish KV events on free loopback ports (advertised in /server_info)",
    )
    e.add_argument(
        "--kv-events-client-key-file",
        default=None,
        help="the router's CURVE key pair (a zmq.auth .key_secret file) for workers whose KV events need one "
        "(same as $RADIXGATE_KV_EVENTS_CLIENT_KEY_FILE)",
    )
    g = p.add_argument_group("gateway")
    g.add_argument(
        "--api-key", default=None, help="one key; its tenant is 'default' (visible in ps: prefer $RADIXGATE_API_KEY)"
    )
    g.add_argument(
        "--api-keys-file",
        default=None,
        help="a JSON object or 'KEY TENANT [ROLE]' lines; ROLE is tenant or admin; re-read on SIGHUP",
    )
    g.add_argument(
        "--admin-api-key-file",
        default=None,
        help="admin keys, one a line; re-read on SIGHUP ($RADIXGATE_ADMIN_API_KEY)",
    )
    g.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="without API keys, also answer requests addressed to this host name (default: loopback names only)",
    )
    g.add_argument("--rate-limit-rpm", type=int, default=None, help="requests per minute per tenant")
    g.add_argument("--rate-limit-tpm", type=int, default=None, help="tokens (prompt + output) per minute per tenant")
    g.add_argument("--max-queued-requests", type=int, default=None, help="beyond this many waiting, answer 503")
    g.add_argument("--max-request-bytes", type=int, default=8 * 1024 * 1024, help="larger bodies get 413")
    g.add_argument("--max-template-labels", type=int, default=20, help="templates with their own metric label")
    g.add_argument("--log-requests", action="store_true", help="log prompt text (off by default)")
    g.add_argument(
        "--disable-prompt-excerpts",
        action="store_true",
        help="no excerpts of the varying prompt text in /v1/prompt_stats' drift (positions and segments only)",
    )
    g.add_argument("--response-store-size", type=int, default=1000, help="/v1/responses kept per tenant")
    g.add_argument("--response-store-bytes", type=int, default=64 << 20, help="bytes of /v1/responses kept per tenant")
    g.add_argument("--response-store-ttl", type=float, default=3600.0, help="seconds a stored response is kept")
    g.add_argument(
        "--diagnostics-history-size", type=int, default=256, help="recent prompts and replies kept per tenant"
    )
    g.add_argument(
        "--disable-history-keeping", action="store_true", help="re-tokenize earlier replies (default: reuse their ids)"
    )
    g.add_argument("--enable-debug-endpoints", action="store_true", help="serve /debug/check_idle_invariant")
    g.add_argument(
        "--log-level", default="warning", choices=["debug", "info", "warning", "error"], help="default warning"
    )
    g.add_argument(
        "--admin-api-key",
        action="append",
        default=[],
        help="a key with the admin role (repeatable; visible in ps: prefer --admin-api-key-file)",
    )
    g.add_argument("--public-metrics", action="store_true", help="serve /metrics without a key")
    g.add_argument(
        "--tool-call-parser",
        default=None,
        help="tool-call format: qwen25 (alias hermes), llama3 (alias llama3_json), mistral; default: from the model",
    )
    r = p.add_argument_group("routing (a gateway in front of several engines)")
    r.add_argument(
        "--worker",
        action="append",
        default=[],
        metavar="URL",
        help="route to this worker instead of a co-located engine (repeatable): http://HOST:PORT for radixgate, "
        "openai+http://... for any OpenAI-compatible server, vllm+http://... for vLLM",
    )
    r.add_argument("--workers-file", default=None, help="worker URLs, one a line ('#' starts a comment)")
    r.add_argument("--dp-size", type=int, default=1, help="co-located engines behind the router (one per GPU)")
    r.add_argument("--router-policy", default=None, choices=list(POLICIES), help="default: cache_aware")
    r.add_argument(
        "--worker-api-key",
        default=None,
        help="the key a front gateway and its radixgate workers share; only on it does a worker take a tenant's "
        "salt (visible in ps: prefer --worker-api-key-file or $RADIXGATE_WORKER_API_KEY)",
    )
    r.add_argument("--worker-api-key-file", default=None, help="a file holding the worker key")
    r.add_argument(
        "--worker-allowlist",
        action="append",
        default=None,
        metavar="HOST_OR_CIDR",
        help="hosts and networks POST /workers may add (repeatable; default: loopback only)",
    )
    r.add_argument(
        "--allow-unsalted-workers",
        action="store_true",
        help="send tenants' requests to workers that cannot keep tenants' caches apart",
    )
    add_pd_flags(p)
    return p


def worker_urls(args: argparse.Namespace) -> tuple[str, ...]:
    urls = list(args.worker)
    if args.workers_file:
        with open(args.workers_file, encoding="utf-8") as f:
            urls += [u for u in (line.split("#", 1)[0].strip() for line in f) if u]
    for url in urls:
        parse_worker_url(url)  # a bad URL fails at startup, with the accepted forms
    return tuple(urls)


def engine_config(args: argparse.Namespace) -> Any:
    """The EngineConfig for these flags; raises ValueError naming a flag this engine build lacks."""
    from radixgate.engine import EngineConfig
    from radixgate.engine.cache_secret import SECRET_FILE_ENV, load_cache_secret

    if args.cache_secret_file:  # through the environment, so every engine, rank and KV index in the process agrees
        os.environ[SECRET_FILE_ENV] = args.cache_secret_file
        load_cache_secret()  # an unreadable or short secret fails at startup
    if args.kv_events_client_key_file:
        os.environ["RADIXGATE_KV_EVENTS_CLIENT_KEY_FILE"] = args.kv_events_client_key_file
    fields = {f.name for f in dataclasses.fields(EngineConfig)}
    kwargs: dict[str, Any] = {}
    for name in ENGINE_FLAGS:
        value = getattr(args, name)
        if value is None:
            continue
        if name not in fields:
            raise ValueError(f"--{name.replace('_', '-')} is not supported by this engine build")
        kwargs[name] = value
    return EngineConfig(**kwargs)


def gateway_config(args: argparse.Namespace, engine: Any) -> GatewayConfig:
    keys, admins = load_keys(args)
    allowlist = tuple(args.worker_allowlist) if args.worker_allowlist else GatewayConfig.worker_allowlist
    return GatewayConfig(
        host=args.host,
        port=args.port,
        api_keys=keys,
        tenant_weights=tenant_weights(args.api_keys_file),
        rate_limit_rpm=args.rate_limit_rpm,
        rate_limit_tpm=args.rate_limit_tpm,
        max_queued_requests=args.max_queued_requests,
        max_request_bytes=args.max_request_bytes,
        log_requests=args.log_requests,
        disable_prompt_excerpts=args.disable_prompt_excerpts,
        served_model_name=args.served_model_name,
        max_template_labels=args.max_template_labels,
        response_store_size=args.response_store_size,
        response_store_bytes=args.response_store_bytes,
        response_store_ttl_s=args.response_store_ttl,
        diagnostics_history_size=args.diagnostics_history_size,
        history_keeping=not args.disable_history_keeping,
        enable_debug_endpoints=args.enable_debug_endpoints,
        engine=engine,
        admin_api_keys=admins,
        public_metrics=args.public_metrics,
        worker_api_key=worker_key(args),
        worker_allowlist=allowlist,
        allowed_hosts=(*LOOPBACK_HOSTS, *args.allowed_host),
        workers=worker_urls(args),
        dp_size=args.dp_size,
        router_policy=args.router_policy,
        allow_unsalted_workers=args.allow_unsalted_workers,
        tool_call_parser=args.tool_call_parser,
        disaggregation=disaggregation_of(args),
        pd_workers=pd_workers_of(args),
    )


def print_urls(host: str, port: int, auth_enabled: bool) -> None:
    shown = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    base = f"http://{shown}:{port}"
    print(f"radixgate serving on {base}", flush=True)
    print(f"  API (OpenAI):  {base}/v1", flush=True)
    print(f"  metrics:       {base}/metrics", flush=True)
    print(f"  dashboard:     {base}/dashboard", flush=True)
    if not auth_enabled and host not in ("127.0.0.1", "localhost", "::1"):
        print(f"  warning: no API keys and listening on {host}: anyone who can reach it can use it", flush=True)


def listen_socket(host: str, port: int) -> socket.socket:
    """A bound TCP socket for uvicorn; port 0 picks a free one.

    IPPROTO_TCP is given explicitly because asyncio sets TCP_NODELAY on accepted connections
    only for such sockets; without it, Nagle's algorithm and the client's delayed ACKs hold
    back the first streamed token of back-to-back keep-alive requests by ~30 ms.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


def freeze_startup_objects() -> None:
    """The model, the engine and every imported module live as long as the process: moved out of
    the collector's generations, they are never walked again, so a full collection (a walk over
    all of them) no longer lands in a stream's inter-token latency. Garbage is collected first, or
    it would be frozen too."""
    gc.collect()
    gc.freeze()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.log_requests:  # asked for explicitly, so shown whatever --log-level says
        logging.getLogger("radixgate.gateway.requests").setLevel(logging.INFO)
    try:
        config = gateway_config(args, engine_config(args))
    except (ValueError, OSError) as exc:
        print(f"radixgate serve: {exc}", file=sys.stderr)
        return 2
    import uvicorn

    from .app import create_app

    try:
        sock = listen_socket(args.host, args.port)
    except OSError as exc:
        print(f"radixgate serve: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 2
    app = create_app(config)  # loads the model (a routing gateway: the tokenizer only)
    freeze_startup_objects()  # every role: co-located, prefill, decode, router
    install_key_reload(args, app.state.gateway.auth)
    print_urls(args.host, sock.getsockname()[1], config.auth_enabled)
    uvicorn_config = uvicorn.Config(app, log_level=args.log_level, access_log=False, timeout_graceful_shutdown=5)
    server = uvicorn.Server(uvicorn_config)
    server.run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
