"""`cache_diagnostics` on a request: the field checked (400 naming it), one `JobDiagnostics` per
choice, and, when the choice finishes, its answer computed and its sequence recorded.

Every choice is recorded (so that a later request can name it or be compared with it); the answer is
computed only for the choices whose request asked. The miss counter by reason counts every request
behind workers whose cached tokens are exact: those that asked with their reason, the others
against what their tenant sent recently (`evicted` or `cold`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..api import bounds
from ..api.errors import APIError
from .compare import Locate, explain, explain_recent, miss, packed
from .history import call_key, generated_keys, kept_prompt, reply_ids
from .segments import chat_locator, raw_locator
from .store import DiagnosticsStore, Received

FIELD = "cache_diagnostics"
KEYS = ("previous_response_id",)


@dataclass(frozen=True)
class Ask:
    """What a request asked: compare with `previous_response_id`, or with recent requests (None)."""

    previous_response_id: str | None


def parse_ask(value: Any, field_name: str = FIELD, id_key: str = "previous_response_id") -> Ask | None:
    """The field's value checked: None when absent or null; a 400 naming what is wrong otherwise."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise APIError(
            400,
            f'\'{field_name}\' must be an object such as {{"{id_key}": "<id>"}} (or null for the recent requests)',
            param=field_name,
            code="invalid_value",
        )
    for key in value:
        if key != id_key:
            raise APIError(
                400,
                f"'{field_name}.{key}' is not a field of {field_name}; send only '{id_key}'",
                param=f"{field_name}.{key}",
                code="invalid_value",
            )
    previous = value.get(id_key)
    if previous is not None and not isinstance(previous, str):
        raise APIError(
            400,
            f"'{field_name}.{id_key}' must be a response id (a string) or null",
            param=f"{field_name}.{id_key}",
            code="invalid_value",
        )
    return Ask(previous)


@dataclass
class JobDiagnostics:
    """One choice's part: where it is recorded, what it asked, and (once finished) its answer."""

    response_id: str
    index: int
    ask: Ask | None
    started_seq: int
    chat: tuple[list[dict[str, Any]], list[dict[str, Any]] | None] | None = None  # messages, tools
    keep_replies: bool = False
    call_name: str | None = None  # a named tool_choice: the output is that call's arguments
    # another store's entries by id (the Responses API's, which keeps responses longer): (prompt, output) ids
    fallback: Callable[[str], tuple[list[int], list[int]] | None] | None = None
    result: dict[str, Any] | None = field(default=None)


def counts_exactly(worker: Any) -> bool:
    """Cached tokens are the engine's own (co-located or radixgate workers), not a foreign server's."""
    members = getattr(worker, "members", None)
    if members is not None:
        return all(m.kind in ("local", "radixgate") for m in members.values())
    return getattr(worker, "kind", "local") in ("local", "radixgate")


def page_size_of(worker: Any) -> int:
    config = getattr(getattr(worker, "engine", None), "config", None)
    if config is not None:
        return int(config.page_size)
    members = getattr(worker, "members", None) or {}
    sizes = [page_size_of(m.backend) for m in members.values() if m.kind == "local"]
    return max(sizes, default=1)


def finish(
    store: DiagnosticsStore,
    worker: Any,
    model: str,
    tenant: str,
    diag: JobDiagnostics,
    prompt_ids: Sequence[int],
    output_ids: Sequence[int],
    output_text: str,
    cached: int,
) -> tuple[str, int] | None:
    """Answer (into `diag.result`), record, and remember the reply. Returns (reason, missed tokens)
    for the miss counter, or None where nothing was missed or nothing can be said."""
    prompt = packed(prompt_ids)
    reason: dict[str, Any] | None
    if not counts_exactly(worker):
        reason = miss("unavailable", max(0, len(prompt_ids) - cached))
        counted = False
    else:
        counted = True
        reason = _reason(store, worker, model, tenant, diag, prompt, prompt_ids, cached)
    if diag.ask is not None:
        diag.result = {"cached_tokens": cached, "cache_miss_reason": reason}
    store.record(tenant, diag.response_id, diag.index, prompt + packed(output_ids), len(prompt_ids), model)
    if diag.keep_replies:
        key = call_key(diag.call_name, output_text) if diag.call_name else "text:" + output_text
        ids = reply_ids(list(output_ids), output_text, worker.detokenize) if key else None
        if key is not None and ids is not None:
            store.remember_reply(tenant, key, ids)
    if counted and reason is not None:
        return reason["type"], reason["cache_missed_input_tokens"]
    return None


