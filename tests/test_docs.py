"""Every fenced block of README.md and docs/*.md runs here, unless the line before it says why not
(`<!-- not-run: reason -->`) or names the test that checks it (`<!-- checked-by: tests/...::name -->`).

Python blocks run in a subprocess (fragments get the few names they assume from `SETUP` and are
exercised by `EXERCISE`); bash blocks run line by line, each line's exit status checked. Blocks that
talk to `127.0.0.1:30000` run against one `radixgate serve` this module starts (marked slow), with
that address replaced by the server's. A block of any other language, unmarked, fails the harness.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from radixgate.gateway.server_process import ServerProcess

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARK = re.compile(r"^\s*<!--\s*(not-run|checked-by):\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
DEFAULT_URLS = ("http://127.0.0.1:30000", "http://localhost:30000")
RUNS = ("python", "bash")
BLOCK_TIMEOUT_S = 180

POLICY = '"Refunds within 30 days with a receipt. Ship in 2 days. Never share card numbers. " * 8'
# Names a fragment assumes (its page defines them in prose), keyed by (file, first line).
SETUP = {
    ("docs/hicache.md", "from radixgate.engine import Engine, EngineConfig, SamplingParams"): (
        "ids = list(range(1000, 1300))"
    ),
    ("docs/langchain.md", "from datetime import datetime"): f"POLICY = {POLICY}",
    ("docs/langchain.md", "llm = ChatOpenAI("): "from langchain_openai import ChatOpenAI",
    ("docs/llamaindex.md", "from datetime import datetime"): (
        f"from llama_index.core.schema import TextNode\nPOLICY = {POLICY}\n"
        "nodes = [TextNode(text='Returns: 30 days with a receipt.'), TextNode(text='Shipping: 2 days.')]"
    ),
    ("docs/sdk.md", "import radixgate as rg"): (
        f"POLICY = {POLICY}\n"
        "TOOLS = [{'type': 'function', 'function': {'name': 'track', 'parameters': {'type': 'object'}}}]"
    ),
}
# What a block that only defines things is then made to do (short answers: the tiny model on a CPU).
EXERCISE = {
    ("docs/hicache.md", "from radixgate.engine import Engine, EngineConfig, SamplingParams"): (
        "assert out.cached_tokens_by_tier.keys() >= {'device'}, out\nengine.shutdown()"
    ),
    ("docs/langchain.md", "from datetime import datetime"): (
        "chain = prompt | llm.bind(max_tokens=4) | StrOutputParser()\nprint(answer('Where is my parcel?', []))"
    ),
    ("docs/langchain.md", "llm = ChatOpenAI("): (
        "chunks = list(llm.stream('hi', max_tokens=4))\nassert any(c.usage_metadata for c in chunks), chunks"
    ),
    ("docs/llamaindex.md", "from datetime import datetime"): (
        "llm.max_tokens = 4\nprint(answer('How long is shipping?'))"
    ),
    ("docs/sdk.md", "import radixgate as rg"): (
        "with rg.Client(base_url='http://127.0.0.1:30000/v1') as client:\n"
        "    print(answer(client, 'u-1', 'Where is my parcel?', []).usage)"
    ),
    ("docs/sdk.md", "from openai import OpenAI"): (
        "r = client.chat.completions.create(model='tiny', messages=[{'role': 'user', 'content': 'hi'}], max_tokens=2)\n"
        "print(r.usage)"
    ),
}
# The documented exit status of each bash line that does not exit 0.
EXIT_STATUS = {
    "promptlint examples/bad_app.py --extend-select KV301": 1,  # findings
    "promptlint examples/bad_app.py --format sarif -o promptlint.sarif": 1,
    "cp examples/bad_app.py /tmp/ && promptlint /tmp/bad_app.py --fix": 1,  # unfixable findings remain
    "diff examples/bad_app.py /tmp/bad_app.py": 1,  # the copy differs: --fix changed it
    "promptlint examples/bad_app.py --stats http://127.0.0.1:30000": 1,
}


@dataclass(frozen=True)
class Block:
    path: str  # relative to the repository root
    line: int  # of the opening fence
    lang: str
    text: str
    mark: tuple[str, str] | None  # ("not-run", reason) | ("checked-by", test)

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def key(self) -> tuple[str, str]:
        return self.path, self.text.splitlines()[0] if self.text else ""

    @property
    def needs_server(self) -> bool:
        exercise = EXERCISE.get(_key(self), "")
        return any(url in self.text + exercise for url in DEFAULT_URLS)


def doc_blocks() -> list[Block]:
    blocks = []
    for path in DOC_FILES:
        lines = path.read_text(encoding="utf-8").splitlines()
        i = 0
        while i < len(lines):
            fence = FENCE.match(lines[i])
            if not fence:
                i += 1
                continue
            indent, end = len(fence.group(1)), i + 1
            while not lines[end].strip().startswith("```"):
                end += 1
            before = next((line for line in reversed(lines[:i]) if line.strip()), "")
            mark = MARK.match(before)
            text = "\n".join(line[indent:] for line in lines[i + 1 : end]) + "\n"
            rel = str(path.relative_to(ROOT))
            blocks.append(Block(rel, i + 1, fence.group(2), text, (mark.group(1), mark.group(2)) if mark else None))
            i = end + 1
    return blocks


BLOCKS = doc_blocks()
TO_RUN = [b for b in BLOCKS if b.mark is None and b.lang in RUNS]


def _key(block: Block) -> tuple[str, str]:
    """A SETUP/EXERCISE key matches a block whose first line starts with it."""
    return next((k for k in (*SETUP, *EXERCISE) if k[0] == block.path and block.key[1].startswith(k[1])), block.key)


def test_every_block_is_run_or_marked() -> None:
    unmarked = [f"{b.id} ({b.lang or 'no language'})" for b in BLOCKS if b.mark is None and b.lang not in RUNS]
    assert not unmarked, f"run these blocks here or mark them <!-- not-run: reason -->: {unmarked}"
    for block in BLOCKS:
        if block.mark and block.mark[0] == "not-run":
            assert len(block.mark[1]) >= 8, f"{block.id}: say why the block does not run"
        if block.mark and block.mark[0] == "checked-by":
            path, _, name = block.mark[1].partition("::")
            assert f"def {name}(" in (ROOT / path).read_text(), f"{block.id}: {block.mark[1]} does not exist"
    claimed = {_key(b) for b in TO_RUN}
    assert set(SETUP) | set(EXERCISE) <= claimed, "a SETUP/EXERCISE entry matches no block: update its key"
    assert len(TO_RUN) >= 8  # the harness found the blocks (a parser that finds none passes nothing)


def _source(block: Block, base_url: str, scratch: Path) -> str:
    key = _key(block)
    source = "\n".join(filter(None, (SETUP.get(key), block.text, EXERCISE.get(key))))
    for url in DEFAULT_URLS:
        source = source.replace(url, base_url)
    return source.replace("/var/cache/radixgate-kv", str(scratch / "kv"))


# One interpreter runs a group of python blocks, each in globals of its own: torch, the clients and
# the tokenizer load once per group instead of once per block.
GROUP_RUNNER = """
import json, sys, traceback
results = {}
for block_id, path in json.load(open(sys.argv[1])):
    try:
        exec(compile(open(path).read(), block_id, "exec"), {"__name__": "__main__"})
        results[block_id] = None
    except BaseException:
        results[block_id] = traceback.format_exc()
