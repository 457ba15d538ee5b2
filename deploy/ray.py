"""radixgate on Ray Serve: engine replicas placed and restarted by Ray, radixgate's router choosing one.

    serve run radixgate.deploy.ray:app model_path=tiny num_replicas=2
    serve run deploy/ray/radixgate.yaml            # the same as a Serve config file

Two deployments make one Serve application:

- `EngineReplica` (`num_replicas` of them, each with `num_cpus_per_replica` / `num_gpus_per_replica`)
  runs a radixgate worker inside its Ray actor: the engine and its HTTP API, on the node's address
  and a free port, accepting tenants' cache salts only over the worker channel (`worker_api_key`).
  Every `heartbeat_s` it tells the gateway its address.
- `Gateway` is the ingress that Ray's HTTP proxy forwards to: radixgate's OpenAI-compatible app in
  front of a `WorkerPool`, so tenants, limits, metrics, `/v1/prompt_stats` and the dashboard cover
  every replica, and the cache-aware router picks the replica for each request.

Replicas publish KV events (`kv_events=true`, the default): the router follows each replica's
events and knows exactly which prefixes it holds. The events bind the node's address (the router may
run on another node) and speak CURVE: each replica makes its own server key pair, and allows only
the gateway's key pair, drawn once per application. The cache secret that keys the events' hashes
and the HiCache tiers is `$RADIXGATE_CACHE_SECRET(_FILE)` from the driver, else one drawn per
application, so the gateway and every replica agree. Ray restarts a replica whose process dies (or whose
health check fails); the restarted replica comes back on a new address and announces it. The gateway
stops routing to a replica as soon as its health checks fail, forgets it once it has been silent
for 30 s (or 10 heartbeats), and adds a restarted replica's new address with an empty
index: the router forgets what the dead replica cached and learns the new one from its events.
"""

from __future__ import annotations

import logging
import os
import secrets
import shlex
import threading
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from ray import serve
from ray.serve.handle import DeploymentHandle

log = logging.getLogger(__name__)

GATEWAY = "Gateway"
ENGINE_REPLICA = "EngineReplica"
# Settings a replica's process inherits from the driver, so replicas behave like `radixgate serve`.
FORWARDED_ENV = (
    "RADIXGATE_NUM_THREADS",
    "RADIXGATE_CACHE_DIR",
    "RADIXGATE_CACHE_SECRET",
    "RADIXGATE_CACHE_SECRET_FILE",
    "HF_HUB_OFFLINE",
    "TOKENIZERS_PARALLELISM",
)


def write_curve_certificate(folder: str, name: str, public: bytes, secret: bytes | None = None) -> str:
    """A `zmq.auth` certificate file (the secret one when `secret` is given), readable by this user only."""
    path = os.path.join(folder, f"{name}.key_secret" if secret else f"{name}.key")
    keys = f'    public-key = "{public.decode()}"\n' + (f'    secret-key = "{secret.decode()}"\n' if secret else "")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("metadata\ncurve\n" + keys)
    return path


class RadixgateArgs(BaseModel):
    """The application's arguments: `serve run radixgate.deploy.ray:app key=value ...` or `args:` in a
    Serve config file."""

    model_config = ConfigDict(extra="forbid")

    model_path: str = "tiny"
    num_replicas: int = Field(2, ge=1)
    num_cpus_per_replica: float = Field(1.0, ge=0)
    num_gpus_per_replica: float = Field(0.0, ge=0)
    engine_args: str = Field("", description="`radixgate serve` engine flags, e.g. '--max-total-tokens 8192'")
    router_policy: str | None = None
    # The channel between the gateway and its replicas; $RADIXGATE_WORKER_API_KEY, else a random secret.
    worker_api_key: str | None = None
    # Bearer keys: tenant keys (key -> tenant) and admin keys, as `radixgate serve` takes them. Keys
    # given here sit in the Serve config and on `serve run`'s command line: prefer `api_keys_file`
    # (`radixgate serve --api-keys-file` format) and $RADIXGATE_ADMIN_API_KEY.
    api_keys: dict[str, str] = Field(default_factory=dict)
    admin_api_keys: list[str] = Field(default_factory=list)
    api_keys_file: str | None = None
    # The address replicas listen on and announce; default: the node's address as Ray knows it.
    worker_host: str | None = None
    heartbeat_s: float = Field(1.0, gt=0)
    health_check_interval_s: float = Field(1.0, gt=0)
    # Replicas publish KV events (vLLM's format) on their node's address; the router follows them.
    kv_events: bool = True


