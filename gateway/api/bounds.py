"""Bounds on the work one request may put on threads every client shares.

- A prompt longer than the context can hold is refused by its length in characters before it is
  tokenized: no tokenizer writes a token longer than `MAX_CHARS_PER_TOKEN` characters in practice,
  so a prompt over `context_len x MAX_CHARS_PER_TOKEN` characters cannot fit, and tokenizing
  megabytes only to say so would hold a thread for seconds.
- Tokenizing and rendering the chat template run on a small pool of their own, never on the event
  loop (where they would stall every client, `/health` included) nor on asyncio's default executor
  (which `/flush_cache` and the engine bridge use).
- Stop strings are matched against every decoded token of the request: their number and length
  are capped.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from .errors import APIError

T = TypeVar("T")

MAX_CHARS_PER_TOKEN = 32  # generous: byte-level BPE vocabularies rarely go past 16
MAX_STOP_STRINGS = 64
MAX_STOP_CHARS = 1024
TEXT_THREADS = 2

_text_pool = ThreadPoolExecutor(max_workers=TEXT_THREADS, thread_name_prefix="radixgate-text")


def max_prompt_chars(context_len: int) -> int:
    return context_len * MAX_CHARS_PER_TOKEN


def check_prompt_chars(num_chars: int, context_len: int, param: str) -> None:
    """A 400 `context_length_exceeded` for a prompt too long to fit whatever its tokens."""
    limit = max_prompt_chars(context_len)
    if num_chars > limit:
        raise APIError(
            400,
            f"the prompt has {num_chars} characters; this model's context is {context_len} tokens and a token is "
            f"at most {MAX_CHARS_PER_TOKEN} characters here, so at most {limit} characters are accepted; "
            "shorten the prompt",
            param=param,
            code="context_length_exceeded",
        )


def chat_chars(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
    """The characters a chat request puts into its prompt (contents and tool definitions)."""
    contents = (m.get("content") for m in messages)
    total = sum(len(c) if isinstance(c, str) else len(json.dumps(c, default=str)) for c in contents if c)
    return total + (len(json.dumps(tools, default=str)) if tools else 0)


async def off_loop(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)` on the text pool (tokenizer and chat-template work)."""
    return await asyncio.get_running_loop().run_in_executor(_text_pool, lambda: fn(*args, **kwargs))


async def tokenize(worker: Any, text: str, *, param: str, add_special_tokens: bool = True) -> list[int]:
    """The prompt's token ids, refused by length first, tokenized off the event loop."""
    check_prompt_chars(len(text), worker.context_len, param)
    return await off_loop(worker.tokenize, text, add_special_tokens=add_special_tokens)


def check_stop(request: Any, param: str) -> None:
    """A 400 naming `param` when a request has too many stop strings or one is too long."""
    stop = getattr(request, "sampling", request).stop or ()
    if len(stop) > MAX_STOP_STRINGS:
        raise APIError(400, f"'{param}' has {len(stop)} strings; send at most {MAX_STOP_STRINGS}", param=param)
    longest = max((len(s) for s in stop), default=0)
    if longest > MAX_STOP_CHARS:
        raise APIError(
            400, f"a string in '{param}' has {longest} characters; each may have at most {MAX_STOP_CHARS}", param=param
        )