json.dump(results, open(sys.argv[2], "w"))
"""


def run_python_group(blocks: list[Block], base_url: str, scratch: Path) -> dict[str, str | None]:
    """{block id: None if it ran, else its traceback}."""
    listing = []
    for n, block in enumerate(blocks):
        path = scratch / f"block{n}.py"
        path.write_text(_source(block, base_url, scratch))
        listing.append((block.id, str(path)))
    (scratch / "blocks.json").write_text(json.dumps(listing))
    (scratch / "runner.py").write_text(GROUP_RUNNER)
    args = [sys.executable, str(scratch / "runner.py"), str(scratch / "blocks.json"), str(scratch / "results.json")]
    run = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S * 2)
    assert run.returncode == 0, f"the block runner failed:\n{run.stderr[-4000:]}"
    return json.loads((scratch / "results.json").read_text())


def _bash_lines(text: str) -> Iterator[str]:
    """Logical lines (continuations joined), comments and blank lines dropped."""
    for line in text.replace("\\\n", " ").splitlines():
        command = line.split(" #", 1)[0].strip() if not line.lstrip().startswith("#") else ""
        if command:
            yield command


def _bash(block: Block, base_url: str, tmp_path: Path) -> None:
    """Each line in a scratch copy of the checkout's examples and configuration (what the README's
    lines read; what they write lands there, and the checkout's untracked trees are not linted)."""
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for command in _bash_lines(block.text):
        expected = EXIT_STATUS.get(command, 0)
        for url in DEFAULT_URLS:
            command = command.replace(url, base_url)
        run = subprocess.run(
            ["bash", "-o", "pipefail", "-c", command],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT_S,
        )
        assert run.returncode == expected, f"{block.id}: {command!r} exited {run.returncode}:\n{run.stderr[-3000:]}"
        if not any(w in command for w in (">", " -o ")) and not command.startswith(("cp ", "diff ")):  # else a file
            assert run.stdout.strip(), f"{block.id}: {command!r} printed nothing"


