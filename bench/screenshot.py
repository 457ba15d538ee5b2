"""Screenshot the dashboard in headless Chromium after a short workload.

    python -m radixgate.bench.screenshot docs/dashboard.png            # starts its own server
    python -m radixgate.bench.screenshot out.png --url http://127.0.0.1:30000 [--api-key KEY]

Chromium is Debian's `chromium` (`apt-get install -y chromium`). The page is also dumped as
DOM, so callers can check that the charts drew points and the template table has rows.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from radixgate._wire import RequestTags
from radixgate.gateway.server_process import ServerProcess

from .blank_page import PngSummary, summarize_png

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--window-size=1280,1600",
)
MIN_INK = 0.002  # a blank page scores ~0.00002, the dashboard with data ~0.02
WORKLOAD_TEMPLATES = (
    ("support-bot", "app/bot.py:42", 60),
    ("rag-answer", "app/rag.py:17", 40),
    ("bad-timestamp-first", "app/legacy.py:88", 30),
)


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass(frozen=True)
class Capture:
    png: Path
    dom: str
    summary: PngSummary

    @property
    def num_table_rows(self) -> int:
        match = re.search(r'id="templates"[^>]*data-rows="(\d+)"', self.dom)
        return int(match.group(1)) if match else 0

    def chart_points(self) -> dict[str, int]:
        pattern = r'<canvas id="([\w-]+)" data-points="(\d+)"'
        return {m.group(1): int(m.group(2)) for m in re.finditer(pattern, self.dom)}

    @property
    def is_rendered(self) -> bool:
        return 'data-rendered="1"' in self.dom


def run_workload(base_url: str, api_key: str | None = None, rounds: int = 3, pause_s: float = 1.0) -> None:
    """A few tagged templates, one of which puts a dynamic value first (so it never hits the cache)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    with httpx.Client(base_url=base_url, headers=headers, timeout=60) as client:
        for round_index in range(rounds):
            for template, source, sentences in WORKLOAD_TEMPLATES:
                static = " ".join(f"{template} rule {i}: answer briefly and cite the policy." for i in range(sentences))
                for user in range(2):
                    question = f"user {user} asks question {round_index}"
                    prompt = (
                        f"[{time.time_ns()}] {static} {question}"
                        if template.startswith("bad")
                        else f"{static} {question}"
                    )
                    metadata = RequestTags(template, source, f"{template}-v1", len(static)).to_metadata()
                    r = client.post(
                        "/v1/completions",
                        json={
                            "model": client.get("/v1/models").json()["data"][0]["id"],
                            "prompt": prompt,
                            "max_tokens": 8,
                            "metadata": metadata,
                        },
                    )
                    r.raise_for_status()
            if round_index < rounds - 1:
                time.sleep(pause_s)


def capture(
    base_url: str, out_png: str | Path, api_key: str | None = None, budget_ms: int = 3000, timeout_s: float = 60.0
) -> Capture:
    """Screenshot and DOM of `/dashboard`; the key travels in the URL fragment, never to the server's logs."""
    chromium = find_chromium()
    if chromium is None:
        raise FileNotFoundError("chromium not found; install it with: apt-get install -y chromium")
    url = f"{base_url.rstrip('/')}/dashboard?interval_ms=500" + (f"#key={api_key}" if api_key else "")
    out_png = Path(out_png).resolve()
    out_png.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="radixgate-chromium-") as profile:
        cmd = [
            chromium,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            f"--virtual-time-budget={budget_ms}",
            f"--screenshot={out_png}",
            "--dump-dom",
            url,
        ]
        dom = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=timeout_s).stdout
    return Capture(out_png, dom, summarize_png(out_png))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m radixgate.bench.screenshot", description=__doc__.split("\n")[0])
    p.add_argument("out", nargs="?", default="docs/dashboard.png")
    p.add_argument("--url", default=None, help="an already running server (default: start one on a free port)")
    p.add_argument("--api-key", default=None)
    p.add_argument("--no-workload", action="store_true")
    args = p.parse_args(argv)
    if args.url is None:
        with ServerProcess() as server:
            return _shoot(server.base_url, args)
    return _shoot(args.url, args)


def _shoot(base_url: str, args: argparse.Namespace) -> int:
    if not args.no_workload:
        run_workload(base_url, args.api_key)
    shot = capture(base_url, args.out, args.api_key)
    print(
        f"wrote {shot.png} ({shot.summary.width}x{shot.summary.height}, ink {shot.summary.ink:.3f}); "
        f"charts {shot.chart_points()}, template rows {shot.num_table_rows}, rendered {shot.is_rendered}"
    )
    return 0 if shot.is_rendered and shot.num_table_rows > 0 and shot.summary.ink > MIN_INK else 1


if __name__ == "__main__":
    sys.exit(main())
