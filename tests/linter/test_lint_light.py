"""promptlint stays light: linting imports neither torch, transformers, httpx, pydantic, nor radixgate's
engine or gateway, so a pre-commit hook starts in a fraction of a second."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = f"""
import json, sys, time
t = time.perf_counter()
from radixgate.linter import cli
code = cli.main(["--isolated", "--exit-zero", "--extend-select", "KV301", "--format", "json",
                 "-o", "/dev/null", {str(ROOT / "examples" / "bad_app.py")!r},
                 {str(ROOT / "tests" / "linter" / "corpus")!r}])
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "transformers", "triton", "httpx", "pydantic")
               or m.startswith(("radixgate.engine", "radixgate.gateway")))
print(json.dumps({{"code": code, "heavy": heavy, "tiktoken": "tiktoken" in sys.modules,
                  "seconds": time.perf_counter() - t}}))
"""


def test_linting_imports_no_heavy_module():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["code"] == 0
    assert result["heavy"] == []
    assert result["tiktoken"]  # KV301 ran, so the probe saw a real lint, tokens included


def test_importing_the_command_loads_no_sdk_dependency():
    """`import radixgate` is lazy (PEP 562), so the linter's command never pays for the SDK's imports."""
    probe = (
        "import radixgate.linter.cli, sys; print(sorted(m for m in ('httpx','pydantic','torch') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_public_names_still_load_on_first_use():
    probe = (
        "import sys, radixgate as rg; assert 'httpx' not in sys.modules; "
        "names = [getattr(rg, n) for n in rg.__all__]; "
        "print('httpx' in sys.modules, rg.Client.__module__, rg.count_tokens('hello world'))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "radixgate._client", "2"]
