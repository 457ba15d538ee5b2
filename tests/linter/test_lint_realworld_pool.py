"""The evaluation's site pool (`bench/lint_realworld_pool.py`) and batch-3 list: found without promptlint."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from radixgate.bench.lint_realworld import weights
from radixgate.bench.lint_realworld_batch import LIST, split_of
from radixgate.bench.lint_realworld_pool import pool, sites_of

ROOT = Path(__file__).resolve().parents[2]

APP = """
from openai import OpenAI
client = OpenAI()
SYSTEM_PROMPT = "You are a helpful assistant."
GREETING = "x"
def answer(question):
    prompt = f"Question: {question}"
    print(prompt)
    return client.chat.completions.create(model="m", messages=[{"role": "user", "content": prompt}])
def other(chain, db):
    db.query("select 1")
    return chain.invoke({"q": 1})
"""


def test_pool_lists_llm_calls_and_prompt_named_strings(tmp_path: Path) -> None:
    sites = sites_of("app.py", APP)
    assert [(s.line, s.kind, s.what) for s in sites] == [
        (4, "assign", "SYSTEM_PROMPT"),
        (7, "assign", "prompt"),
        (9, "call", "chat.completions.create"),
        (12, "call", "chain.invoke"),
    ]
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "app.py").write_text(APP)
    (tmp_path / "broken.py").write_text("def (:\n")
    assert [s.path for s in pool(tmp_path)] == ["pkg/app.py"] * 4


def test_pool_imports_nothing_of_promptlint() -> None:
    tree = ast.parse((ROOT / "bench" / "lint_realworld_pool.py").read_text())
    imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in imported if "linter" in m or m.startswith("radixgate")]


def test_batch3_list_is_split_by_its_seeded_hash_and_labelled_before_rules() -> None:
    rows = [json.loads(line) for line in LIST.read_text().splitlines()]
    assert len(rows) >= 30 and all(r["licence"] and len(r["commit"]) == 40 for r in rows)
    assert split_of([r["repo"] for r in rows]) == {r["repo"]: r["split"] for r in rows}
    labels = [json.loads(line) for line in (LIST.parent / "labels_test.jsonl").read_text().splitlines()]
    batch3 = [lab for lab in labels if lab.get("batch") == 3]
    test_repos = {r["repo"] for r in rows if r["split"] == "test"}
    assert batch3 and {lab["repo"] for lab in batch3} <= test_repos
    sampled = [lab for lab in batch3 if lab["kind"] == "site"]
    assert sorted(lab["sample3"] for lab in sampled) == list(range(len(sampled)))
    weight = weights(batch3)
    assert {weight[id(lab)] for lab in sampled} == {sampled[0]["pool"] / len(sampled)}
    assert {weight[id(lab)] for lab in batch3 if lab["kind"] == "finding"} == {1.0}
