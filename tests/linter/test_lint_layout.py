"""promptlint's layout: small folders, the analysis core in its own, the evaluator's cases as its
methods (a free function handed the evaluator is a case of it spread over another file)."""

import ast
import re
from pathlib import Path

LINTER = Path(__file__).resolve().parents[2] / "linter"
#: A name that says where a module was cut, not what it holds.
_SPLIT_NAME = re.compile(r"part\d*$|_\d+$|^\w+\d$|_(more|rest|extra|misc|utils|helpers)$|^(utils|helpers|misc)$")


def _folders() -> list[Path]:
    return [LINTER, *sorted(p for p in LINTER.rglob("*") if p.is_dir() and p.name != "__pycache__")]


def test_each_folder_holds_at_most_15_modules_besides_its_init() -> None:
    sizes = {
        str(f.relative_to(LINTER.parent)): len([p for p in f.glob("*.py") if p.name != "__init__.py"])
        for f in _folders()
    }
    assert {f: n for f, n in sizes.items() if n > 15} == {}
    assert (LINTER / "analysis" / "__init__.py").is_file()


def test_no_module_is_named_after_a_split() -> None:
    cut = [str(p.relative_to(LINTER)) for f in _folders() for p in f.glob("*.py") if _SPLIT_NAME.search(p.stem)]
    assert cut == []


def _annotation_names(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
    return {ast.unparse(a.annotation).strip("'\"") for a in args if a.annotation is not None}


def test_only_the_walkers_reader_is_a_free_function_handed_the_evaluator() -> None:
    """The evaluator's cases are its methods; `walker.read_function` is what the evaluator is handed
    to read a function's body, not a case of it."""
    handed = [
        f"{path.name}:{node.name}"
        for path in sorted((LINTER / "analysis").glob("*.py"))
        for node in ast.parse(path.read_text()).body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and _annotation_names(node) & {"Evaluator", "ExpressionEvaluator"}
    ]
    assert handed == ["walker.py:read_function"]