LOCAL = [b for b in TO_RUN if not b.needs_server]
SERVED = [b for b in TO_RUN if b.needs_server]


@pytest.fixture(scope="module")
def local_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str | None]:
    blocks = [b for b in LOCAL if b.lang == "python"]
    return run_python_group(blocks, "http://127.0.0.1:1", tmp_path_factory.mktemp("docs-local"))  # no server here


@pytest.fixture(scope="module")
def docs_server(live_server: Callable[..., ServerProcess]) -> str:
    """The session's keyless `radixgate serve` (built-in model, free loopback port) for the blocks that need one."""
    from live_servers import KEYLESS

    return live_server(KEYLESS).base_url


@pytest.fixture(scope="module")
def served_results(docs_server: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str | None]:
    blocks = [b for b in SERVED if b.lang == "python"]
    return run_python_group(blocks, docs_server, tmp_path_factory.mktemp("docs-served"))


@pytest.mark.parametrize("block", LOCAL, ids=lambda b: b.id)
def test_block_runs(block: Block, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    if block.lang == "bash":
        _bash(block, "http://127.0.0.1:1", tmp_path)
        return
    error = request.getfixturevalue("local_results")[block.id]
    assert error is None, f"{block.id} failed:\n{error}"


@pytest.mark.slow
@pytest.mark.parametrize("block", SERVED, ids=lambda b: b.id)
def test_block_runs_against_a_server(block: Block, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    if block.lang == "bash":
        _bash(block, request.getfixturevalue("docs_server"), tmp_path)
        return
    error = request.getfixturevalue("served_results")[block.id]
    assert error is None, f"{block.id} failed:\n{error}"


def _findings(text: str) -> list[str]:
    return re.findall(r"^(examples/\S+:\d+:\d+: KV\d+)", text, flags=re.M)


def _row(text: str, label: str) -> list[str]:
    line = next(line for line in text.splitlines() if f"│ {label}:" in line)
    return [cell.strip() for cell in line.split("│")[2:-1]]


@pytest.mark.slow
def test_readme_demo_sample(docs_server: str) -> None:
    """`radixgate demo --quick` against the module's server prints what the README shows: the same
    findings at the same lines, the same summary, 8 requests per app, and the ideal that
    `demo_ideal` computes from the segment texts with cl100k (here, not through the server), each
    row's ideal hit rate being it over that row's prompt tokens; the fixed app's cache reuses at least
    those tokens while the bad app stays far below."""
    from radixgate._wire import encode
    from radixgate.bench.demo_ideal import ideal_reuse

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    sample = next(b.text for b in BLOCKS if b.mark == ("checked-by", "tests/test_docs.py::test_readme_demo_sample"))
    assert "radixgate demo --quick" in readme
    run = subprocess.run(
        [sys.executable, "-m", "radixgate.bench.demo", "--quick", "--url", docs_server],
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "120"},
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT_S,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stdout
    assert _findings(out) == _findings(sample) and len(_findings(sample)) >= 8
    summary = re.compile(r"^Found .*$", re.M)
    assert summary.findall(out) == summary.findall(sample)
    for step in ("2. examples/bad_app.py: 8 requests", "4. examples/fixed_app.py: 8 requests"):
        assert step in sample and step in out
    ideal = ideal_reuse(str(ROOT / "examples" / "bad_app.py"), 8, encode)
    line = f"ideal: {ideal.reused_tokens:,} of {ideal.static_tokens:,} declared static-segment tokens reused across 8"
    assert line in out and line in sample, out[-1500:]
    before, after = _row(out, "before"), _row(out, "after")
    assert before[0] == after[0] == _row(sample, "before")[0] == "8"
    cached = {}
    for name, row in (("before", before), ("after", after)):
        prompt_tokens, cached[name] = (int(cell.replace(",", "")) for cell in row[1:3])
        assert row[4] == f"{ideal.reused_tokens / prompt_tokens:.1%}", (name, row)
    hit = {name: float(row[3].rstrip("%")) for name, row in (("before", before), ("after", after))}
    assert cached["after"] >= ideal.reused_tokens > 2 * cached["before"], (before, after)
    assert hit["before"] <= hit["after"] - 20, (before, after)
