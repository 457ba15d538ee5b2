"""What `/v1/messages` and `/v1/responses` share below their wire formats: the prompt from chat
messages, one `Job` through the chat path (admission, tenants, metrics, prompt statistics, spans),
and the answer as a list of blocks (text, or a function call), whole or as it streams.

The answer's text goes through the chat route's `ToolPlan` and `ToolStream`
(features/tool_calls.py), so tool calls are parsed or forced by grammar exactly as on
`/v1/chat/completions`; each API only writes the blocks in its own shape.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from radixgate.engine.protocol import GenerateOutput, GenerateRequest, SamplingParams

from ...diagnostics.requests import chat_prompt
from ...features.structured_output import OutputConstraint, constrain, constraint_of, precompile
from ...features.tool_calls import ToolPlan, render_messages
from ...generation import Job, collect, stream_job
from ...observe.prompt_stats import RequestTags, estimate_static_tokens
from ...state import AppState
from ...workers.worker import MIN_TOP_P, SAMPLING_EPS
from .. import bounds
from ..errors import APIError, from_engine_error
from ..middleware import disconnect_check


@dataclass(frozen=True)
class Sampling:
    """The sampling fields both APIs have, as the request sent them (None: the API's default)."""

    max_tokens: int
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stop: tuple[str, ...] = ()
    pins: tuple[tuple[int, float], ...] = ()  # (prefix tokens, ttl s): retention.py

    def params(self) -> SamplingParams:
        temperature = 1.0 if self.temperature is None else self.temperature
        top_p = 1.0 if self.top_p is None else self.top_p
        try:
            return SamplingParams(
                max_new_tokens=self.max_tokens,
                temperature=0.0 if temperature < SAMPLING_EPS else temperature,
                top_p=max(top_p, MIN_TOP_P),
                top_k=-1 if self.top_k is None else self.top_k,
                stop=list(self.stop) or None,
                cache_pins=self.pins,
            )
        except ValueError as exc:
            raise from_engine_error(exc) from None


def output_constraint(fmt: dict[str, Any] | None, plan: ToolPlan, param: str) -> OutputConstraint | None:
    """The chat route's constraint for a `response_format`-shaped `fmt` or a forced call, one at most:
    both at once is a 400 naming `param` (the API's own name for the format)."""
    if fmt is not None and plan.grammar() is not None:
        raise APIError(400, f"'{param}' and a forced tool call both constrain the output; send one", param=param)
    return constraint_of(SimpleNamespace(response_format=fmt), plan.grammar())


async def render_prompt(
    state: AppState,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    param: str,
    prefill: str = "",
    tenant: str | None = None,
) -> tuple[str, list[int]]:
    """The chat template applied to `messages` and its token ids (bounded as on chat); `prefill`
    is the start of the answer, written after the generation prompt. With `tenant` (and no prefill),
    earlier replies keep the ids they were generated as (diagnostics/history.py)."""
    bounds.check_prompt_chars(bounds.chat_chars(messages, tools) + len(prefill), state.worker.context_len, param)
    return await chat_prompt(state, render_messages, messages, tools, tenant=tenant, param=param, prefill=prefill)


async def prepare_job(
    request: Any,
    state: AppState,
    *,
    endpoint: str,
    rid: str,
    input_ids: list[int],
    sampling: Sampling,
    tags: RequestTags,
    constraint: OutputConstraint | None,
    route_hint: str | None = None,
    prompt_text: str | None = None,
    content_chars: int = 0,
    stop_param: str = "stop",
) -> Job:
    """The one job of a request, validated and admitted, its grammar compiled (a 400 if it cannot).
    `content_chars`: the messages' text, which the SDK's `static_prefix_chars` is a part of."""
    tenant = request.state.tenant
    generate = GenerateRequest(
        rid, input_ids, sampling.params(), cache_salt=state.cache_salt(tenant), route_hint=route_hint
    )
    static = estimate_static_tokens(tags.static_prefix_chars, content_chars, len(input_ids))
    job = Job(endpoint, "chat", tenant, tags, generate, static, prompt_text)
    bounds.check_stop(job.request, stop_param)
    (job,) = constrain([job], constraint)
    if constraint is not None:
        await precompile(state, job.request, tenant, disconnect_check(request))
    job.validate(state)
    state.admit(tenant, len(input_ids), endpoint)
    return job


async def run_job(state: AppState, job: Job, is_disconnected: Callable[[], Awaitable[bool]]) -> GenerateOutput:
    """The whole output (non-streaming); a client that leaves aborts it."""
    return (await collect(state, [job], is_disconnected))[0]


@dataclass
class Block:
    """One piece of the answer: `text`, or a function call (`call_id`, `name`, `arguments` as JSON text)."""

    kind: str  # "text" | "call"
    text: str = ""
    call_id: str = ""
    name: str = ""
    arguments: str = ""

    def input(self) -> dict[str, Any]:
        """The call's arguments as an object; `{}` when they do not parse (a call cut by max_tokens)."""
        try:
            value = json.loads(self.arguments or "{}")
        except json.JSONDecodeError:
            return {}
        return value if isinstance(value, dict) else {}


def answer_blocks(plan: ToolPlan, output: GenerateOutput) -> tuple[list[Block], str]:
    """The blocks of a finished output and its finish reason (`stop`, `length` or `tool_calls`)."""
    content, calls, reason = plan.result(output.text, output.finish_reason)
    blocks = [Block("text", content)] if content else []
    for call in calls:
        fn = call["function"]
        blocks.append(Block("call", call_id=call["id"], name=fn["name"], arguments=fn["arguments"]))
    return blocks, reason


@dataclass
class BlockEvent:
    """`start` (a new block: `block`), `delta` (more text or arguments of block `index`), `stop`."""

    kind: str
    index: int
    block: Block
    piece: str = ""


@dataclass
class BlockStream:
    """Turns the chat deltas of a `ToolStream` into block events, in order: a block is started,
    receives deltas and is stopped before the next one starts."""

    blocks: list[Block] = field(default_factory=list)
    is_open: bool = False
    calls: dict[int, int] = field(default_factory=dict)  # the chat delta's tool_calls index -> block index

    def _start(self, block: Block) -> list[BlockEvent]:
        events = self.close()
        self.blocks.append(block)
        self.is_open = True
        return [*events, BlockEvent("start", len(self.blocks) - 1, block)]

    def feed(self, delta: dict[str, Any]) -> list[BlockEvent]:
        events: list[BlockEvent] = []
        text = delta.get("content")
        if text:
            if not (self.is_open and self.blocks[-1].kind == "text"):
                events += self._start(Block("text"))
            self.blocks[-1].text += text
            events.append(BlockEvent("delta", len(self.blocks) - 1, self.blocks[-1], text))
        for call in delta.get("tool_calls") or []:
            fn = call.get("function") or {}
            if call["index"] not in self.calls:
                events += self._start(Block("call", call_id=call.get("id") or "", name=fn.get("name") or ""))
                self.calls[call["index"]] = len(self.blocks) - 1
            index = self.calls[call["index"]]
            piece = fn.get("arguments") or ""
            if piece:
                self.blocks[index].arguments += piece
                events.append(BlockEvent("delta", index, self.blocks[index], piece))
        return events

    def close(self) -> list[BlockEvent]:
        if not self.is_open:
            return []
        self.is_open = False
        return [BlockEvent("stop", len(self.blocks) - 1, self.blocks[-1])]


@dataclass
class StreamEnd:
    """The last item of `stream_blocks`: the finished output, its finish reason and every block."""

    output: GenerateOutput
    finish_reason: str
    blocks: list[Block]


async def stream_blocks(state: AppState, job: Job, plan: ToolPlan) -> AsyncIterator[BlockEvent | StreamEnd]:
    """The job's answer as block events, then a `StreamEnd`; errors are `APIError`s."""
    chat = plan.stream()
    blocks = BlockStream()
    async with aclosing(stream_job(state, job)) as deltas:
        async for delta in deltas:
            for piece in chat.feed(delta.text) if delta.text else []:
                for event in blocks.feed(piece):
                    yield event
            if delta.output is not None:
                pieces, reason = chat.finish(delta.output.finish_reason)
                for piece in pieces:
                    for event in blocks.feed(piece):
                        yield event
                for event in blocks.close():
                    yield event
                yield StreamEnd(delta.output, reason, blocks.blocks)
                return
    raise APIError(500, "the engine ended a stream without a result", type="server_error")
