"""`promptlint`: the command line, shaped like ruff's.

Exit status: 0 no finding at `--fail-on` severity or above (default `warning`: `info` findings are
reported but do not fail), 1 such findings (a file that does not parse is one, E999), 2 promptlint
itself failed (bad configuration, unreadable statistics): its message on stderr, one line, never a
traceback.
"""

from __future__ import annotations

import argparse
import ast
import gc
import os
import sys
from pathlib import Path

from radixgate import __version__

from . import fixes, hit_rates, reporters
from .analysis.facts import ParseFailure
from .checker import check
from .files import MissingPath, iter_files
from .rules import LEVELS, RULES, MeasuredDrift, MeasuredWaste, explain
from .runner import lint_paths, unanalyzable
from .settings import ConfigError, Settings, find_pyproject, load_settings
from .violation import Violation


def tune_gc() -> None:
    """Collect young objects less often: parsing allocates many short-lived, acyclic AST nodes,
    and the default threshold spends a quarter of lint time in the collector."""
    gc.set_threshold(50_000, 20, 100)


class ToolFailure(Exception):
    """promptlint could not do its job; exit status 2 with this message."""


def _codes(values: list[str] | None) -> tuple[str, ...] | None:
    if values is None:
        return None
    return tuple(c.strip().upper() for v in values for c in v.split(",") if c.strip())


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="promptlint", description="Find cache-hostile prompt construction in Python code.")
    p.add_argument("paths", nargs="*", help="files or folders to check (default: .)")
    p.add_argument("--select", action="append", help="rule codes or prefixes to enable (replaces the default)")
    p.add_argument("--extend-select", action="append", help="rule codes or prefixes to add")
    p.add_argument("--ignore", action="append", help="rule codes or prefixes to disable")
    p.add_argument(
        "--format",
        "--output-format",
        dest="format",
        default="text",
        choices=sorted(reporters.REPORTERS),
        help="output format (default: text)",
    )
    p.add_argument("--fix", action="store_true", help="apply safe fixes")
    p.add_argument("--unsafe-fixes", action="store_true", help="also apply unsafe fixes")
    p.add_argument("--exit-zero", action="store_true", help="exit 0 even with findings")
    p.add_argument(
        "--fail-on",
        choices=LEVELS[::-1],
        help="the lowest severity that makes the exit status 1 (default: warning, or fail-on in [tool.promptlint])",
    )
    p.add_argument("--statistics", action="store_true", help="print counts per rule")
    p.add_argument("--stats", metavar="URL_OR_FILE", help="the gateway's /v1/prompt_stats (URL) or a saved copy (file)")
    p.add_argument(
        "--stats-api-key",
        metavar="KEY",
        default=os.environ.get("RADIXGATE_API_KEY"),
        help="API key for a gateway with tenants (default: $RADIXGATE_API_KEY)",
    )
    p.add_argument("--explain", metavar="CODE", help="show a rule's documentation and exit")
    p.add_argument("--config", metavar="PYPROJECT", help="read settings from this pyproject.toml")
    p.add_argument("--isolated", action="store_true", help="ignore configuration files")
    p.add_argument(
        "--force-exclude",
        action="store_true",
        help="apply `exclude` to paths given on the command line too (pre-commit)",
    )
    p.add_argument("--min-static-tokens", type=int, help="KV301 threshold (default 1024)")
    p.add_argument(
        "--min-lost-tokens", type=int, help="KV101/KV102: static tokens pushed out of the prefix worth a finding (64)"
    )
    p.add_argument(
        "--no-default-excludes",
        action="store_true",
        help="also lint virtual environments, site-packages and vendored copies of third-party packages",
    )
    p.add_argument("--output-file", "-o", help="write the report here instead of stdout")
    p.add_argument("--version", action="store_true", help="print the version and exit")
    return p


def _settings(args: argparse.Namespace) -> Settings:
    if args.isolated:
        base = Settings()
    elif args.config:
        if not Path(args.config).is_file():
            raise ConfigError(f"configuration file not found: {args.config}")
        base = load_settings(Path(args.config))
    else:
        base = load_settings(find_pyproject(Path.cwd()))
    return base.override(
        select=_codes(args.select),
        extend_select=(base.extend_select + (_codes(args.extend_select) or ())),
        ignore=(base.ignore + (_codes(args.ignore) or ())),
        min_static_tokens=args.min_static_tokens,
        min_lost_tokens=args.min_lost_tokens,
        default_excludes=False if args.no_default_excludes else None,
        fail_on=args.fail_on,
    )


