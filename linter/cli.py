"""promptlint's command line (placeholder until the promptlint issue lands)."""
import sys


def main(argv: list[str] | None = None) -> int:
    print("promptlint: not yet available", file=sys.stderr)
    return 2
