"""A large group of modules is analysed lean: each function's body is dropped once its module's facts
are collected and parsed again from its own lines when read. The bodies parsed again are the same
statements at the same rows and columns, and the findings are the same as with every tree kept."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from radixgate.bench.lint import generate
from radixgate.linter import runner
from radixgate.linter.analysis import bodies
from radixgate.linter.analysis.facts import parse
from radixgate.linter.analysis.reader import functions_of
from radixgate.linter.settings import Settings

TRICKY = (
    "def first(): return 1\n"
    "@decorator(\n    'x')\n"
    "async def fetch(a, *, b: int = 2) -> str:\n"
    "    async def inner(c):\n        return c\n"
    "    return await inner(a) + \\\n        b\n"
    "class Holder(Base, metaclass=Meta):\n"
    "    FIELD: str = 'text'\n"
    "    def wide(self, x):\n"
    "        return x  # é, a wide character before the end\n"
    "    def spans(\n        self,\n        y,\n    ):\n"
    '        text = """one\n\ndef not_a_function():\n"""\n'
    "        return text; z = 3\n"
    "if True:\n    def guarded(q):\n        if q:\n            return q\n        return None\n"
    "def last(): return [\n    1,\n]"
)


def _sources() -> list[str]:
    mine = Path(runner.__file__).parent
    own = [p.read_text(encoding="utf-8") for p in sorted(mine.rglob("*.py"))]
    return [TRICKY, TRICKY.replace("\n", "\r\n"), TRICKY.replace("class Holder", "\x0cclass Holder"), *own]


@pytest.mark.parametrize("index", range(3))
def test_dropped_bodies_parse_back_to_the_same_statements(index: int) -> None:
    for source in _sources()[index::3]:
        reference = {
            (fn.lineno, fn.col_offset): ast.dump(ast.Module(fn.body, []), include_attributes=True)
            for fn in ast.walk(ast.parse(source))
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
        parsed = parse(source, "m.py", "m", force=True)
        assert parsed is not None
        functions = functions_of(parsed)
        store = bodies.Bodies()
        store.release(parsed.module, source, functions)
        assert all(fn.body == [] for fn, _ in functions)
        for fn, _ in functions:
            again = bodies.body(parsed.module, fn)
            assert ast.dump(ast.Module(again, []), include_attributes=True) == reference[(fn.lineno, fn.col_offset)]
        store.drop_read(parsed.module)
        assert all(fn.body == [] for fn, _ in functions)


LONG = (
    "You are a careful research assistant. Read every summary above, merge the overlapping points, keep the "
    "numbers exactly as written, cite the source file of each point in brackets, and write the final report in "
    "plain English with short paragraphs, one per theme, and a closing list of open questions for the team."
)
APP = {
    "app/__init__.py": "",
    "app/summary.py": (
        "from langchain_core.prompts import PromptTemplate\n\n"
        f'SUMMARY = PromptTemplate.from_template("Summaries so far:\\n{{summaries}}\\n\\n{LONG}")\n'
    ),
    "app/run.py": (
        "import os\n\nfrom app.summary import SUMMARY\n\n\n"
        "def run(llm, folder):\n"
        '    summaries = "\\n".join(os.listdir(folder))\n'
        "    return llm.invoke(SUMMARY.format(summaries=summaries))\n"
    ),
    "app/prompts.py": (
        "import datetime\n\n"
        "SYSTEM = 'You are a support agent for the shop. ' * 20\n\n"
        "def today():\n    return datetime.datetime.now().isoformat()\n\n"
        "def header(user):\n    return f'User {user} at {today()}:'\n"
    ),
    "app/llm.py": (
        "from openai import OpenAI\n\nclient = OpenAI()\n\n"
        "def ask(system, question):\n"
        "    return client.chat.completions.create(model='m', messages=[\n"
        "        {'role': 'system', 'content': system}, {'role': 'user', 'content': question}])\n\n"
        "class Bot:\n    def __init__(self):\n        self.head = 'Be brief. ' * 50\n"
        "    def send(self, q):\n        return ask(self.head + q, q)\n"
    ),
    "app/main.py": (
        "from app.llm import ask, Bot\nfrom app.prompts import SYSTEM, header, today\n\n"
        "def handle(request):\n"
        "    ask(f'{today()} ' + SYSTEM, request.query)\n"
        "    ask(header(request.user) + SYSTEM, request.query)\n"
        "    return Bot().send(request.query)\n"
    ),
}


def test_a_lean_analysis_finds_what_a_full_one_finds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for rel, text in APP.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    (tmp_path / "generated").mkdir()
    generate(tmp_path / "generated", 3000)
    paths = [str(tmp_path)]
    full = lint_paths_with(monkeypatch, paths, 10**12)
    lean = lint_paths_with(monkeypatch, paths, 0)
    assert lean == full
    assert any(v.filename.endswith("app/summary.py") for v in full), full  # the cross-module case is found


def lint_paths_with(monkeypatch: pytest.MonkeyPatch, paths: list[str], above: int) -> list:
    monkeypatch.setattr(runner, "_LEAN_ABOVE", above)
    return runner.lint_paths(paths, Settings()).violations
