"""A request's life inside the engine, and what the engine hands back."""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..protocol import GenerateOutput, SamplingParams, StreamDelta, TopLogprobs

__all__ = ["GenerateOutput", "StreamDelta", "TopLogprobs"]


class ReqStatus(enum.Enum):
    WAITING = "waiting"  # in the waiting queue (new, or retracted)
    RUNNING = "running"  # admitted: prefilling (possibly chunked) or decoding
    FINISHED = "finished"


CACHE_TIERS = ("device", "host", "disk", "remote")  # where a cached prefix token's KV came from


@dataclass
class Logprobs:
    """A request's logprobs as they are computed: the raw log-softmax of the model's logits (before
    penalties, biases, grammar masks and temperature). Prompt entries are indexed by prompt position
    so that recomputing a span (after a retraction) overwrites rather than appends."""

    output: list[float] = field(default_factory=list)
    output_top: list[TopLogprobs] = field(default_factory=list)
    prompt: dict[int, float] = field(default_factory=dict)
    prompt_top: dict[int, TopLogprobs] = field(default_factory=dict)


class Req:
    """Owns, while running: a lock on `last_node` (its cached prefix) and the pages in `own_pages`,
    which hold the KV of tokens [prefix_len, prefix_len + num_own_tokens) of `fill_ids`."""

    def __init__(
        self,
        rid: str,
        input_ids: list[int],
        sampling: SamplingParams,
        cache_salt: str | None = None,
        on_update: Callable[[Req, StreamDelta], None] | None = None,
    ):
        self.rid = rid
        self.origin_input_ids = list(input_ids)
        self.sampling = sampling
        self.cache_salt = cache_salt
        self.on_update = on_update
        self.output_ids: list[int] = []
        self.status = ReqStatus.WAITING
        self.finish_reason: str | None = None
        self.times: dict[str, float] = {"arrival": time.time()}
        self.queued_step = 0  # the scheduler step it first joined the waiting queue (priority aging)
        # per asked pin: (prefix tokens pinned, ttl s, None or why it was not pinned); None until resolved
        self.pin_results: list[tuple[int, float, str | None] | None] = [None] * len(sampling.cache_pins)
        # cache state; slots of fill_ids()[:num_allocated] live in row `pool_row` of the slot table
        self.pool_row: int | None = None
        self.last_node: Any = None  # radix node locked for this request's cached prefix
        self.prefix_len = 0  # tokens of fill_ids covered by last_node (page-aligned)
        self.own_pages: list[int] = []  # pages this request allocated, covering tokens from prefix_len
        self.num_allocated = 0  # tokens of fill_ids that have a slot
        self.num_computed = 0  # tokens of fill_ids whose KV is in the pool
        self.cached_tokens = 0  # prompt tokens served from cache (reported to the user)
        self.cached_tokens_by_tier = dict.fromkeys(CACHE_TIERS, 0)
        self.extend_len = 0  # tokens this step computes (set by the scheduler)
        self.result: GenerateOutput | None = None
        self.generator: Any = None  # torch.Generator for seeded sampling, made on first use
        self.logprobs = Logprobs() if sampling.return_logprob else None
        self.grammar: Any = None  # xgrammar GrammarMatcher when the output is constrained (model/grammar.py)
        # Set when this request's own sampling, grammar or detokenization failed: the engine ends it
        # alone (finish_reason "error") and the loop goes on with the others.
        self.error: str | None = None
        # detokenization state
        self.text = ""
        self.num_sent_tokens = 0
        self.num_sent_chars = 0

    def fail(self, stage: str, exc: BaseException) -> None:
        """Records the first failure of this request's per-request work (`stage`: what failed)."""
        if self.error is None:
            self.error = f"{stage} failed for this request: {type(exc).__name__}: {exc}"

    def send(self, delta: StreamDelta) -> bool:
        """Hands `delta` to the listener; False, with this request failed, when the listener raises
        (its caller's event loop is gone, say): the engine then ends this request alone."""
        assert self.on_update is not None
        try:
            self.on_update(self, delta)
        except Exception as exc:
            self.fail("delivering the stream", exc)
            return False
        return True

    def table_row(self) -> int:
        """The request's row in the slot table; it holds one from admission until its KV is released."""
        assert self.pool_row is not None, f"request {self.rid} holds no slot-table row"
        return self.pool_row

    def take_delta(self, text: str, result: GenerateOutput | None) -> StreamDelta:
        """The tokens (and their logprobs) not sent yet; marks them sent."""
        sent, self.num_sent_tokens = self.num_sent_tokens, len(self.output_ids)
        delta = StreamDelta(self.output_ids[sent:], text, result is not None, result)
        if self.logprobs is not None:
            delta.token_logprobs = self.logprobs.output[sent:]
            delta.top_logprobs = self.logprobs.output_top[sent:]
        return delta

    def fill_ids(self) -> list[int]:
        """Every token whose KV this request needs: the prompt plus what was generated so far (a new list)."""
        return self.origin_input_ids + self.output_ids

    @property
    def last_token_id(self) -> int:
        """The newest token: the one a decode step feeds to the model."""
        return self.output_ids[-1] if self.output_ids else self.origin_input_ids[-1]

    @property
    def num_tokens(self) -> int:
        return len(self.origin_input_ids) + len(self.output_ids)

    @property
    def num_uncomputed(self) -> int:
        """Tokens still to run through the model before the next token can be sampled."""
        return self.num_tokens - self.num_computed

    @property
    def tracks_text(self) -> bool:
        """Detokenized as it goes: streamed to a listener, or watched for stop strings."""
        return self.on_update is not None or bool(self.sampling.stop_strings)

    @property
    def num_matchable_tokens(self) -> int:
        """How much of `fill_ids` may come from the prefix cache: all but the last token, and with
        prompt logprobs nothing from the first position they need (their logits are recomputed)."""
        limit = self.num_tokens - 1
        if self.sampling.wants_prompt_logprobs:
            limit = min(limit, max(self.sampling.logprob_start_len, 1) - 1)
        return limit

    def output(self, text: str) -> GenerateOutput:
        lp = self.logprobs
        if lp is not None:
            start = self.sampling.logprob_start_len
            positions = range(start, len(self.origin_input_ids)) if start >= 0 else range(0)
            logprob_fields: dict[str, Any] = {
                "output_token_logprobs": list(lp.output),
                "output_top_logprobs": list(lp.output_top),
                "input_token_logprobs": [lp.prompt.get(i) for i in positions],
                "input_top_logprobs": [lp.prompt_top.get(i) for i in positions],
            }
        else:
            logprob_fields = {}
        return GenerateOutput(
            rid=self.rid,
            token_ids=list(self.output_ids),
            text=text,
            prompt_tokens=len(self.origin_input_ids),
            cached_tokens=self.cached_tokens,
            finish_reason=self.finish_reason or "abort",
            times=dict(self.times),
            cached_tokens_by_tier=dict(self.cached_tokens_by_tier),
            cache_pins=[pin_result(r, p) for r, p in zip(self.pin_results, self.sampling.cache_pins, strict=True)],
            error=self.error,
            **logprob_fields,
        )


