"""What the checker yields: `Violation` tuples, with optional fixes and measured statistics."""

from __future__ import annotations

from typing import NamedTuple

from .rules import MeasuredWaste


class Edit(NamedTuple):
    """Replace the text between (row, col) and (end_row, end_col) (1-based rows, 0-based
    columns) with `content`; an insertion when both ends are equal."""

    row: int
    col: int
    end_row: int
    end_col: int
    content: str


class Fix(NamedTuple):
    message: str
    applicability: str  # "safe" or "unsafe"
    edits: tuple[Edit, ...]


class Measured(NamedTuple):
    """The gateway's statistics for the template whose source matches a finding."""

    template: str
    requests: int
    hit_rate: float
    recomputed_tokens: int  # prompt tokens not served from cache
    verdict: str | None = None  # what the measured drift says of a static finding (measured.py)

    def describe(self) -> str:
        said = f"; {self.verdict}" if self.verdict else ""
        return (
            f"measured hit rate {self.hit_rate:.0%} over {self.requests:,} requests, "
            f"{self.recomputed_tokens:,} prompt tokens recomputed{said}"
        )


class Violation(NamedTuple):
    """One finding. Rows are 1-based, columns 1-based (as ruff reports them)."""

    code: str
    message: str
    filename: str
    row: int
    col: int
    end_row: int
    end_col: int
    severity: str  # "error", "warning" or "info"
    fix: Fix | None = None
    span: tuple[int, int] | None = None  # lines of the enclosing prompt call (stats matching)
    measured: Measured | None = None

    @property
    def full_message(self) -> str:
        """The message with the measured numbers, when statistics were given."""
        if self.measured is None or self.code == MeasuredWaste.code:  # KV901 names them itself
            return self.message
        return f"{self.message} — {self.measured.describe()}"
