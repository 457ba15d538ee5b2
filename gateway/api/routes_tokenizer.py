"""The tokenizer endpoints scripts and evaluation harnesses call, in vLLM's shapes:
`/tokenize`, `/detokenize` and `/tokenizer_info` (what lm-evaluation-harness's remote tokenizer
reads: `eos_token`, `bos_token`, `pad_token`, `chat_template`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..features.tool_calls import render_messages
from ..state import state_of
from . import bounds
from .errors import APIError
from .openai_requests import template_message
from .openai_schemas import ChatMessage, TokenId, refuse_lone_surrogates
from .sse import ERRORS

router = APIRouter()


class TokenizeRequest(BaseModel):
    """vLLM's two forms: `prompt` (a completion prompt) or `messages` (rendered by the chat template)."""

    model_config = ConfigDict(extra="ignore")
    _valid_unicode = model_validator(mode="before")(refuse_lone_surrogates)
    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = Field(default=None, min_length=1)
    add_special_tokens: bool | None = None  # default: True for a prompt, False for messages (as vLLM)
    add_generation_prompt: bool = True
    tools: list[dict[str, Any]] | None = None
    return_token_strs: bool = False

    @model_validator(mode="after")
    def _one_input(self) -> TokenizeRequest:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("send exactly one of 'prompt' or 'messages'")
        return self


class TokenizeResponse(BaseModel):
    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None = None


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    tokens: list[TokenId] = Field(max_length=1_000_000)


class DetokenizeResponse(BaseModel):
    prompt: str


@router.post("/tokenize", response_model=TokenizeResponse, responses=ERRORS)
async def tokenize(body: TokenizeRequest, request: Request) -> dict[str, Any]:
    state = state_of(request)
    if body.model is not None:
        state.check_model(body.model)
    worker = state.worker
    if body.messages is not None:
        messages = [template_message(m) for m in body.messages]
        bounds.check_prompt_chars(bounds.chat_chars(messages, body.tools), worker.context_len, "messages")
        text = await bounds.off_loop(_render, worker, messages, body.tools, body.add_generation_prompt)
        ids = await bounds.tokenize(worker, text, param="messages", add_special_tokens=bool(body.add_special_tokens))
    else:
        assert body.prompt is not None
        add = True if body.add_special_tokens is None else body.add_special_tokens
        ids = await bounds.tokenize(worker, body.prompt, param="prompt", add_special_tokens=add)
    strs = await bounds.off_loop(lambda: [worker.detokenize([t]) for t in ids]) if body.return_token_strs else None
    return {"count": len(ids), "max_model_len": worker.context_len, "tokens": ids, "token_strs": strs}


def _render(worker: Any, messages: list[dict[str, Any]], tools: Any, add_generation_prompt: bool) -> str:
    tokenizer = getattr(worker, "tokenizer", None)
    if add_generation_prompt or tokenizer is None or not getattr(tokenizer, "chat_template", None):
        return render_messages(worker, messages, tools)  # a 400 when the template cannot render them
    kwargs = {"tools": tools} if tools else {}
    try:
        return str(tokenizer.apply_chat_template(messages, add_generation_prompt=False, tokenize=False, **kwargs))
    except Exception as exc:  # jinja2's TemplateError and whatever a template's filters raise: the client's input
        message = f"the chat template cannot render these messages: {type(exc).__name__}: {exc}"
        raise APIError(400, message, param="messages") from None


@router.post("/detokenize", response_model=DetokenizeResponse, responses=ERRORS)
async def detokenize(body: DetokenizeRequest, request: Request) -> dict[str, Any]:
    state = state_of(request)
    if body.model is not None:
        state.check_model(body.model)
    vocab = len(getattr(state.worker, "tokenizer", None) or ())
    bad = next((t for t in body.tokens if vocab and t >= vocab), None)
    if bad is not None:
        raise APIError(400, f"token id {bad} is outside the vocabulary [0, {vocab})", param="tokens")
    return {"prompt": await bounds.off_loop(state.worker.detokenize, body.tokens)}


@router.get("/tokenizer_info", responses=ERRORS)
async def tokenizer_info(request: Request) -> dict[str, Any]:
    """The tokenizer's configuration as vLLM serves it: special tokens as strings, the chat template,
    the class name and the length limit."""
    state = state_of(request)
    tokenizer = getattr(state.worker, "tokenizer", None)
    if tokenizer is None:
        raise APIError(404, "this server has no tokenizer to describe", code="not_found")

    def text(token: Any) -> str | None:
        return None if token is None else str(token)

    return {
        "tokenizer_class": type(tokenizer).__name__,
        "eos_token": text(tokenizer.eos_token),
        "bos_token": text(tokenizer.bos_token),
        "pad_token": text(tokenizer.pad_token),
        "unk_token": text(tokenizer.unk_token),
        "chat_template": getattr(tokenizer, "chat_template", None),
        "model_max_length": state.worker.context_len,
        "vocab_size": len(tokenizer),
    }
