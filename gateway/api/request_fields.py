"""Every request field radixgate knows, per route, and what it does with it: the one catalog that
the routes check requests against and that `radixgate bench field-table` writes into
docs/gateway.md (together with the pinned `openai` package's own field lists, so a field OpenAI adds
shows up as missing here instead of being dropped silently).

- `honoured`: changes the answer or its shape as the API documents it.
- `accepted`: taken, and by its definition never changes the answer (an end-user id, routing hints).
- `400`: known but not implemented: any value other than a neutral one (`null`, the API's default)
  is refused with a 400 that names the field. Never ignored.

A top-level field in no list is ignored with a warning in the log on the OpenAI routes and on
`/generate` (as vLLM does); a key of `/generate`'s `sampling_params` in no list is a 400, as SGLang
answers.

SGLang's names are copied from sglang 0.5.23 (`pip download sglang==0.5.23 --no-deps`):
`SamplingParams` in sglang/srt/sampling/sampling_params.py (its API fields, lines 149-181) and
`GenerateReqInput` in sglang/srt/managers/io_struct.py.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import APIError

HONOURED, ACCEPTED, REJECTED = "honoured", "accepted", "400"
logger = logging.getLogger("radixgate.gateway")


@dataclass(frozen=True)
class FieldRule:
    status: str
    note: str = ""
    neutral: tuple[Any, ...] = (None,)  # for 400 fields: values taken as "not asked for"
    example: Any = None  # a value that changes the answer (honoured) or is refused (400); None: not walked


def _h(note: str, example: Any = None) -> FieldRule:
    return FieldRule(HONOURED, note, example=example)


def _a(note: str) -> FieldRule:
    return FieldRule(ACCEPTED, note)


def _r(note: str, example: Any, *neutral: Any) -> FieldRule:
    return FieldRule(REJECTED, note, (None, *neutral), example)


# SGLang's PD fields (api/bootstrap_fields.py); a router sends them to a --disaggregation-mode pair.
_BOOTSTRAP: dict[str, FieldRule] = {
    "bootstrap_host": _h("PD: the prefill worker's host (worker key, registered prefill only)"),
    "bootstrap_port": _h("PD: the prefill worker's bootstrap port"),
    "bootstrap_room": _h("PD: pairs the prefill and decode copies of one request"),
    "bootstrap_pair_key": _r("one prefill per request: rooms pair the roles", "k"),
}

# Shared by chat and completions (OpenAI's fields, then the vLLM/SGLang extensions radixgate serves).
_SAMPLING: dict[str, FieldRule] = {
    "model": _h("must name the served model (404 otherwise)"),
    "max_tokens": _h("output limit", 1),
    "temperature": _h("0 is greedy", 1.5),
    "top_p": _h("nucleus sampling", 0.05),
    "n": _h("choices per prompt", 2),
    "stream": _h("server-sent events", True),
    "stream_options": _h("`include_usage`"),
    "stop": _h("stop strings", "K"),
    "seed": _h("reproducible sampling (choice i uses seed + i)", 3),
    "frequency_penalty": _h("vLLM's semantics, on raw logits", 2.0),
    "presence_penalty": _h("vLLM's semantics, on raw logits", 2.0),
    "logit_bias": _h("token id -> bias in [-100, 100]", {"42": 100}),
    "user": _a("end-user id; not used"),
    "metadata": _h("prompt-template tags: /v1/prompt_stats and metrics, not the text"),
    # vLLM / SGLang extensions
    "top_k": _h("vLLM/SGLang extension", 1),
    "min_p": _h("vLLM/SGLang extension", 0.9),
    "ignore_eos": _h("vLLM/SGLang extension", True),
    "stop_token_ids": _h("vLLM/SGLang extension", [42]),
    "repetition_penalty": _h("vLLM/SGLang extension (Hugging Face's semantics)", 1.5),
    "min_tokens": _h("vLLM extension: no EOS/stop token before this many", 2),
    "cache_salt": _a("vLLM extension; ignored: the salt comes from the tenant"),
    "prompt_cache_key": _a("routing hint for the prefix cache; same answer"),
    "cache_diagnostics": _h("radixgate extension: why the prompt missed the cache (`previous_response_id`)"),
    "use_beam_search": _r("vLLM extension", True, False),
    "length_penalty": _r("vLLM extension (beam search)", 0.5, 1.0),
    "include_stop_str_in_output": _r("vLLM extension", True, False),
    "bad_words": _r("vLLM extension", ["a"], []),
    "allowed_token_ids": _r("vLLM extension", [1, 2]),
    "prompt_logprobs": _r("vLLM extension; use completions `echo` + `logprobs`", 1),
    "truncate_prompt_tokens": _r("vLLM extension", 4),
    "guided_json": _h("vLLM extension: output matches the JSON schema (xgrammar)", {"type": "object"}),
    "guided_regex": _h("vLLM extension: output matches the regex", "a+"),
    "guided_choice": _h("vLLM extension: output is one of the strings", ["a", "b"]),
    "guided_grammar": _h("vLLM extension: output matches the EBNF grammar", 'root ::= "a"'),
    "structured_outputs": _h("vLLM extension: json, regex, choice, grammar, json_object", {"regex": "a+"}),
    "json_any_whitespace": _h("radixgate extension: JSON with any whitespace (default: compact)", True),
    "priority": _h("vLLM extension: with --enable-priority-scheduling (else non-zero is a 400)"),
    "return_tokens_as_token_ids": _r("vLLM extension", True, False),
    "spaces_between_special_tokens": _r("vLLM extension", False, True),
    "skip_special_tokens": _r("vLLM extension", False, True),
    "add_special_tokens": _r("vLLM extension", True, False),
    "logits_processors": _r("vLLM extension", ["x"], []),
    "kv_transfer_params": _r("vLLM extension (disaggregation)", {"x": 1}),
    **_BOOTSTRAP,
    "vllm_xargs": _r("vLLM extension", {"x": 1}),
    "regex": _h("SGLang extension: output matches the regex", "a+"),
    "ebnf": _h("SGLang extension: output matches the EBNF grammar", 'root ::= "a"'),
    "no_stop_trim": _r("SGLang extension", True, False),
    "continue_final_message": _r("vLLM extension", True, False),
    "chat_template": _r("vLLM extension", "{{ messages }}"),
    "chat_template_kwargs": _r("vLLM extension", {"enable_thinking": True}),
    "documents": _r("vLLM extension", [{"text": "x"}]),
    "mm_processor_kwargs": _r("vLLM extension", {"x": 1}),
    "request_id": _a("vLLM extension; the response id is radixgate's own"),
}

CHAT_FIELDS: dict[str, FieldRule] = {
    **_SAMPLING,
    "messages": _h("rendered with the model's chat template"),
    "max_completion_tokens": _h("output limit (wins over max_tokens); without either, up to the context", 1),
    "logprobs": _h("raw logprobs of the output tokens", True),
    "top_logprobs": _h("0-20 alternatives per token; needs `logprobs`", 3),
    "tools": _h("rendered with the chat template"),
    "tool_choice": _h("none, auto (the --tool-call-parser), required or a named tool (forced by a grammar)"),
    "parallel_tool_calls": _h("false: at most one call"),
    "response_format": _h("text, json_object, json_schema (compact JSON, xgrammar)", {"type": "json_object"}),
    "audio": _r("text only", {"voice": "alloy", "format": "wav"}),
    "modalities": _r("text only", ["audio"], ["text"]),
    "function_call": _r("deprecated functions API", "auto", "none"),
    "functions": _r("deprecated functions API", [{"name": "f"}], []),
    "moderation": _r("OpenAI moderation", {"x": 1}),
    "prediction": _r("predicted outputs", {"type": "content", "content": "x"}),
    "prompt_cache_options": _h("ttl pins the prompt ('30m', '1h', ...; cache_pins says if); other keys 400"),
    "prompt_cache_retention": _h("in_memory (1h) or 24h: caps the request's pins, pins nothing"),
    "reasoning_effort": _r("no reasoning models", "high"),
    "safety_identifier": _a("end-user id; not used"),
    "service_tier": _r("one tier", "flex", "auto", "default"),
    "store": _r("completions are not stored", True, False),
    "verbosity": _r("OpenAI reasoning models", "low", "medium"),
    "web_search_options": _r("no web search", {}),
    "echo": _r("vLLM chat extension", True, False),
    "add_generation_prompt": _r("vLLM extension", False, True),
}

COMPLETION_FIELDS: dict[str, FieldRule] = {
    **_SAMPLING,
    "prompt": _h("text, token ids, or a list of either (up to 64)"),
    "echo": _h("the prompt before the completion (with its logprobs when `logprobs` is set)", True),
    "logprobs": _h("0-5 alternatives per token, prompt tokens too with `echo`", 2),
    "suffix": _r("no insertion", "x", ""),
    "best_of": _r("use n", 2, 1),
}

# /generate, top level (SGLang's GenerateReqInput)
GENERATE_FIELDS: dict[str, FieldRule] = {
    "text": _h("one string or a list (a list answers with a list)"),
    "input_ids": _h("one list of ids or a list of lists (a list answers with a list)"),
    "sampling_params": _h("see the sampling_params table"),
    "stream": _h("server-sent events with cumulative text", True),
    "rid": _a("request id (a string, or one per prompt)"),
    "metadata": _h("prompt-template tags, as on the OpenAI routes"),
    "return_logprob": _h("meta_info gets output_token_logprobs (and input_token_logprobs)", True),
    "logprob_start_len": _h("prompt logprobs from this position on; -1: none", 0),
    "top_logprobs_num": _h("0-20 alternatives per position", 2),
    "return_text_in_logprobs": _h("token text as the third item of each logprob entry", True),
    "log_metrics": _a("metrics are always kept"),
    "cache_diagnostics": _h("radixgate extension: meta_info.cache_diagnostics (`previous_response_id`)"),
    "session_id": _r("no sessions", "s1"),
    "input_embeds": _r("token ids or text only", [[0.0]]),
    "image_data": _r("text only", "x"),
    "video_data": _r("text only", "x"),
    "audio_data": _r("text only", "x"),
    "mm_hashes": _r("text only", ["x"]),
    "mm_content_hashes": _r("text only", ["x"]),
    "use_audio_in_video": _r("text only", True, False),
    "video_config": _r("text only", {"x": 1}),
    "watermark": _r("no watermarking", {"x": 1}),
    "token_ids_logprob": _r("logprobs of chosen ids", [1]),
    "return_sampling_mask": _r("not implemented", True, False),
    "sampling_logprobs_mode": _r("logprobs are always the raw ones", "processed"),
    "return_flat_raw_top_logprobs": _r("not implemented", True, False),
    "return_flat_raw_output_top_logprobs": _r("not implemented", True, False),
    "return_hidden_states": _r("not implemented", True, False),
    "return_routed_experts": _r("no MoE models", True, False),
    "routed_experts_start_len": _r("no MoE models", 1, 0),
    "return_indexer_topk": _r("not implemented", True, False),
    "modalities": _r("text only", ["image"], []),
    "session_params": _r("no sessions", {"id": "s"}),
    "lora_path": _r("no LoRA", "x"),
    "lora_id": _r("no LoRA", "x"),
    "custom_logit_processor": _r("not implemented", "x"),
    "positional_embed_overrides": _r("not implemented", {"x": 1}),
    **_BOOTSTRAP,
    "decode_tp_size": _r("no PD disaggregation", 2),
    "routed_dp_rank": _r("the router picks the worker", 1),
    "data_parallel_rank": _r("the router picks the worker", 1),
    "disagg_prefill_dp_rank": _r("no PD disaggregation", 1),
    "routing_key": _r("use metadata.static_prefix_hash", "k"),
    "conversation_id": _r("no sessions", "c"),
    "http_worker_ipc": _r("internal to SGLang", "x"),
    "background": _r("no background requests", True, False),
    "require_reasoning": _r("no reasoning models", True, False),
    "max_thinking_tokens": _r("no reasoning models", 4),
    "priority": _h("higher first; with --enable-priority-scheduling (else non-zero is a 400)"),
    "cache_ttl": _h("pin the prompt's prefix for '5m', '1h', ... or seconds (meta_info.cache_pins says if)"),
    "cache_pins": _h("[[prefix tokens, ttl seconds], ...] pins (what a front sends its radixgate workers)"),
    "cache_credit": _h("[prefix tokens, requests]: eviction credit, kept under --radix-eviction-policy template"),
    "extra_key": _r("the cache salt comes from the tenant", "k"),
    "no_logs": _r("logging is the operator's choice", True, False),
    "custom_labels": _r("metric labels are fixed", {"x": "y"}),
}

# /generate's sampling_params (SGLang's SamplingParams API fields)
SAMPLING_PARAMS_FIELDS: dict[str, FieldRule] = {
    "max_new_tokens": _h("output limit", 1),
    "stop": _h("stop strings", "K"),
    "stop_token_ids": _h("stop token ids", [42]),
    "temperature": _h("0 is greedy", 1.5),
    "top_p": _h("nucleus sampling", 0.05),
    "top_k": _h("top-k sampling", 1),
    "min_p": _h("min-p sampling", 0.9),
    "frequency_penalty": _h("vLLM's semantics", 2.0),
    "presence_penalty": _h("vLLM's semantics", 2.0),
    "repetition_penalty": _h("Hugging Face's semantics", 1.5),
    "min_new_tokens": _h("no EOS/stop token before this many", 2),
    "n": _h("samples per prompt (the answer becomes a list)", 2),
    "ignore_eos": _h("keep going past EOS", True),
    "logit_bias": _h("token id (string) -> bias", {"42": 100}),
    "sampling_seed": _h("reproducible sampling", 3),
    "seed": _h("radixgate's alias of sampling_seed", 3),
    "skip_special_tokens": _h("special tokens in the text", False),
    "stop_regex": _r("not implemented", "a+"),
    "beam_width": _r("no beam search", 2, 1),
    "json_schema": _h("output matches the JSON schema (xgrammar; compact JSON)", '{"type": "object"}'),
    "regex": _h("output matches the regex", "a+"),
    "ebnf": _h("output matches the EBNF grammar", 'root ::= "a"'),
    "json_any_whitespace": _h("radixgate extension: JSON with any whitespace (default: compact)", True),
    "structural_tag": _r("structured output", "x"),
    "spaces_between_special_tokens": _r("not implemented", False, True),
    "no_stop_trim": _r("not implemented", True, False),
    "stream_interval": _r("every token is streamed", 4, 1),
    "custom_params": _r("no custom logit processors", {"x": 1}),
    "watermark": _r("no watermarking", {"x": 1}),
}

# Anthropic's Messages API (the `anthropic` package's MessageCreateParams); unknown fields are a 400 here.
_MESSAGES_PROMPT: dict[str, FieldRule] = {
    "model": _h("must name the served model (404 otherwise)"),
    "messages": _h("text, tool_use and tool_result blocks, rendered with the chat template"),
    "system": _h("a string or text blocks, the first (system) message"),
    "tools": _h("custom tools (server tools are a 400)"),
    "tool_choice": _h("auto, any, tool (forced by a grammar) or none"),
    "cache_control": _h("checked as Anthropic does; each breakpoint pins its prefix for its ttl (5m, 1h)"),
    "output_config": _h("format: json_schema (xgrammar); effort is a 400"),
    "thinking": _r("no extended thinking", {"type": "enabled", "budget_tokens": 1024}, {"type": "disabled"}),
    "speed": _r("one speed", "fast", "standard"),
    "user_profile_id": _r("no user profiles", "up_1"),
    "workspace_id": _r("one workspace", "ws_1"),
}
MESSAGES_FIELDS: dict[str, FieldRule] = {
    **_MESSAGES_PROMPT,
    "max_tokens": _h("output limit (required)"),
    "stop_sequences": _h("stop strings; stop_reason stop_sequence names the one that matched"),
    "stream": _h("Anthropic's server-sent events"),
    "temperature": _h("0 is greedy"),
    "top_p": _h("nucleus sampling"),
    "top_k": _h("top-k sampling"),
    "metadata": _a("user_id only (tags travel in x-radixgate-* headers); other keys are a 400"),
    "diagnostics": _h("previous_message_id: diagnostics.cache_miss_reason (gateway/diagnostics/)"),
    "service_tier": _r("one tier", "priority", "auto", "standard_only"),
    "container": _r("no code-execution containers", "cntr_1"),
    "inference_geo": _r("one region", "us"),
}
# OpenAI's Responses API (the pinned openai package's ResponseCreateParams).
RESPONSES_FIELDS: dict[str, FieldRule] = {
    "model": _h("must name the served model (404 otherwise)"),
    "input": _h("a string, or message, function_call and function_call_output items"),
    "instructions": _h("the system message"),
    "tools": _h("function tools (built-in tools are a 400)"),
    "tool_choice": _h("auto, none, required or a named function (forced by a grammar)"),
    "parallel_tool_calls": _h("false: at most one call"),
    "text": _h("format: text, json_object, json_schema (xgrammar); verbosity other than medium is a 400"),
    "max_output_tokens": _h("output limit; without it, up to the context"),
    "temperature": _h("0 is greedy"),
    "top_p": _h("nucleus sampling"),
    "stream": _h("the typed events of the Responses API"),
    "previous_response_id": _h("continues a stored response of the same tenant, reusing its token ids"),
    "store": _h("false: the response is not kept (no GET, no continuation)"),
    "metadata": _h("prompt-template tags, as on chat"),
    "prompt_cache_key": _a("routing hint for the prefix cache; same answer"),
    "prompt_cache_options": _h(
        "mode implicit only; ttl pins the prompt ('30m', '1h', ...); comparison_response_id: diagnostics"
    ),
    "prompt_cache_retention": _h("in_memory (1h) or 24h: caps the request's pins, pins nothing"),
    "stream_options": _a("include_obfuscation: no obfuscation field is sent"),
    "user": _a("end-user id; not used"),
    "safety_identifier": _a("end-user id; not used"),
    "background": _r("no background mode", True, False),
    "context_management": _r("no server-side compaction", [{"type": "compaction"}], []),
    "conversation": _r("no conversations; use previous_response_id", "conv_1"),
    "include": _r("no extra output data", ["reasoning.encrypted_content"], []),
    "max_tool_calls": _r("no built-in tools", 1),
    "moderation": _r("OpenAI moderation", {"x": 1}),
    "prompt": _r("no stored prompt templates", {"id": "pmpt_1"}),
    "reasoning": _r("no reasoning models", {"effort": "high"}, {}),
    "service_tier": _r("one tier", "flex", "auto", "default"),
    "top_logprobs": _r("no logprobs on this route", 2, 0),
    "truncation": _r("the context is never truncated", "auto", "disabled"),
}

ROUTE_TABLES: dict[str, dict[str, FieldRule]] = {
    "/v1/chat/completions": CHAT_FIELDS,
    "/v1/completions": COMPLETION_FIELDS,
    "/generate": GENERATE_FIELDS,
    "/generate sampling_params": SAMPLING_PARAMS_FIELDS,
    "/v1/messages": MESSAGES_FIELDS,
    "/v1/messages/count_tokens": _MESSAGES_PROMPT,
    "/v1/responses": RESPONSES_FIELDS,
}


def check_fields(route: str, body: Mapping[str, Any], *, unknown_is_error: bool = False, where: str = "") -> None:
    """400 for a known field radixgate does not implement set to a non-neutral value; unknown keys
    are a 400 with `unknown_is_error` (SGLang's sampling_params), else ignored with a warning."""
    table = ROUTE_TABLES[route]
    for name, value in body.items():
        rule = table.get(name)
        param = f"{where}{name}"
        if rule is None:
            if unknown_is_error:
                raise APIError(
                    400,
                    f"'{param}' is not a field of {route}; known: {', '.join(sorted(table))}",
                    param=param,
                    code="unknown_parameter",
                )
            logger.warning("%s: ignoring unknown field %r", route, name)
        elif rule.status == REJECTED and not any(_same(value, v) for v in rule.neutral):
            raise APIError(
                400,
                f"'{param}' is not supported by radixgate ({rule.note}); remove it or send a neutral value "
                f"({', '.join(repr(v) for v in rule.neutral)})",
                param=param,
                code="unsupported_parameter",
            )


def _same(value: Any, neutral: Any) -> bool:
    if isinstance(value, bool) or isinstance(neutral, bool):  # True is not 1 here
        return type(value) is type(neutral) and value == neutral
    return value == neutral
