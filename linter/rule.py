"""What a rule is: its code, name, message template, default and severity. The catalog of rules is
`rules.py`; a finding's severity follows how often the value it is about changes."""

from __future__ import annotations

from typing import ClassVar

from .analysis.shape import Change

#: Severities, lowest first (`--fail-on` and `[tool.promptlint] fail-on` name one of them).
LEVELS = ("info", "warning", "error")

_SEVERITY = {
    Change.PER_REQUEST: "error",
    Change.PER_SESSION: "warning",
    Change.PER_DAY: "info",
    Change.PER_PROCESS: "info",
    Change.NEVER: "info",
}


class Rule:
    """A rule: `code` (KVnnn), kebab-case `name`, `message` (a format template)."""

    code: ClassVar[str]
    name: ClassVar[str]
    message: ClassVar[str]
    #: Whether the rule runs without being selected explicitly.
    default: ClassVar[bool] = True
    #: "safe", "unsafe" or None: the kind of fix `--fix` / `--unsafe-fixes` may apply.
    fix: ClassVar[str | None] = None
    severity_floor: ClassVar[str | None] = None
    #: The highest level the rule reports at (its precision on real code does not earn more).
    severity_cap: ClassVar[str | None] = None

    def severity(self, change: Change | None, tokens: int | None = None, threshold: int = 64) -> str:
        """`error` for values that change per request, `warning` per session, `info` slower; one
        step lower when the static text pushed out of the prefix is under four times `threshold`
        tokens, so a short paragraph lost ranks below a whole manual. `[tool.promptlint.severity]`
        overrides it per rule."""
        if self.severity_floor is not None:
            return self.severity_floor
        level = _SEVERITY.get(change, "warning") if change is not None else "warning"
        if tokens is not None and tokens < 4 * threshold:
            level = {"error": "warning", "warning": "info"}.get(level, level)
        if self.severity_cap is not None and LEVELS.index(level) > LEVELS.index(self.severity_cap):
            level = self.severity_cap
        return level

    def format(self, **fields: object) -> str:
        return self.message.format(**fields)