def _reason(
    store: DiagnosticsStore,
    worker: Any,
    model: str,
    tenant: str,
    diag: JobDiagnostics,
    prompt: bytes,
    prompt_ids: Sequence[int],
    cached: int,
) -> dict[str, Any] | None:
    page_size = page_size_of(worker)
    locate: Locate = raw_locator
    is_generated: Callable[[int], bool] = lambda _: False  # noqa: E731
    if diag.chat is not None and diag.ask is not None:
        messages, tools = diag.chat
        locate = chat_locator(worker.render_chat, worker.detokenize, messages, tools, prompt_ids)

        def is_generated(i: int) -> bool:
            return any(store.reply(tenant, key) is not None for key in generated_keys(messages[i]))

    if diag.ask is None or diag.ask.previous_response_id is None:
        recent = [r.ids for r in store.recent(tenant, diag.started_seq, exclude=diag.response_id)]
        return explain_recent(prompt, recent, cached, page_size, locate if diag.ask is not None else raw_locator)
    compared = store.get(tenant, diag.ask.previous_response_id, diag.index)
    if compared is None and diag.fallback is not None and (kept := diag.fallback(diag.ask.previous_response_id)):
        compared = Received(packed(kept[0]) + packed(kept[1]), len(kept[0]), model, 0)
    if compared is None:
        return miss("previous_response_not_found", max(0, len(prompt_ids) - cached))
    if compared.model != model:
        return miss("model_changed", max(0, len(prompt_ids) - cached), 0, 0 if diag.chat else None)
    return explain(prompt, compared.ids, cached, page_size, locate, is_generated)


def with_diagnostics(
    state: Any,
    jobs: list[Any],
    ask: Ask | None,
    ids: Sequence[tuple[str, int]],
    chat: tuple[list[dict[str, Any]], list[dict[str, Any]] | None] | None = None,
    call_name: str | None = None,
) -> list[Any]:
    """Each job with its `JobDiagnostics`; `ids[i]`: (response id, choice index) it is recorded under."""
    seq = state.diagnostics.last_seq
    return [
        replace(job, diagnostics=JobDiagnostics(rid, index, ask, seq, chat, chat is not None, call_name))
        for job, (rid, index) in zip(jobs, ids, strict=True)
    ]


def asked(jobs: Sequence[Any]) -> bool:
    return any(j.diagnostics is not None and j.diagnostics.ask is not None for j in jobs)


def result_of(job: Any) -> dict[str, Any] | None:
    return job.diagnostics.result if job.diagnostics is not None else None


def add_to_body(body: dict[str, Any], jobs: Sequence[Any]) -> dict[str, Any]:
    """A whole answer: top-level `cache_diagnostics` (the first choice's), and each choice's own when
    there are several."""
    if asked(jobs):
        body["cache_diagnostics"] = result_of(jobs[0])
        if len(jobs) > 1:
            for choice in body.get("choices", []):
                choice["cache_diagnostics"] = result_of(jobs[choice["index"]])
    return body


def add_to_chunk(body: dict[str, Any], jobs: Sequence[Any] | None) -> None:
    """A streamed chunk: the usage chunk (the last) carries `cache_diagnostics`, and with several
    choices each choice's finishing chunk carries its own."""
    if not jobs or not asked(jobs):
        return
    if body.get("usage") is not None:
        body["cache_diagnostics"] = result_of(jobs[0])
    if len(jobs) > 1:
        for choice in body["choices"]:
            if choice.get("finish_reason") is not None:
                choice["cache_diagnostics"] = result_of(jobs[choice["index"]])


async def chat_prompt(
    state: Any,
    render: Callable[[Any, list[dict[str, Any]], Any], str],
    messages: list[dict[str, Any]],
    tools: Any,
    *,
    tenant: str | None,
    param: str = "messages",
    prefill: str = "",
) -> tuple[str, list[int]]:
    """A chat prompt's text (`render` applied to the messages, then `prefill`) and its ids, both in
    one hop to the text pool. With `tenant` (and no prefill), earlier generated replies keep their
    ids (history keeping); otherwise the text is tokenized, refused by its length first (`param`)."""
    return await bounds.off_loop(_chat_prompt, state, render, messages, tools, tenant, param, prefill)


def _chat_prompt(
    state: Any, render: Callable[..., str], messages: Any, tools: Any, tenant: str | None, param: str, prefill: str
) -> tuple[str, list[int]]:
    worker = state.worker
    text = render(worker, messages, tools) + prefill
    if tenant is None or prefill:
        bounds.check_prompt_chars(len(text), worker.context_len, param)
        return text, worker.tokenize(text, add_special_tokens=False)
    bounds.check_prompt_chars(len(text), worker.context_len, "messages")
    if state.config.history_keeping and any(generated_keys(m) for m in messages):
        kept = _kept_or_none(
            worker.render_chat,
            lambda piece: worker.tokenize(piece, add_special_tokens=False),
            lambda key: state.diagnostics.reply(tenant, key),
            messages,
            tools,
            text,
        )
        if kept is not None:
            return text, kept
    return text, worker.tokenize(text, add_special_tokens=False)


def _kept_or_none(*args: Any) -> list[int] | None:
    try:
        return kept_prompt(*args)
    except Exception:  # a template that cannot render the marked messages: served as without keeping
        return None
