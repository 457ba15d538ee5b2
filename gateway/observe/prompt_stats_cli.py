"""`radixgate stats --url URL`: print a server's `/v1/prompt_stats` as JSON (for promptlint, offline)."""

from __future__ import annotations

import argparse
import json
import os
import sys

import httpx


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="radixgate stats",
        description="Print a radixgate server's per-template hit "
        "statistics as JSON: radixgate stats --url http://127.0.0.1:30000 > stats.json",
    )
    p.add_argument("--url", default="http://127.0.0.1:30000", help="the server's base URL")
    p.add_argument(
        "--api-key", default=os.environ.get("RADIXGATE_API_KEY"), help="bearer key (default: $RADIXGATE_API_KEY)"
    )
    p.add_argument("--timeout", type=float, default=10.0)
    args = p.parse_args(argv)
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    url = args.url.rstrip("/") + "/v1/prompt_stats"
    try:
        response = httpx.get(url, headers=headers, timeout=args.timeout)
    except httpx.HTTPError as exc:
        print(f"radixgate stats: cannot reach {url}: {exc}", file=sys.stderr)
        return 2
    if response.status_code != 200:
        print(f"radixgate stats: {url} answered {response.status_code}: {response.text[:300]}", file=sys.stderr)
        return 2
    json.dump(response.json(), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