def engine_config(args: RadixgateArgs, host: str = "127.0.0.1", gateway_public_key: bytes | None = None) -> Any:
    """The EngineConfig from `model_path` and the `radixgate serve` engine flags in `engine_args`;
    with `kv_events`, a publisher and replay socket on free ports of `host` (an explicit interface,
    never a wildcard), speaking CURVE with the gateway's key pair alone when its public key is given."""
    import dataclasses
    import json
    import tempfile

    from radixgate.gateway import cli

    flags = cli.build_parser().parse_args(["--model-path", args.model_path, *shlex.split(args.engine_args)])
    config = cli.engine_config(flags)
    if args.kv_events and config.kv_events_config is None:
        events: dict[str, Any] = {"enable_kv_cache_events": True}
        events |= {"endpoint": f"tcp://{host}:*", "replay_endpoint": f"tcp://{host}:*"}
        if gateway_public_key is not None:
            import zmq

            keys = tempfile.mkdtemp(prefix="radixgate-kv-events-")  # mode 0700
            allowed = os.path.join(keys, "allowed")
            os.mkdir(allowed, 0o700)
            write_curve_certificate(allowed, "gateway", gateway_public_key)
            events["curve_secret_key_file"] = write_curve_certificate(keys, "replica", *zmq.curve_keypair())
            events["curve_allowed_clients_dir"] = allowed
        config = dataclasses.replace(config, kv_events_config=json.dumps(events))
    return config


@serve.deployment(name=ENGINE_REPLICA, health_check_period_s=2, health_check_timeout_s=30)
class EngineReplica:
    """One engine and its HTTP API, inside this replica's Ray actor."""

    def __init__(self, args: RadixgateArgs, worker_api_key: str, gateway_public_key: bytes | None = None) -> None:
        import ray
        import uvicorn

        from radixgate.gateway.app import create_app
        from radixgate.gateway.cli import listen_socket
        from radixgate.gateway.config import GatewayConfig

        host = args.worker_host or ray.util.get_node_ip_address()
        engine = engine_config(args, host, gateway_public_key)
        config = GatewayConfig(host=host, port=0, engine=engine, worker_api_key=worker_api_key)
        app = create_app(config)  # loads the model
        sock = listen_socket(host, 0)
        self.url = f"http://{host}:{sock.getsockname()[1]}"
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
        self._server_thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="radixgate-worker-http", daemon=True
        )
        self._server_thread.start()
        deadline = time.monotonic() + 60
        while not self._server.started:
            if not self._server_thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the worker's HTTP server did not start on {self.url}")
            time.sleep(0.01)
        context = serve.get_replica_context()
        self.replica_id = context.replica_id.unique_id
        self._gateway = serve.get_deployment_handle(GATEWAY, app_name=context.app_name)
        self._stopping = threading.Event()
        self._heartbeat_s = args.heartbeat_s
        self._heartbeat_thread = threading.Thread(target=self._heartbeat, name="radixgate-heartbeat", daemon=True)
        self._heartbeat_thread.start()
        log.info("replica %s serves on %s", self.replica_id, self.url)

    def _heartbeat(self) -> None:
        while not self._stopping.is_set():
            try:
                self._gateway.register.remote(self.replica_id, self.url).result(timeout_s=10)
            except Exception as exc:  # the gateway may not be up yet, or restarting: try again next beat
                log.debug("heartbeat to the gateway failed: %s", exc)
            self._stopping.wait(self._heartbeat_s)

    def address(self) -> str:
        return self.url

    def check_health(self) -> None:
        """Ray Serve's health check: a replica whose server or engine died is restarted."""
        if not self._server_thread.is_alive():
            raise RuntimeError("the worker's HTTP server stopped")
        state = getattr(self._server.config.app, "state", None)
        gateway = getattr(state, "gateway", None)
        failure = gateway.worker.failure() if gateway is not None else None
        if failure:
            raise RuntimeError(failure)

    def __del__(self) -> None:
        stopping = getattr(self, "_stopping", None)
        if stopping is not None:
            stopping.set()
        server = getattr(self, "_server", None)
        if server is not None:
            server.should_exit = True
            self._server_thread.join(timeout=10)


