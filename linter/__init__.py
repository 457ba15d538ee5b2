"""promptlint: a static checker for cache-hostile prompt construction.

    from radixgate.linter import lint_source
    for v in lint_source(open("app.py").read(), "app.py"):
        print(v.code, v.row, v.message)

The command line is `promptlint` (`radixgate.linter.cli:main`). Nothing here imports torch,
transformers or radixgate's engine or gateway.
"""

from __future__ import annotations

from .rules import RULES
from .settings import Settings
from .violation import Violation

__all__ = ["RULES", "Settings", "Violation", "lint_source"]


def lint_source(source: str, filename: str = "<string>", settings: Settings | None = None) -> list[Violation]:
    """The violations in `source` (default rules unless `settings` says otherwise)."""
    from .checker import check_source  # on first use: `import radixgate.linter.rules` alone stays cheap

    return check_source(source, filename, settings or Settings())
