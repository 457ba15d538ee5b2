"""Settings: `[tool.promptlint]` in `pyproject.toml`, overridden by the command line.

```toml
[tool.promptlint]
select = ["KV1", "KV2"]        # codes or prefixes; default: every rule except opt-in ones (KV301)
extend-select = ["KV301"]
ignore = ["KV203"]
exclude = ["examples/bad_app.py", "tests/fixtures"]
min-static-tokens = 1024       # KV301: the provider's minimum cacheable prefix
min-lost-tokens = 64           # KV101/KV102: static tokens a dynamic value must push out of the prefix
default-excludes = true        # skip virtual environments and vendored copies of third-party packages
fail-on = "warning"            # the lowest severity that makes the exit status 1 (error, warning, info)

[tool.promptlint.severity]     # per rule (code or prefix): the severity its findings are reported at
KV103 = "info"
```

`min-lost-tokens` replaces `min-static-chars`: KV101/KV102 report a dynamic value only when the longest
block of static text it pushes out of the cached prefix is at least this many tokens (cl100k; estimated
from the text and counted exactly only near the threshold). 64 tokens is about one paragraph of
instructions: less than that (a label such as "Answer:", one short line) is not worth a finding.
"""

from __future__ import annotations

import fnmatch
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .rules import LEVELS, RULES

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

DEFAULT_MIN_STATIC_TOKENS = 1024
DEFAULT_MIN_LOST_TOKENS = 64
#: Folders skipped by default wherever they sit in a tree (like ruff's default excludes): virtual
#: environments, installed packages, and vendored copies of the libraries promptlint models, whose code
#: is not the application's.
DEFAULT_EXCLUDES = frozenset(
    {
        "site-packages",
        "dist-packages",
        "venv",
        ".venv",
        "env",
        ".env",
        "virtualenv",
        "vendor",
        "vendored",
        "_vendor",
        "third_party",
        "third-party",
        "node_modules",
        "langchain",
        "langchain_core",
        "langchain_community",
        "langchain_openai",
        "langchain_experimental",
        "llama_index",
        "openai",
        "anthropic",
        "litellm",
        "transformers",
    }
)
_KEYS = {
    "select",
    "extend-select",
    "ignore",
    "exclude",
    "extend-exclude",
    "min-static-tokens",
    "min-lost-tokens",
    "default-excludes",
    "fail-on",
    "severity",
}


class ConfigError(Exception):
    """The configuration is invalid; the message names the file and the key."""


@dataclass(frozen=True)
class Settings:
    """Which rules run, which files are skipped, and the thresholds."""

    select: tuple[str, ...] | None = None  # None: the default rules
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    root: Path = field(default_factory=Path.cwd)
    min_static_tokens: int = DEFAULT_MIN_STATIC_TOKENS
    min_lost_tokens: int = DEFAULT_MIN_LOST_TOKENS
    default_excludes: bool = True
    fail_on: str = "warning"  # the lowest severity that fails the run (exit status 1)
    severity: tuple[tuple[str, str], ...] = ()  # (code or prefix, level): per-rule severity

    def __post_init__(self) -> None:
        for code in (self.select or ()) + self.extend_select + self.ignore:
            if not any(c.startswith(code.upper()) for c in RULES):
                raise ConfigError(f"unknown rule code or prefix {code!r} (known: {', '.join(RULES)})")
        if self.fail_on not in LEVELS:
            raise ConfigError(f"fail-on: unknown severity {self.fail_on!r} (known: {', '.join(LEVELS)})")
        for code, level in self.severity:
            if not any(c.startswith(code.upper()) for c in RULES):
                raise ConfigError(f"severity.{code}: unknown rule code or prefix (known: {', '.join(RULES)})")
            if level not in LEVELS:
                raise ConfigError(f"severity.{code}: unknown severity {level!r} (known: {', '.join(LEVELS)})")
        if self.min_static_tokens < 1 or self.min_lost_tokens < 1:
            raise ConfigError("min-static-tokens and min-lost-tokens must be positive")
        object.__setattr__(self, "_enabled", self._resolve())

    @property
    def enabled(self) -> frozenset[str]:
        """The codes that run: selected (or default), plus extended, minus ignored."""
        return self._enabled  # type: ignore[attr-defined]

    def _resolve(self) -> frozenset[str]:
        if self.select is None:
            chosen = {c for c, r in RULES.items() if r.default}
        else:
            chosen = {c for c in RULES if any(c.startswith(s.upper()) for s in self.select)}
        chosen |= {c for c in RULES if any(c.startswith(s.upper()) for s in self.extend_select)}
        return frozenset(c for c in chosen if not any(c.startswith(i.upper()) for i in self.ignore))

    def is_enabled(self, code: str) -> bool:
        return code in self.enabled

    def severity_of(self, code: str, level: str) -> str:
        """The severity `code`'s finding is reported at: the longest matching `severity` entry, else `level`."""
        matches = [(len(c), lvl) for c, lvl in self.severity if code.startswith(c.upper())]
        return max(matches)[1] if matches else level

    def fails(self, level: str) -> bool:
        """Whether a finding of this severity makes the run fail (`fail-on` or higher)."""
        return LEVELS.index(level) >= LEVELS.index(self.fail_on)

    def is_default_excluded(self, name: str) -> bool:
        """Whether a folder called `name` is skipped by the default excludes."""
        return self.default_excludes and name in DEFAULT_EXCLUDES

    def is_excluded(self, path: Path) -> bool:
        """Whether `path` matches an `exclude` pattern (relative to the configuration's folder)."""
        if not self.exclude:
            return False
        try:
            rel = path.resolve().relative_to(self.root.resolve()).as_posix()
        except ValueError:
            rel = path.as_posix()
        for pattern in self.exclude:
            pattern = pattern.rstrip("/")
            if fnmatch.fnmatch(rel, pattern) or rel.startswith(pattern + "/") or fnmatch.fnmatch(path.name, pattern):
                return True
        return False

    def override(self, **changes: Any) -> Settings:
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


