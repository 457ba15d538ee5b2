"""The layers, checked: a routing gateway (`radixgate serve --worker`), a `--dp-size` front's router and
the Ray ingress import no torch and no engine model code (transformers' tokenizer classes are allowed);
the engine imports nothing of the SDK, the gateway or the linter; and neither the engine nor the
gateway has a runtime import cycle, or a function-level import that hides one."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from test_import_graph import cycles, hidden_cycles, import_graph

ROOT = Path(__file__).resolve().parents[1]
ENGINE_MODEL_CODE = ("radixgate.engine.engine", "radixgate.engine.models", "radixgate.engine.runner")
ENGINE_MODEL_CODE += ("radixgate.engine.scheduler", "radixgate.engine.kernels", "radixgate.engine.distributed")

# What each front builds: the routing gateway's pool over a remote worker (as `serve --worker URL`
# does, through cli and app), the router a `--dp-size` front routes with, the Ray ingress's module.
PROBE = """
import json, sys
import radixgate.gateway.cli, radixgate.gateway.app, radixgate.gateway.workers.router
import radixgate.deploy.ray
from radixgate.engine.protocol import GenerateRequest, SamplingParams
from radixgate.gateway.config import GatewayConfig
from radixgate.gateway.workers.front import build_worker
pool = build_worker(GatewayConfig(workers=("http://127.0.0.1:9",)))
pool.validate(GenerateRequest("r", [1, 2], SamplingParams(frequency_penalty=1.0)))
print(json.dumps(sorted(sys.modules)))
"""


def test_routing_fronts_import_no_torch_and_no_engine_model_code() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    modules = json.loads(done.stdout.splitlines()[-1])
    assert "radixgate.gateway.workers.pool" in modules and "transformers" in modules  # the probe ran
    assert "torch" not in modules
    assert [m for m in modules if m.startswith(ENGINE_MODEL_CODE)] == []


def _absolute_imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def test_the_engine_imports_nothing_of_the_other_packages() -> None:
    outside = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for path in sorted((ROOT / "engine").rglob("*.py"))
        for line, name in _absolute_imports(path)
        if (name == "radixgate" or name.startswith("radixgate.")) and not name.startswith("radixgate.engine")
    ]
    assert outside == []


def test_the_scan_sees_an_sdk_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from radixgate._wire import encode\n")
    assert _absolute_imports(module) == [(2, "radixgate._wire")]


def test_engine_and_gateway_have_no_runtime_import_cycle() -> None:
    for folder, package in (("engine", "radixgate.engine"), ("gateway", "radixgate.gateway")):
        graph = import_graph(ROOT / folder, package)
        assert cycles(graph, ("module",)) == [], package
        hidden = {(i.importer, i.target) for i in hidden_cycles(graph, ("module",))}
        assert hidden == set(), package
