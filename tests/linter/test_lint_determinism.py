"""A file's findings depend only on it and the project modules connected to it by imports: the same in
any file order, per project or with unrelated projects beside it, from a folder or as explicit files
(a staged template alone is reported when a caller in its project makes it a finding)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from radixgate.linter.runner import lint_paths
from radixgate.linter.settings import Settings

LONG = (
    "You are a careful research assistant. Read every summary above, merge the overlapping points, keep the "
    "numbers exactly as written, cite the source file of each point in brackets, and write the final report in "
    "plain English with short paragraphs, one per theme, and a closing list of open questions for the team. "
    "Never invent a source, and say so plainly when two summaries disagree."
)

# Five small projects. alpha and beta fill a `{summaries}` placeholder of the same name (alpha from
# os.listdir, beta from a constant) in modules of the same names; delta and epsilon each define a
# class with a `generate` method, only delta's sends a prompt.
PROJECTS: dict[str, dict[str, str]] = {
    "alpha": {
        "alpha/__init__.py": "",
        "alpha/prompts.py": (
            "from langchain_core.prompts import PromptTemplate\n\n"
            f'SUMMARY = PromptTemplate.from_template("Summaries so far:\\n{{summaries}}\\n\\n{LONG}")\n'
        ),
        "alpha/app.py": (
            "import os\n\nfrom alpha.prompts import SUMMARY\n\n\n"
            "def run(llm, folder):\n"
            '    summaries = "\\n".join(os.listdir(folder))\n'
            "    return llm.invoke(SUMMARY.format(summaries=summaries))\n"
        ),
    },
    "beta": {
        "beta/__init__.py": "",
        "beta/prompts.py": (
            "from langchain_core.prompts import PromptTemplate\n\n"
            f'REPORT = PromptTemplate.from_template("Summaries:\\n{{summaries}}\\n\\n{LONG}")\n'
        ),
        "beta/app.py": (
            "from beta.prompts import REPORT\n\n"
            'FIXED = "chapter one, chapter two, chapter three"\n\n\n'
            "def run(llm):\n"
            "    return llm.invoke(REPORT.format(summaries=FIXED))\n"
        ),
    },
    "gamma": {
        "bot.py": (
            "from datetime import datetime\n\nfrom openai import OpenAI\n\nclient = OpenAI()\n"
            f'RULES = "{LONG}"\n\n\n'
            "def answer(question):\n"
            "    return client.chat.completions.create(\n"
            '        model="m",\n'
            '        messages=[{"role": "system", "content": f"Now: {datetime.now()}. {RULES}"},'
            ' {"role": "user", "content": question}],\n'
            "    )\n"
        ),
    },
    "delta": {
        "delta/__init__.py": "",
        "delta/llm.py": (
            "from openai import OpenAI\n\n\nclass Client:\n"
            "    def generate(self, prompt):\n"
            '        messages = [{"role": "user", "content": prompt}]\n'
            '        return OpenAI().chat.completions.create(model="m", messages=messages)\n'
        ),
        "delta/agent.py": (
            "from delta.llm import Client\n\n"
            f'INSTRUCTIONS = "{LONG}"\n\n\n'
            "class Agent:\n"
            "    def __init__(self):\n        self.llm = Client()\n\n"
            "    def run(self, question):\n"
            '        return self.llm.generate(f"Question: {question}\\n{INSTRUCTIONS}")\n'
        ),
    },
    "epsilon": {
        "epsilon/__init__.py": "",
        "epsilon/llm.py": "class Echo:\n    def generate(self, prompt):\n        return prompt.upper()\n",
        "epsilon/agent.py": (
            "from epsilon.llm import Echo\n\n"
            f'INSTRUCTIONS = "{LONG}"\n\n\n'
            "class Agent:\n"
            "    def __init__(self):\n        self.llm = Echo()\n\n"
            "    def run(self, question):\n"
            '        return self.llm.generate(f"Question: {question}\\n{INSTRUCTIONS}")\n'
        ),
    },
}


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("projects")
    for project, files in PROJECTS.items():
        (root / project).mkdir()
        (root / project / "pyproject.toml").write_text(f'[project]\nname = "{project}"\n')
        for rel, text in files.items():
            (root / project / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / project / rel).write_text(text)
    return root


def findings(paths: list[Path]) -> dict[str, list[tuple[int, int, str, str]]]:
    """file (as `project/...`) -> its findings."""
    out: dict[str, list[tuple[int, int, str, str]]] = {}
    result = lint_paths([str(p) for p in paths], Settings())
    for path in result.files:
        out.setdefault(_key(path), [])
    for v in result.violations:
        out.setdefault(_key(Path(v.filename)), []).append((v.row, v.col, v.code, v.message))
    return {k: sorted(v) for k, v in out.items()}


def _key(path: Path) -> str:
    parts = path.resolve().parts
    at = min(i for i, part in enumerate(parts) if part in PROJECTS)
    return "/".join(parts[at:])


def files_of(root: Path, *projects: str) -> list[Path]:
    return sorted(p for project in projects for p in (root / project).rglob("*.py"))


def test_findings_do_not_depend_on_order_or_on_other_projects(tree: Path) -> None:
    everything = files_of(tree, *PROJECTS)
    reference = findings(everything)
    # what the fixtures are for: each project's own finding is found, the look-alikes stay clean
    flagged = {k for k, v in reference.items() if v}
    assert flagged == {"alpha/alpha/prompts.py", "gamma/bot.py", "delta/delta/agent.py"}, reference
    assert [c for _, _, c, _ in reference["alpha/alpha/prompts.py"]] == ["KV204"]
    for seed in (1, 2, 3):  # three file orders, all projects together
        shuffled = list(everything)
        random.Random(seed).shuffle(shuffled)
        assert findings(shuffled) == reference
    assert findings([tree]) == reference  # the parent folder: each marked project on its own
    names = list(PROJECTS)
    for i, project in enumerate(names):
        own = {k: v for k, v in reference.items() if k.startswith(project + "/")}
        assert findings([tree / project]) == own  # the project alone, as a folder
        assert findings(files_of(tree, project)[::-1]) == own  # its files, in reverse order
        neighbour = names[(i + 1) % len(names)]  # an unrelated project added, before or after it
        for paths in ([tree / neighbour, tree / project], [tree / project, tree / neighbour]):
            both = findings(paths)
            assert {k: v for k, v in both.items() if k.startswith(project + "/")} == own


def test_each_file_alone_as_pre_commit_passes_it(tree: Path) -> None:
    """Explicit files (pre-commit's staged files): each one alone gives its findings in the whole tree;
    the staged template `alpha/prompts.py` is reported although its caller `alpha/app.py` is not staged."""
    reference = findings(files_of(tree, *PROJECTS))
    for path in files_of(tree, *PROJECTS):
        assert findings([path]) == {_key(path): reference[_key(path)]}, path