# The gateway does its own admission control (queue limit, rate limits): Serve should not cap its
# concurrency at its default of a few requests per replica.
@serve.deployment(name=GATEWAY, num_replicas=1, max_ongoing_requests=10_000, ray_actor_options={"num_cpus": 0})
@serve.ingress()
class Gateway:
    """radixgate's gateway as the application's ingress, routing over the replicas that announce themselves."""

    def __init__(
        self,
        args: RadixgateArgs,
        worker_api_key: str,
        replicas: DeploymentHandle,
        curve_keys: tuple[bytes, bytes] | None = None,
    ) -> None:
        import tempfile

        from radixgate.gateway.config import GatewayConfig
        from radixgate.gateway.workers.front import load_front_tokenizer
        from radixgate.gateway.workers.pool import WorkerPool

        name = "tiny" if args.model_path == "tiny" else os.path.basename(args.model_path.rstrip("/"))
        self.pool = WorkerPool(
            load_front_tokenizer(args.model_path),
            name,
            policy=args.router_policy or "cache_aware",
            worker_api_key=worker_api_key,
            health_check_interval_s=args.health_check_interval_s,
        )
        from radixgate.gateway.tenancy.auth import read_keys_file

        keys, admins = dict(args.api_keys), set(args.admin_api_keys)
        for entry in read_keys_file(args.api_keys_file) if args.api_keys_file else ():
            keys[entry.key] = entry.tenant
            admins.update([entry.key] if entry.role == "admin" else [])
        admins.update([os.environ["RADIXGATE_ADMIN_API_KEY"]] if os.environ.get("RADIXGATE_ADMIN_API_KEY") else [])
        self.config = GatewayConfig(
            api_keys=keys,
            admin_api_keys=frozenset(admins),
            worker_api_key=worker_api_key,
            router_policy=args.router_policy,
            health_check_interval_s=args.health_check_interval_s,
        )
        self._replicas = replicas  # keeps the engine deployment in this application's graph
        if curve_keys is not None:  # the key pair the replicas' KV events allow (kv_index reads it from here)
            path = write_curve_certificate(tempfile.mkdtemp(prefix="radixgate-kv-events-"), "gateway", *curve_keys)
            os.environ["RADIXGATE_KV_EVENTS_CLIENT_KEY_FILE"] = path
        # Health checks take a dead replica out of routing within a second; forgetting it waits longer,
        # so that a replica whose heartbeat is merely late (a busy node) keeps its routing history.
        self._stale_after_s = max(30.0, 10 * args.heartbeat_s)
        self._replica_worker: dict[str, tuple[str, str]] = {}  # replica id -> (url, pool worker id)
        self._last_seen: dict[str, float] = {}

    def __serve_build_asgi_app__(self) -> Any:
        from radixgate.gateway.app import create_app

        return create_app(self.config, self.pool)

    async def register(self, replica_id: str, url: str) -> None:
        """A replica's heartbeat: adds a new replica (or a restarted one's new address) to the pool
        and drops the replicas that went quiet."""
        now = time.monotonic()
        known = self._replica_worker.get(replica_id)
        if known is None or known[0] != url:
            if known is not None:
                self._drop(replica_id)
            member = self.pool.add_remote(url)
            await self.pool.check_member(member)
            self._replica_worker[replica_id] = (url, member.worker_id)
            log.info("replica %s joined as worker %s (%s)", replica_id, member.worker_id, url)
        self._last_seen[replica_id] = now
        for other, seen in list(self._last_seen.items()):
            if now - seen > self._stale_after_s:
                log.warning("replica %s went quiet; dropping its worker", other)
                self._drop(other)

    def _drop(self, replica_id: str) -> None:
        _, worker_id = self._replica_worker.pop(replica_id)
        self._last_seen.pop(replica_id, None)
        if worker_id in self.pool.members:
            self.pool.drain(worker_id)  # leaves once its in-flight requests (failed or not) end

    def replicas(self) -> dict[str, str]:
        """Replica id -> the address its worker serves on, as the gateway knows them now."""
        return {replica_id: url for replica_id, (url, _) in self._replica_worker.items()}


def build_app(args: RadixgateArgs) -> Any:
    """The Serve application: the gateway ingress bound to `num_replicas` engine replicas."""
    worker_api_key = args.worker_api_key or os.environ.get("RADIXGATE_WORKER_API_KEY") or secrets.token_urlsafe(24)
    import zmq

    env = {name: os.environ[name] for name in FORWARDED_ENV if name in os.environ}
    if "RADIXGATE_CACHE_SECRET" not in env and "RADIXGATE_CACHE_SECRET_FILE" not in env:
        env["RADIXGATE_CACHE_SECRET"] = secrets.token_urlsafe(32)  # one for the gateway and every replica
    options: dict[str, Any] = {"num_cpus": args.num_cpus_per_replica, "num_gpus": args.num_gpus_per_replica}
    options["runtime_env"] = {"env_vars": env}
    curve_keys = zmq.curve_keypair() if args.kv_events else None
    replicas = EngineReplica.options(num_replicas=args.num_replicas, ray_actor_options=options)
    replica_args = (args, worker_api_key, curve_keys[0] if curve_keys else None)
    gateway = Gateway.options(ray_actor_options={"num_cpus": 0, "runtime_env": {"env_vars": env}})
    return gateway.bind(args, worker_api_key, replicas.bind(*replica_args), curve_keys)


def app(args: dict[str, Any]) -> Any:
    """The application builder `serve run radixgate.deploy.ray:app key=value ...` calls."""
    return build_app(RadixgateArgs.model_validate(args))
