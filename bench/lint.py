"""Lint speed on one core.

    python -m radixgate.bench.lint                 # a generated corpus of 100,000 lines
    python -m radixgate.bench.lint --lines 200000
    python -m radixgate.bench.lint --paths src/    # your own code
    python -m radixgate.bench.lint --no-default-excludes --paths .venv/lib/python3.11/site-packages/transformers
    python -m radixgate.bench.lint --against pyflakes   # beside pyflakes, alternating, same files

`--against pyflakes` also runs pyflakes (the common pure-Python linter: parse, then one pass over the tree)
over the same files, alternating with promptlint run for run, and prints the ratio: a figure for this
machine that does not depend on how fast its CPU is.

The generated corpus is LLM-application code: every module builds prompts (OpenAI, Anthropic,
LangChain templates, RAG over files, few-shot lists, tools serialized to JSON), half of them in
cache-hostile ways, between ordinary helper code. Every file is parsed and analyzed in full.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from pathlib import Path

from radixgate.linter.cli import tune_gc
from radixgate.linter.files import iter_files
from radixgate.linter.runner import lint_paths
from radixgate.linter.settings import Settings

_HEADER = '''"""Module {n}: generated for promptlint's benchmark."""
import json
import os
import random
import textwrap
from datetime import datetime

from openai import OpenAI
from langchain_core.prompts import ChatPromptTemplate, PromptTemplate

SYSTEM_{n} = textwrap.dedent("""
    You are assistant number {n} of Acme. Answer in three sentences, cite the policy section,
    and never invent order numbers, tracking codes or delivery dates.
""")
TOOLS_{n} = [{{"type": "function", "function": {{"name": "lookup_{n}", "parameters": {{}}}}}}]
LABELS_{n} = {{"billing", "shipping", "returns", "other"}}
'''

_BLOCKS = [
    """

def answer_{n}_{i}(client: OpenAI, user_id: str, question: str) -> str:
    stamp = datetime.now().isoformat()
    system = f"Time: {{stamp}}. User: {{user_id}}.\\n" + SYSTEM_{n} + json.dumps(TOOLS_{n})
    response = client.chat.completions.create(model="m", messages=[
        {{"role": "system", "content": system}}, {{"role": "user", "content": question}}])
    return response.choices[0].message.content or ""
""",
    """

def good_{n}_{i}(client: OpenAI, history: list, question: str) -> str:
    messages = [{{"role": "system", "content": SYSTEM_{n}}}]
    messages.extend(history)
    messages.append({{"role": "user", "content": f"{{question}} (at {{datetime.now():%H:%M}})"}})
    response = client.chat.completions.create(model="m", messages=messages)
    return response.choices[0].message.content or ""
""",
    """

def rag_{n}_{i}(client: OpenAI, folder: str, question: str) -> str:
    docs = []
    for name in os.listdir(folder):
        with open(os.path.join(folder, name)) as f:
            docs.append(f.read())
    context = "\\n\\n".join(docs)
    prompt = f"Question: {{question}}\\n\\nDocuments:\\n{{context}}"
    return client.chat.completions.create(model="m", messages=[
        {{"role": "system", "content": SYSTEM_{n}}}, {{"role": "user", "content": prompt}}])
""",
    """

TEMPLATE_{n}_{i} = ChatPromptTemplate.from_messages([
    ("system", "Today is {{today}}. " + "Label the message as one of: " + ", ".join(LABELS_{n})),
    ("human", "{{message}}"),
])


def classify_{n}_{i}(llm, message: str):
    return (TEMPLATE_{n}_{i} | llm).invoke({{"today": datetime.now().date(), "message": message}})
""",
    '''

class Record{n}_{i}:
    """Ordinary application code between the prompts."""

    def __init__(self, rows: list[dict]) -> None:
        self.rows = rows

    def totals(self) -> dict[str, float]:
        out: dict[str, float] = {{}}
        for row in self.rows:
            key = row.get("category", "other")
            out[key] = out.get(key, 0.0) + float(row.get("amount", 0))
        return dict(sorted(out.items()))

    def top(self, k: int = 3) -> list[tuple[str, float]]:
        return sorted(self.totals().items(), key=lambda kv: -kv[1])[:k]
