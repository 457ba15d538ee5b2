"""Where in the application a prompt was built or sent: the first stack frame outside the SDK.

Both `Prompt` (its default template id) and the clients (`prompt_source` metadata) name the
user's line, never the SDK's, so the gateway's statistics and promptlint point at code the
developer can change.
"""

from __future__ import annotations

import asyncio
import os
import sys
import warnings
from types import FrameType

_SDK_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
# A coroutine run by asyncio.run or gather has the event loop as its caller; skip to the user's line.
_ASYNCIO_DIR = os.path.dirname(os.path.abspath(asyncio.__file__)) + os.sep
_SKIPPED = (_SDK_DIR, _ASYNCIO_DIR)


def _user_frame(skipped: tuple[str, ...] = _SKIPPED) -> FrameType | None:
    """The innermost frame whose file is under none of the `skipped` folders (nor a frozen module)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        if not filename.startswith(skipped) and not frame.f_code.co_filename.startswith("<frozen"):
            return frame
        frame = frame.f_back
    return None


def _display_path(filename: str) -> str:
    """`filename` relative to the working directory when it lies below it, with forward slashes."""
    path = os.path.abspath(filename)
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive on Windows
        rel = path
    if not rel.startswith(".."):
        path = rel
    return path.replace(os.sep, "/")


def call_site() -> str:
    """``path:line`` of the innermost caller outside radixgate's SDK, or ``"<unknown>"``."""
    frame = _user_frame()
    if frame is None:
        return "<unknown>"
    return f"{_display_path(frame.f_code.co_filename)}:{frame.f_lineno}"


def warn_at_call_site(message: str, category: type[Warning]) -> None:
    """Issue a warning attributed to the user's line, so the usual once-per-location filter applies there."""
    frame = _user_frame()
    if frame is None:
        warnings.warn(message, category, stacklevel=2)
        return
    registry = frame.f_globals.setdefault("__warningregistry__", {})
    warnings.warn_explicit(
        message,
        category,
        frame.f_code.co_filename,
        frame.f_lineno,
        module=frame.f_globals.get("__name__", "<unknown>"),
        registry=registry,
    )