def find_pyproject(start: Path) -> Path | None:
    """The nearest `pyproject.toml` with a `[tool.promptlint]` table, from `start` upward."""
    for folder in [start, *start.parents]:
        candidate = folder / "pyproject.toml"
        if candidate.is_file() and "[tool.promptlint" in candidate.read_text(errors="replace"):
            return candidate
    return None


def load_settings(path: Path | None) -> Settings:
    """Settings from `path` (a pyproject.toml), or the defaults when `path` is None."""
    if path is None:
        return Settings()
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read configuration: {exc}") from None
    table = data.get("tool", {}).get("promptlint", {})
    if "min-static-chars" in table:
        raise ConfigError(
            f"{path}: [tool.promptlint] min-static-chars was replaced by min-lost-tokens (tokens, default 64)"
        )
    unknown = set(table) - _KEYS
    if unknown:
        names = ", ".join(sorted(unknown))
        raise ConfigError(f"{path}: unknown key(s) in [tool.promptlint]: {names} (known: {', '.join(sorted(_KEYS))})")

    def strings(key: str) -> tuple[str, ...]:
        value = table.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{path}: [tool.promptlint] {key} must be a list of strings")
        return tuple(value)

    def integer(key: str, default: int) -> int:
        value = table.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool):
            raise ConfigError(f"{path}: [tool.promptlint] {key} must be an integer")
        return value

    def flag(key: str, default: bool) -> bool:
        value = table.get(key, default)
        if not isinstance(value, bool):
            raise ConfigError(f"{path}: [tool.promptlint] {key} must be true or false")
        return value

    def word(key: str, default: str) -> str:
        value = table.get(key, default)
        if not isinstance(value, str):
            raise ConfigError(f"{path}: [tool.promptlint] {key} must be a string")
        return value

    levels = table.get("severity", {})
    if not isinstance(levels, dict) or not all(isinstance(v, str) for v in levels.values()):
        raise ConfigError(f'{path}: [tool.promptlint] severity must be a table of rule = "level"')
    try:
        return Settings(
            fail_on=word("fail-on", "warning"),
            severity=tuple(sorted(levels.items())),
            select=strings("select") if "select" in table else None,
            extend_select=strings("extend-select"),
            ignore=strings("ignore"),
            exclude=strings("exclude") + strings("extend-exclude"),
            root=path.parent,
            min_static_tokens=integer("min-static-tokens", DEFAULT_MIN_STATIC_TOKENS),
            min_lost_tokens=integer("min-lost-tokens", DEFAULT_MIN_LOST_TOKENS),
            default_excludes=flag("default-excludes", True),
        )
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
