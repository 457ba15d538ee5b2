"""deploy/k8s without a cluster: every manifest parses, every `radixgate serve` flag it passes exists,
every port matches the server's default, and every metric it names is on a live `/metrics`."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from radixgate.gateway.cli import build_parser

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
MANIFESTS = sorted(K8S.glob("*.yaml"))
SERVE_PORT = build_parser().get_default("port")
# Metric names as Prometheus writes them (`vllm:kv_cache_usage_perc`, `radixgate:prefix_cache_hits_total`).
METRIC = re.compile(r"\b(?:vllm|sglang|radixgate):[a-z_]+\b")


def _documents() -> Iterator[tuple[Path, dict[str, Any]]]:
    for path in MANIFESTS:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                yield path, doc


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc.get("spec", {}).get("template", {}).get("spec", {})
    return list(spec.get("containers", []))


def _radixgate_containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in _containers(doc) if c.get("command", [None])[0] == "radixgate"]


def _serve_args() -> Iterator[tuple[str, list[str]]]:
    for path, doc in _documents():
        for container in _containers(doc):
            args = [*container.get("command", []), *container.get("args", [])]
            if args[:2] == ["radixgate", "serve"]:
                yield f"{path.name}:{doc['metadata']['name']}", args[2:]


def test_every_manifest_parses_with_kind_and_name() -> None:
    assert {p.name for p in MANIFESTS} >= {"workers.yaml", "gateway.yaml", "inference-pool.yaml"}
    for path, doc in _documents():
        assert doc.get("apiVersion") and doc.get("kind"), f"{path.name}: a document without apiVersion/kind"
        assert doc.get("metadata", {}).get("name"), f"{path.name}: a {doc['kind']} without a name"
        if doc["kind"] == "ConfigMap":  # the endpoint picker's configuration is YAML inside YAML
            for text in doc["data"].values():
                assert yaml.safe_load(text)["kind"] == "EndpointPickerConfig"


def test_every_serve_flag_exists_and_parses() -> None:
    parser = build_parser()
    known = {opt for action in parser._actions for opt in action.option_strings}
    found = list(_serve_args())
    assert len(found) >= 2, "the workers and the gateway both run `radixgate serve`"
    for where, args in found:
        for arg in args:
            if arg.startswith("--"):
                assert arg.split("=", 1)[0] in known, f"{where}: `radixgate serve` has no flag {arg.split('=')[0]}"
        parsed = parser.parse_args([a.replace("$(", "").replace(")", "") for a in args])
        assert parsed.port == SERVE_PORT, f"{where}: listens on {parsed.port}, the server's default is {SERVE_PORT}"
        if parsed.kv_events_config is not None:  # the engine must accept the JSON it will get
            from radixgate.engine.kvcache.kv_events import KVEventsConfig

            config = KVEventsConfig.from_json(parsed.kv_events_config)
            assert config.enable_kv_cache_events and config.endpoint.endswith(":5557")
            picker = _epp_kv_events()
            assert picker["block_size"] == config.block_size and picker["hash_seed"] == config.hash_seed
            assert config.topic.startswith(picker["topic_filter"])


SECRET_FLAGS = ("--api-key", "--admin-api-key", "--worker-api-key")
SECRET_ENV = ("RADIXGATE_ADMIN_API_KEY", "RADIXGATE_WORKER_API_KEY")


def test_secrets_reach_the_server_from_secrets_as_environment_never_in_argv() -> None:
    """Argv is visible to anyone who can list processes (`ps`, /proc): keys come from environment
    variables filled from Secrets (read by `radixgate serve` itself) or from mounted files."""
    for where, args in _serve_args():
        for arg in args:
            assert arg.split("=", 1)[0] not in SECRET_FLAGS, f"{where}: a key in argv ({arg.split('=')[0]})"
            assert "RADIXGATE_" not in arg or "_API_KEY" not in arg, f"{where}: a key expanded into argv"
    for path, doc in _documents():
        for container in _radixgate_containers(doc):
            env = {e["name"]: e for e in container.get("env", [])}
            for name in SECRET_ENV:
                assert "secretKeyRef" in env[name]["valueFrom"], f"{path.name}: {name} is not read from a Secret"
                assert "value" not in env[name], f"{path.name}: {name} written into the manifest"


def _epp_kv_events() -> dict[str, Any]:
    """What the endpoint picker's precise scorer expects of the events it receives."""
    for _, doc in _documents():
        if doc["kind"] == "ConfigMap":
            for text in doc["data"].values():
                for plugin in yaml.safe_load(text)["plugins"]:
                    if plugin["type"] == "precise-prefix-cache-scorer":
                        p = plugin["parameters"]
                        tokens = p["indexerConfig"]["tokenProcessorConfig"]
                        return {
                            "block_size": tokens["blockSize"],
                            "hash_seed": tokens["hashSeed"],
                            "topic_filter": p["kvEventsConfig"]["topicFilter"],
                        }
    raise AssertionError("no precise-prefix-cache-scorer in deploy/k8s")


def test_ports_probes_and_scrape_annotations_agree() -> None:
    for path, doc in _documents():
        for container in _radixgate_containers(doc):
            ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
            assert ports.get("http") == SERVE_PORT, f"{path.name}: container port {ports} != {SERVE_PORT}"
            for probe in ("readinessProbe", "livenessProbe"):
                assert container[probe]["httpGet"]["path"] == "/health", f"{path.name}: {probe}"
            annotations = doc["spec"]["template"]["metadata"].get("annotations", {})
            assert annotations.get("prometheus.io/scrape") == "true"
            assert int(annotations["prometheus.io/port"]) == SERVE_PORT
            assert annotations["prometheus.io/path"] == "/metrics"
        if doc["kind"] == "Service" and doc["metadata"]["name"].startswith("radixgate") and "epp" not in str(doc):
            for port in doc["spec"]["ports"]:
                assert port["targetPort"] in ("http", SERVE_PORT), f"{path.name}: Service targets {port}"
        if doc["kind"] == "InferencePool":
            assert [p["number"] for p in doc["spec"]["targetPorts"]] == [SERVE_PORT]


@pytest.fixture(scope="module")
def live_metrics() -> str:
    from fastapi.testclient import TestClient

    from radixgate.engine import Engine, EngineConfig
    from radixgate.gateway.app import create_app
    from radixgate.gateway.config import GatewayConfig
    from radixgate.gateway.workers.worker import LocalWorker

    engine = Engine(EngineConfig(max_total_tokens=4096))
    try:
        with TestClient(create_app(GatewayConfig(), worker=LocalWorker(engine))) as client:
            body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
            assert client.post("/v1/chat/completions", json=body).status_code == 200
            return client.get("/metrics").text
    finally:
        engine.shutdown()


def test_every_metric_named_is_exported(live_metrics: str) -> None:
    exported = {line.split("{")[0].split(" ")[0] for line in live_metrics.splitlines() if not line.startswith("#")}
    exported |= {name.removesuffix("_total") for name in exported}
    named = {m for path in MANIFESTS for m in METRIC.findall(path.read_text())}
    assert {"vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"} <= named, "the EPP reads these"
    for name in sorted(named):
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        assert name in exported or base in {e.rsplit("_", 1)[0] for e in exported} or base in exported, (
            f"deploy/k8s names {name}, which /metrics does not export"
        )