def lint_file(path: Path, settings: Settings, apply_fixes: bool, unsafe: bool) -> tuple[list[Violation], int]:
    """Lint one file, applying fixes when asked; the violations that remain and how many
    were fixed."""
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ToolFailure(f"{path}: cannot read: {exc}") from None
    filename = path.as_posix()
    count = 0
    try:
        found = fixes.attach(source, *check(source, filename, settings))
        if apply_fixes and any(v.fix for v in found):
            fixed_source, count = fixes.apply(source, found, unsafe)
            if count:
                path.write_text(fixed_source, encoding="utf-8")
                found = fixes.attach(fixed_source, *check(fixed_source, filename, settings))
    except ParseFailure as exc:  # one finding for the file; the others are linted
        return [unanalyzable(path, exc.detail, exc.row, exc.col)], 0
    except RecursionError:  # a limit of the analysis, not a fault of the file: say so, go on
        print(f"promptlint: warning: {path}: skipped, expressions nested too deeply to analyze", file=sys.stderr)
        return [], 0
    except Exception as exc:  # a promptlint bug: name the file so it can be reported
        raise ToolFailure(f"{path}: internal error: {type(exc).__name__}: {exc}") from None
    return found, count


def run(args: argparse.Namespace) -> int:
    if args.version:
        print(f"promptlint {__version__}")
        return 0
    if args.explain:
        if args.explain.upper() not in RULES:
            raise ToolFailure(f"unknown rule {args.explain!r} (known: {', '.join(RULES)})")
        print(explain(args.explain))
        return 0
    settings = _settings(args)
    violations: list[Violation] = []
    fixed = 0
    if args.fix or args.unsafe_fixes:
        files = list(iter_files(args.paths or ["."], settings, args.force_exclude))
        for path in files:
            found, count = lint_file(path, settings, True, args.unsafe_fixes)
            violations.extend(found)
            fixed += count
    else:
        result = lint_paths(args.paths or ["."], settings, args.force_exclude)
        if result.failures:
            raise ToolFailure(result.failures[0])
        files = result.files
        by_file: dict[str, list[Violation]] = {}
        for v in result.violations:
            by_file.setdefault(v.filename, []).append(v)
        for filename, found in by_file.items():
            if filename not in result.sources:  # E999: nothing to fix
                violations.extend(found)
                continue
            source = result.sources[filename]
            violations.extend(fixes.attach(source, found, ast.parse(source, filename)))
    if fixed:
        print(f"Fixed {fixed} error{'s' if fixed != 1 else ''}.", file=sys.stderr)
    if args.stats:
        try:
            templates = hit_rates.load(args.stats, args.stats_api_key)
        except hit_rates.StatsError as exc:
            raise ToolFailure(str(exc)) from None
        violations = hit_rates.apply(
            violations,
            templates,
            [f.as_posix() for f in files],
            settings.is_enabled(MeasuredWaste.code),
            settings.is_enabled(MeasuredDrift.code),
        )
    violations = [v._replace(severity=settings.severity_of(v.code, v.severity)) for v in violations]
    report = (
        reporters.statistics(violations)
        if args.statistics and args.format == "text"
        else reporters.REPORTERS[args.format](violations)
    )
    if args.output_file:
        Path(args.output_file).write_text(report, encoding="utf-8")
    else:
        sys.stdout.write(report)
    if not violations and args.format == "text" and not args.output_file:
        print("All checks passed!")
    failing = any(settings.fails(v.severity) for v in violations)
    return 0 if args.exit_zero or not failing else 1


def main(argv: list[str] | None = None) -> int:
    """Run promptlint with `argv` (default: the process arguments); return the exit status."""
    args = build_parser().parse_args(argv)
    tune_gc()
    try:
        return run(args)
    except (ToolFailure, ConfigError, MissingPath) as exc:
        print(f"promptlint: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 2
    except Exception as exc:  # a bug in promptlint must not read as a lint finding
        print(f"promptlint: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
