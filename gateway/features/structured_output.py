"""What a request asks its output to match, in every dialect clients speak, as one `OutputConstraint`.

- OpenAI: `response_format` `{"type": "json_object"}` or `{"type": "json_schema", "json_schema": {"schema": ..}}`.
- vLLM: `structured_outputs` `{"json" | "regex" | "choice" | "grammar" | "json_object": ..}` and the
  older `guided_json`, `guided_regex`, `guided_choice`, `guided_grammar`.
- SGLang: `regex`, `json_schema`, `ebnf` (in `/generate`'s `sampling_params`, and as extras on the
  OpenAI endpoints).

JSON is compact by default (one space after `:` and `,`, no newlines), as OpenAI's structured
outputs are; `json_any_whitespace: true` (or vLLM's `disable_any_whitespace: false`) allows any.
The engine compiles the grammar (xgrammar); `precompile` does it in a worker thread before the
request is admitted, so a slow compile blocks no one and a schema it cannot compile is a 400.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from ..api.errors import APIError, from_engine_error

JSON_OBJECT_SCHEMA = '{"type": "object"}'


@dataclass(frozen=True)
class OutputConstraint:
    """At most one of the three is set (`SamplingParams`' names)."""

    json_schema: str | None = None
    regex: str | None = None
    ebnf: str | None = None
    json_any_whitespace: bool = False

    def fields(self) -> dict[str, Any]:
        """Keyword arguments for `WorkRequest`."""
        return {
            "json_schema": self.json_schema,
            "regex": self.regex,
            "ebnf": self.ebnf,
            "json_any_whitespace": self.json_any_whitespace,
        }


def _schema_text(schema: Any, param: str) -> str:
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as exc:
            raise APIError(400, f"'{param}' is not valid JSON: {exc}", param=param) from None
    if not isinstance(schema, dict):
        raise APIError(400, f"'{param}' must be a JSON schema object", param=param)
    return json.dumps(schema)


def choice_grammar(choices: Any, param: str) -> str:
    """EBNF for exactly one of the strings in `choices`."""
    if not isinstance(choices, list) or not choices or not all(isinstance(c, str) for c in choices):
        raise APIError(400, f"'{param}' must be a non-empty list of strings", param=param)
    return "root ::= " + " | ".join(json.dumps(c) for c in choices)


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
    any_whitespace = bool(getattr(body, "json_any_whitespace", False))
    if structured and structured.get("disable_any_whitespace") is False:
        any_whitespace = True
    return OutputConstraint(**{kind: source}, json_any_whitespace=any_whitespace)


async def precompile(worker: Any, request: Any) -> None:
    """Validates (and so compiles the grammar of) a constrained request in a worker thread: the
    engine caches the compiled grammar, and the route's own validation then finds it ready."""
    if request.json_schema is None and request.regex is None and request.ebnf is None:
        return
    try:
        await asyncio.to_thread(worker.validate, request)
    except ValueError as exc:
        raise from_engine_error(exc) from None


def constrain(jobs: list[Any], constraint: OutputConstraint | None) -> list[Any]:
    """The route's jobs with the constraint on each request."""
    if constraint is None:
        return jobs
    fields = constraint.fields()
    return [dataclasses.replace(job, request=dataclasses.replace(job.request, **fields)) for job in jobs]
