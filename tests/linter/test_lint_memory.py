"""Memory stays bounded by the largest group of modules linked by imports, not by the tree: a generated
tree of 100,000+ lines is linted in a fresh process whose peak resident set (`ru_maxrss`) stays at most
100 MB."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from radixgate.bench.lint import generate
from radixgate.linter.analysis import bodies
from radixgate.linter.analysis.facts import parse
from radixgate.linter.analysis.project import Project
from radixgate.linter.checker import violations_for
from radixgate.linter.settings import Settings

# Linux counts a parent's memory at fork in the child's `ru_maxrss`, so the measuring process is started
# from a small launcher (a bare interpreter, about 10 MB), not from pytest's large process.
LAUNCH = """
import subprocess, sys
done = subprocess.run([sys.executable, "-c", sys.argv[1], sys.argv[2]], capture_output=True, text=True)
sys.stdout.write(done.stdout)
sys.stderr.write(done.stderr)
sys.exit(done.returncode)
"""
MEASURE = """
import json, resource, sys
from radixgate.linter.runner import lint_paths
from radixgate.linter.settings import Settings
result = lint_paths([sys.argv[1]], Settings())
peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
print(json.dumps({"lines": result.lines, "files": len(result.files), "findings": len(result.violations),
                  "peak_mb": peak_kib / 1024}))
"""


def test_peak_memory_on_a_100k_line_tree_is_at_most_100_mb(tmp_path: Path) -> None:
    (tmp_path / "tree").mkdir()
    files, lines = generate(tmp_path / "tree", 100_000)
    assert lines >= 100_000
    done = subprocess.run(
        [sys.executable, "-c", LAUNCH, MEASURE, str(tmp_path / "tree")], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    measured = json.loads(done.stdout)
    assert measured["lines"] >= 100_000 and measured["files"] == files and measured["findings"] > 1000
    assert measured["peak_mb"] <= 100, measured


WRAPPED = (
    "from openai import OpenAI\n\nclient = OpenAI()\n\n\n"
    "def ask(system, question):\n"
    "    return client.chat.completions.create(model='m', messages=[\n"
    "        {'role': 'system', 'content': system}, {'role': 'user', 'content': question}])\n\n\n"
    "def tally(rows):\n    return len(rows)\n\n\n"
    "def stamp():\n    return 'x'\n\n\n"
    "def handle(request):\n"
    "    tally(request.rows)\n    stamp()\n"
    "    return ask(f'{request.time} ' + 'You are the support agent of the shop. Be brief. ' * 20, request.query)\n"
    "\n\nclass Job:\n    def later(self, prompt):\n        return prompt\n"
    "\n\nif False:\n    pass\nelse:  # a module's function that the project's table does not list\n"
    "    def later(prompt):\n        return prompt\n\n    later('prompt')\n"
)


def test_only_calls_to_possible_wrappers_are_held_and_the_wrapped_finding_stays() -> None:
    parsed = parse(WRAPPED, "app.py", "app")
    assert parsed is not None
    project = Project()
    project.add(Path("app.py"), parsed, True)
    project.run()
    # `tally` (no line worth a look), `stamp` (no parameters) and `later` (not in the project's table) can
    # never become wrappers: calls to them are not held
    assert [call.targets for call in project.calls] == [[("app", None, "ask")]]
    found = violations_for(project.entries[0].sites, parsed, "app.py", Settings())
    assert [(v.code, v.row) for v in found if "sent by" in v.message] == [("KV101", 22)], found


CHAIN = {
    "wrap": WRAPPED.split("def tally")[0],
    "mid": "from wrap import ask\n\n\ndef relay(system, question):\n    return ask(system, question)\n",
    "app": (
        "from mid import relay\n\n\ndef log_prompt(prompt):\n    print(prompt)\n\n\n"
        "def fill(name):\n    return TEMPLATE.format(user=name)\n\n\n"
        "def handle(request):\n    log_prompt(request.query)\n    fill(request.user)\n"
        "    return relay(f'{request.time} ' + 'You are the support agent of the shop. Be brief. ' * 20,\n"
        "                 request.query)\n"
    ),
}


def _chain_project(monkeypatch, sweep_every: int) -> tuple[Project, list]:
    monkeypatch.setattr(bodies, "_SWEEP_EVERY", sweep_every)
    project = Project()
    for name in ("app", "mid", "wrap"):  # the caller walked first: its callees' modules are not walked yet
        parsed = parse(CHAIN[name], f"{name}.py", name, force=True)
        project.add(Path(f"{name}.py"), parsed, True)
    project.run()
    found = [violations_for(e.sites, e.parsed, e.path.as_posix(), Settings()) for e in project.entries]
    return project, found


def test_calls_that_can_never_reach_a_wrapper_are_let_go_during_the_walk(monkeypatch) -> None:
    held, expected = _chain_project(monkeypatch, 10**9)  # never swept
    swept, found = _chain_project(monkeypatch, 1)  # swept after every module
    assert found == expected
    assert [(v.code, v.row) for v in found[0] if "sent by" in v.message] == [("KV101", 15)]
    assert ("app", None, "log_prompt") in [t for call in held.calls for t in call.targets]
    # `log_prompt` can never become a wrapper once `app` is walked: its call goes. `fill`'s parameter fills
    # a placeholder (a table another module may read), `relay`'s module was not walked yet when `app` was
    # (then it is a wrapper of `ask`): their calls stay, as does the call to `ask`
    kept = [t for call in swept.calls for t in call.targets]
    assert kept == [("app", None, "fill"), ("mid", None, "relay"), ("wrap", None, "ask")]
