"""What a test needs from the machine: a missing tool skips the test locally and fails it on CI,
naming the install step, so a failed install can never leave CI green."""

from __future__ import annotations

import os

import pytest


def on_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def missing(what: str, install_step: str) -> None:
    """Skip (locally) or fail (on CI=true) because `what` is not installed; `install_step` fixes it."""
    message = f"{what} is not installed; install it with `{install_step}`"
    if on_ci():
        pytest.fail(f"{message}: on CI this test must run")
    pytest.skip(message)