''',
    """

def few_shot_{n}_{i}(client: OpenAI, examples: list, text: str):
    shots = list(examples)
    random.shuffle(shots)
    body = "\\n".join(f"{{e['input']}} -> {{e['label']}}" for e in shots)
    template = PromptTemplate.from_template("{{shots}}\\nClassify: {{text}}")
    return client.chat.completions.create(model="m", messages=[
        {{"role": "user", "content": SYSTEM_{n} + body + template.format(shots="", text=text)}}])
""",
]


def generate(folder: Path, target_lines: int) -> tuple[int, int]:
    """Write modules under `folder` until they hold `target_lines` lines; (files, lines)."""
    lines = files = 0
    n = 0
    while lines < target_lines:
        parts = [_HEADER.format(n=n)]
        parts += [_BLOCKS[(n + i) % len(_BLOCKS)].format(n=n, i=i) for i in range(12)]
        text = "".join(parts)
        (folder / f"module_{n:05d}.py").write_text(text)
        lines += text.count("\n")
        files += 1
        n += 1
    return files, lines


def bench(paths: list[str], repeat: int = 1, default_excludes: bool = True) -> tuple[int, int, int, float, float]:
    """Lint `paths` as `promptlint` does, as one project (best of `repeat` runs);
    (files, lines, findings, CPU seconds, wall seconds)."""
    settings = Settings(default_excludes=default_excludes)
    files = list(iter_files(paths, settings, force_exclude=False))
    lines = sum(f.read_bytes().count(b"\n") for f in files)
    best_cpu = best_wall = float("inf")
    findings = 0
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        findings = len(lint_paths(paths, settings).violations)
        best_cpu = min(best_cpu, time.process_time() - cpu)
        best_wall = min(best_wall, time.perf_counter() - wall)
    return len(files), lines, findings, best_cpu, best_wall


def pyflakes_seconds(paths: list[str], default_excludes: bool = True) -> tuple[int, float]:
    """pyflakes over the files `promptlint` would lint (parse and check each): (messages, CPU seconds)."""
    import ast

    from pyflakes.checker import Checker

    files = list(iter_files(paths, Settings(default_excludes=default_excludes), force_exclude=False))
    enabled = gc.isenabled()
    gc.disable()  # as `lint_paths` does for promptlint, so that neither pays for the collector
    try:
        start = time.process_time()
        messages = 0
        for path in files:
            source = path.read_text(encoding="utf-8")
            try:
                tree = ast.parse(source, str(path))
            except SyntaxError:
                continue
            messages += len(Checker(tree, filename=str(path)).messages)
        return messages, time.process_time() - start
    finally:
        if enabled:
            gc.enable()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m radixgate.bench.lint", description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100_000, help="size of the generated corpus")
    parser.add_argument("--paths", nargs="+", help="lint these instead of a generated corpus")
    parser.add_argument("--repeat", type=int, default=3, help="report the best of N runs")
    parser.add_argument(
        "--no-default-excludes", action="store_true", help="also lint venvs, site-packages and vendored packages"
    )
    parser.add_argument(
        "--against", choices=("pyflakes",), help="also time pyflakes on the same files, alternating; print the ratio"
    )
    args = parser.parse_args(argv)
    if args.against:
        try:
            import pyflakes  # noqa: F401
        except ImportError:
            print("error: --against pyflakes needs pyflakes (pip install pyflakes)", file=sys.stderr)
            return 2
    tune_gc()
    with tempfile.TemporaryDirectory(prefix="promptlint_bench_") as tmp:
        if args.paths:
            paths = args.paths
        else:
            generate(Path(tmp), args.lines)
            paths = [tmp]
        excludes = not args.no_default_excludes
        reference = cpu = wall = float("inf")
        for _ in range(args.repeat if args.against else 1):  # alternate, so both see the same machine
            files, lines, findings, run_cpu, run_wall = bench(paths, 1 if args.against else args.repeat, excludes)
            cpu, wall = min(cpu, run_cpu), min(wall, run_wall)
            if args.against:
                reference = min(reference, pyflakes_seconds(paths, excludes)[1])
    print(
        f"{files} files, {lines:,} lines, {findings:,} findings; best of {args.repeat}: "
        f"{cpu:.2f} s CPU, {wall:.2f} s wall, one core"
    )
    print(f"{lines / cpu:,.0f} lines/s (CPU time), {lines / wall:,.0f} lines/s (wall time)")
    if args.against:
        print(
            f"pyflakes on the same files: {lines / reference:,.0f} lines/s (CPU time, best of {args.repeat}); "
            f"promptlint / pyflakes speed: {reference / cpu:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
