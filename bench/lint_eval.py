"""Precision and recall of promptlint on the labeled corpus.

    python -m radixgate.bench.lint_eval [--corpus tests/linter/corpus] [--verbose]

Each corpus file starts with `# expect: KV101[, KV203]` (or `# expect: none`) and may add
`# args: --extend-select KV301`. A finding counts as a true positive when its code is expected
in that file, a false positive when it is not; an expected code that is not found is a false
negative.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections import Counter
from pathlib import Path
from typing import NamedTuple

from radixgate.linter.checker import check_source
from radixgate.linter.settings import Settings

DEFAULT_CORPUS = Path(__file__).resolve().parents[1] / "tests" / "linter" / "corpus"


class Sample(NamedTuple):
    path: Path
    expected: frozenset[str]
    found: frozenset[str]


class Scores(NamedTuple):
    tp: int
    fp: int
    fn: int

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 1.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 1.0


def _settings(header: list[str]) -> Settings:
    for line in header:
        if line.startswith("# args:"):
            args = argparse.ArgumentParser(add_help=False)
            args.add_argument("--extend-select", action="append", default=[])
            args.add_argument("--select", action="append")
            parsed = args.parse_args(shlex.split(line.removeprefix("# args:")))
            return Settings(
                select=tuple(parsed.select) if parsed.select else None, extend_select=tuple(parsed.extend_select)
            )
    return Settings()


def load_sample(path: Path) -> Sample:
    source = path.read_text()
    header = source.splitlines()[:3]
    labels = header[0].removeprefix("# expect:").strip() if header else ""
    if not header or not header[0].startswith("# expect:"):
        raise ValueError(f"{path}: first line must be `# expect: CODES` or `# expect: none`")
    expected = frozenset() if labels == "none" else frozenset(c.strip() for c in labels.split(","))
    found = frozenset(v.code for v in check_source(source, path.name, _settings(header)))
    return Sample(path, expected, found)


def evaluate(corpus: Path) -> list[Sample]:
    return [load_sample(p) for p in sorted(corpus.glob("*.py"))]


def score(samples: list[Sample]) -> tuple[Scores, dict[str, Scores]]:
    per: dict[str, Counter] = {}
    for s in samples:
        for code in s.expected | s.found:
            c = per.setdefault(code, Counter())
            c["tp" if code in s.expected and code in s.found else "fp" if code in s.found else "fn"] += 1
    rules = {code: Scores(c["tp"], c["fp"], c["fn"]) for code, c in sorted(per.items())}
    total = Scores(*(sum(getattr(r, f) for r in rules.values()) for f in ("tp", "fp", "fn")))
    return total, rules


def report(samples: list[Sample]) -> str:
    total, rules = score(samples)
    positives = sum(1 for s in samples if s.expected)
    lines = [
        f"corpus: {len(samples)} snippets ({positives} positive, {len(samples) - positives} negative)",
        "",
        f"{'rule':<8}{'TP':>5}{'FP':>5}{'FN':>5}{'precision':>11}{'recall':>8}",
    ]
    for code, r in rules.items():
        lines.append(f"{code:<8}{r.tp:>5}{r.fp:>5}{r.fn:>5}{r.precision:>11.3f}{r.recall:>8.3f}")
    lines.append(f"{'all':<8}{total.tp:>5}{total.fp:>5}{total.fn:>5}{total.precision:>11.3f}{total.recall:>8.3f}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m radixgate.bench.lint_eval", description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--verbose", "-v", action="store_true", help="list every mismatch")
    args = parser.parse_args(argv)
    if not args.corpus.is_dir():
        print(f"error: corpus folder {args.corpus} not found (pass --corpus)", file=sys.stderr)
        return 2
    samples = evaluate(args.corpus)
    sys.stdout.write(report(samples))
    if args.verbose:
        for s in samples:
            if s.expected != s.found:
                print(f"  {s.path.name}: expected {sorted(s.expected) or 'none'}, found {sorted(s.found) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