def pin_result(result: tuple[int, float, str | None] | None, asked: tuple[int, float]) -> dict[str, Any]:
    """What the answer says about one asked pin: `pinned`, and `reason` when it was not."""
    if result is None:
        result = (0, asked[1], "the request ended before the prefix was computed")
    tokens, ttl_s, reason = result
    return {"tokens": tokens, "ttl_s": ttl_s, "pinned": reason is None, "reason": reason}


def check_request(
    input_ids: list[int], sampling: SamplingParams, vocab_size: int, context_len: int, capacity: int
) -> None:
    """Raises ValueError saying what to change when the engine cannot take this request as it is."""
    if not isinstance(sampling, SamplingParams):
        raise ValueError("sampling must be a SamplingParams")
    n = len(input_ids)
    if n == 0:
        raise ValueError("the prompt is empty: send at least one token")
    bad = next((t for t in input_ids if not isinstance(t, int) or not 0 <= t < vocab_size), None)
    if bad is not None:
        raise ValueError(f"token id {bad!r} is outside the vocabulary: ids must be integers in [0, {vocab_size})")
    if n >= context_len:
        raise ValueError(
            f"the prompt has {n} tokens but the model's context window is {context_len}: "
            f"shorten it by at least {n - context_len + 1} tokens"
        )
    if sampling.logprob_start_len >= n:
        raise ValueError(
            f"logprob_start_len={sampling.logprob_start_len} is past the prompt's {n} tokens: "
            f"give a position in [0, {n - 1}] or -1 for no prompt logprobs"
        )
    bad_bias = next((t for t in sampling.logit_bias or () if not 0 <= t < vocab_size), None)
    if bad_bias is not None:
        raise ValueError(f"logit_bias names token id {bad_bias}, outside the vocabulary [0, {vocab_size})")
    bad_stop = next((t for t in sampling.stop_token_ids or () if not 0 <= t < vocab_size), None)
    if bad_stop is not None:
        raise ValueError(f"stop_token_ids names token id {bad_stop}, outside the vocabulary [0, {vocab_size})")
    if n + 1 > capacity:
        raise ValueError(
            f"the prompt needs {n + 1} KV slots but the pool holds "
            f"{capacity}: raise max_total_tokens or shorten the prompt"
        )
