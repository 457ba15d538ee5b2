"""The one helper promptlint's tests share: lint a snippet and compare the codes found."""

from __future__ import annotations

import textwrap

from radixgate.linter import Settings, Violation, lint_source

#: Static text long enough to count as a static block after a dynamic value (>= 64 cl100k tokens).
LONG = (
    "You are a meticulous support assistant for Acme. Answer in three sentences, cite the "
    "policy section, and never invent order numbers. Refunds follow section 4 of the returns policy, "
    "shipping questions follow section 7, and anything about accounts, billing or legal matters goes "
    "to a human agent with a one-line summary of the ticket."
)


def assert_lints(source: str, *codes: str, settings: Settings | None = None) -> list[Violation]:
    """Lint `source` (dedented) and assert the codes found equal `codes` (as a multiset, in any
    order); no codes means the snippet must be clean. Returns the violations."""
    found = lint_source(textwrap.dedent(source), "snippet.py", settings)
    got = sorted(v.code for v in found)
    assert got == sorted(codes), "\n".join(
        [f"expected {sorted(codes)}, got {got}:"] + [f"  {v.row}:{v.col} {v.code} {v.message}" for v in found]
    )
    return found
