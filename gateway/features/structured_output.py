"""What a request asks its output to match, in every dialect clients speak, as one `OutputConstraint`.

- OpenAI: `response_format` `{"type": "json_object"}` or `{"type": "json_schema", "json_schema": {"schema": ..}}`.
- vLLM: `structured_outputs` `{"json" | "regex" | "choice" | "grammar" | "json_object": ..}` and the
  older `guided_json`, `guided_regex`, `guided_choice`, `guided_grammar`.
- SGLang: `regex`, `json_schema`, `ebnf` (in `/generate`'s `sampling_params`, and as extras on the
  OpenAI endpoints).

JSON is compact by default (one space after `:` and `,`, no newlines), as OpenAI's structured
outputs are; `json_any_whitespace: true` (or vLLM's `disable_any_whitespace: false`) allows any.
The engine compiles the grammar (xgrammar); `precompile` does it before the request is admitted,
so a schema it cannot compile is a 400. Compiles are bounded work:

- caps, checked before anything compiles (a 400 naming the cap): the grammar's size, a schema's
  nesting depth and enum values, a choice list's length. Compile time grows much faster than
  linearly with nesting; under the depth cap a schema compiles in tens of milliseconds;
- a pool of `GRAMMAR_THREADS` threads of its own (never asyncio's default executor, which
  `/flush_cache` and the engine bridge share), at most `MAX_QUEUED_COMPILES` waiting (503 beyond),
  and at most `max_grammar_compiles_per_tenant` distinct grammars per tenant (429 beyond; requests
  sending a grammar already compiling wait for that compile);
- a deadline (`grammar_compile_timeout_s`: a 400 saying to simplify the grammar) and the client's
  disconnect: a compile still queued is cancelled. xgrammar cannot be interrupted once it runs, so
  a running compile finishes in its thread; its tenant's slot stays taken until it does, so no
  tenant can pile up uninterruptible work, and the pool bounds everyone's together. (Compiling in a
  killable subprocess would cost a process start and a tokenizer load per kill, and the compiled
  grammar would still have to be built again inside the engine.)
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ..api.errors import APIError, from_engine_error

JSON_OBJECT_SCHEMA = '{"type": "object"}'
MAX_GRAMMAR_CHARS = 128 * 1024
MAX_SCHEMA_DEPTH = 64  # JSON nesting of the schema document (an object property is two levels)
MAX_ENUM_VALUES = 1024  # over the whole schema
MAX_CHOICES = 1024
GRAMMAR_THREADS = 2
MAX_QUEUED_COMPILES = 8
POLL_S = 0.1

_pool = ThreadPoolExecutor(max_workers=GRAMMAR_THREADS, thread_name_prefix="radixgate-grammar")
_slots_lock = threading.Lock()  # guards AppState.grammar_compiles and _num_compiles
_num_compiles = 0  # queued or running in _pool, every app together
_compiling: dict[Any, list[Any]] = {}  # grammar key -> [its compile's future, requests waiting for it]


@dataclass(frozen=True)
class OutputConstraint:
    """At most one of the three is set (`SamplingParams`' names)."""

    json_schema: str | None = None
    regex: str | None = None
    ebnf: str | None = None
    json_any_whitespace: bool = False

    def fields(self) -> dict[str, Any]:
        """Keyword arguments for `SamplingParams`."""
        return {
            "json_schema": self.json_schema,
            "regex": self.regex,
            "ebnf": self.ebnf,
            "json_any_whitespace": self.json_any_whitespace,
        }


def _schema_text(schema: Any, param: str) -> str:
    if isinstance(schema, str):
        _check_size(schema, param)
        try:
            schema = json.loads(schema)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise APIError(400, f"'{param}' is not valid JSON: {exc}", param=param) from None
    if not isinstance(schema, dict):
        raise APIError(400, f"'{param}' must be a JSON schema object", param=param)
    _check_schema(schema, param)
    text = json.dumps(schema)
    _check_size(text, param)
    return text


def _check_size(text: str, param: str) -> None:
    if len(text) > MAX_GRAMMAR_CHARS:
        raise APIError(
            400, f"'{param}' has {len(text)} characters; at most {MAX_GRAMMAR_CHARS} are accepted", param=param
        )


def _check_schema(schema: dict[str, Any], param: str) -> None:
    """The depth and enum caps, walked without recursion (a deep document must not overflow the stack)."""
    stack: list[tuple[Any, int]] = [(schema, 1)]
    num_enum = 0
    while stack:
        node, depth = stack.pop()
        if depth > MAX_SCHEMA_DEPTH:
            raise APIError(
                400,
                f"'{param}' nests deeper than {MAX_SCHEMA_DEPTH} levels; flatten it (an object property is two levels)",
                param=param,
                code="schema_too_deep",
            )
        if isinstance(node, dict):
            enum = node.get("enum")
            num_enum += len(enum) if isinstance(enum, list) else 0
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
    if num_enum > MAX_ENUM_VALUES:
        raise APIError(
            400, f"'{param}' has {num_enum} enum values; at most {MAX_ENUM_VALUES} are accepted", param=param
        )


def choice_grammar(choices: Any, param: str) -> str:
    """EBNF for exactly one of the strings in `choices`."""
    if not isinstance(choices, list) or not choices or not all(isinstance(c, str) for c in choices):
        raise APIError(400, f"'{param}' must be a non-empty list of strings", param=param)
    if len(choices) > MAX_CHOICES:
        raise APIError(400, f"'{param}' has {len(choices)} choices; at most {MAX_CHOICES} are accepted", param=param)
    grammar = "root ::= " + " | ".join(json.dumps(c) for c in choices)
    _check_size(grammar, param)
    return grammar


def _from_response_format(fmt: dict[str, Any]) -> tuple[str, str] | None:
    kind = fmt.get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        return "json_schema", JSON_OBJECT_SCHEMA
    if kind == "json_schema":
        spec = fmt.get("json_schema")
        if not isinstance(spec, dict) or "schema" not in spec:
            raise APIError(
                400,
                "response_format json_schema needs 'json_schema': {'name': .., 'schema': {..}}",
                param="response_format",
            )
        return "json_schema", _schema_text(spec["schema"], "response_format.json_schema.schema")
    raise APIError(
        400,
        f"response_format type {kind!r} is not supported: use text, json_object or json_schema",
        param="response_format",
    )


def _from_structured_outputs(spec: dict[str, Any]) -> tuple[str, str] | None:
    param = "structured_outputs"
    if spec.get("json") is not None:
        return "json_schema", _schema_text(spec["json"], f"{param}.json")
    if spec.get("regex") is not None:
        return "regex", str(spec["regex"])
    if spec.get("choice") is not None:
        return "ebnf", choice_grammar(spec["choice"], f"{param}.choice")
    if spec.get("grammar") is not None:
        return "ebnf", str(spec["grammar"])
    if spec.get("json_object"):
        return "json_schema", JSON_OBJECT_SCHEMA
    return None


def constraint_of(body: Any, extra: tuple[str, str] | None = None) -> OutputConstraint | None:
    """The one constraint a request body asks for (OpenAI, vLLM or SGLang fields), or None.
    `extra` is one the route adds itself (a forced tool call). Two at once is a 400."""
    found: dict[str, tuple[str, str]] = {}
    fmt = getattr(body, "response_format", None)
    if fmt and (got := _from_response_format(fmt)):
        found["response_format"] = got
    structured = getattr(body, "structured_outputs", None)
    if structured and (got := _from_structured_outputs(structured)):
        found["structured_outputs"] = got
    if getattr(body, "guided_json", None) is not None:
        found["guided_json"] = ("json_schema", _schema_text(body.guided_json, "guided_json"))
    if getattr(body, "guided_regex", None) is not None:
        found["guided_regex"] = ("regex", body.guided_regex)
    if getattr(body, "guided_choice", None) is not None:
        found["guided_choice"] = ("ebnf", choice_grammar(body.guided_choice, "guided_choice"))
    if getattr(body, "guided_grammar", None) is not None:
        found["guided_grammar"] = ("ebnf", body.guided_grammar)
    for kind in ("json_schema", "regex", "ebnf"):
        value = getattr(body, kind, None)
        if value is not None:
            found[kind] = (kind, _schema_text(value, kind) if kind == "json_schema" else value)
    if extra is not None:
        found["tool_choice"] = extra
    if not found:
        return None
    if len(found) > 1:
        names = " and ".join(f"'{name}'" for name in found)
        raise APIError(400, f"{names} both constrain the output; send one of them", param=next(iter(found)))
    ((kind, source),) = found.values()
    _check_size(source, next(iter(found)))
    any_whitespace = bool(getattr(body, "json_any_whitespace", False))
    if structured and structured.get("disable_any_whitespace") is False:
        any_whitespace = True
    return OutputConstraint(**{kind: source}, json_any_whitespace=any_whitespace)


async def precompile(
    state: Any, request: Any, tenant: str, is_disconnected: Callable[[], Awaitable[bool]] | None = None
) -> None:
    """Validates (and so compiles the grammar of) a constrained request on the grammar pool: the
    engine caches the compiled grammar, and the route's own validation then finds it ready."""
    key = request.sampling.grammar_key
    if key is None:
        return
    future = _compile(state, request, key, tenant)
    waiting = asyncio.wrap_future(future)
    loop = asyncio.get_running_loop()
    timeout = state.config.grammar_compile_timeout_s
    deadline = loop.time() + timeout
    try:
        while not waiting.done():
            left = deadline - loop.time()
            if left <= 0:
                raise APIError(
                    400,
                    f"the {key[0]} took longer than {timeout:g} s to compile; simplify it (fewer alternatives, "
                    "shorter repetitions, less nesting)",
                    param=key[0],
                    code="grammar_too_complex",
                )
            await asyncio.wait({waiting}, timeout=min(POLL_S, left))
            if not waiting.done() and is_disconnected is not None and await is_disconnected():
                raise APIError(499, "the client closed the connection", code="client_closed_request")
    finally:
        _leave(key, future)  # the last one waiting gone (timed out, left, cancelled): a queued compile never starts
    try:
        waiting.result()
    except ValueError as exc:
        raise from_engine_error(exc) from None


def _compile(state: Any, request: Any, key: Any, tenant: str) -> Future[None]:
    """The compile of `key` on the pool: the one already queued or running (requests that send the
    same grammar at once wait for one compile, on one slot of the first sender), else a new one on a
    slot of this tenant's."""
    with _slots_lock:
        shared = _compiling.get(key)
        if shared is not None and not shared[0].cancelled():
            shared[1] += 1
            return shared[0]
    release = _take_slot(state, tenant)
    try:
        future = _pool.submit(state.worker.validate, request)
    except BaseException:
        release()
        raise
    with _slots_lock:
        _compiling[key] = [future, 1]

    def done(_: Future[None]) -> None:
        with _slots_lock:
            if _compiling.get(key, [None])[0] is future:
                del _compiling[key]
        release()

    future.add_done_callback(done)
    return future


def _leave(key: Any, future: Future[None]) -> None:
    """One waiter of a compile is gone; with none left, a compile still queued is cancelled."""
    with _slots_lock:
        shared = _compiling.get(key)
        if shared is None or shared[0] is not future:
            return
        shared[1] -= 1
        if shared[1] > 0:
            return
    future.cancel()


def _take_slot(state: Any, tenant: str) -> Callable[[], None]:
    """One of the tenant's compile slots and a place in the pool's queue, or a 429 / 503."""
    global _num_compiles
    limit = state.config.max_grammar_compiles_per_tenant
    with _slots_lock:
        mine = state.grammar_compiles.get(tenant, 0)
        if mine >= limit:
            raise APIError(
                429,
                f"you have {mine} grammar compiles running (limit {limit}); wait for them, or reuse a schema "
                "(a compiled one is cached)",
                code="too_many_compiles",
                headers={"Retry-After": "1"},
            )
        if _num_compiles >= MAX_QUEUED_COMPILES:
            raise APIError(
                503,
                "the server is busy compiling grammars; retry shortly",
                code="grammar_pool_full",
                headers={"Retry-After": "1"},
            )
        state.grammar_compiles[tenant] = mine + 1
        _num_compiles += 1
    is_released = False

    def release() -> None:
        global _num_compiles
        nonlocal is_released
        with _slots_lock:
            if is_released:
                return
            is_released = True
            _num_compiles -= 1
            left = state.grammar_compiles.get(tenant, 1) - 1
            if left:
                state.grammar_compiles[tenant] = left
            else:
                state.grammar_compiles.pop(tenant, None)

    return release


def constrain(jobs: list[Any], constraint: OutputConstraint | None) -> list[Any]:
    """The route's jobs with the constraint on each request."""
    if constraint is None:
        return jobs
    fields = constraint.fields()
    try:
        return [
            dataclasses.replace(
                job,
                request=dataclasses.replace(job.request, sampling=dataclasses.replace(job.request.sampling, **fields)),
            )
            for job in jobs
        ]
    except ValueError as exc:  # SamplingParams refuses the combination (a grammar with min_tokens, say)
        raise from_engine_error(exc) from None
