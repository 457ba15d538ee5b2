"""Constrained decoding in the engine: xgrammar masks per row of a batch, the grammar's end is `stop`."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from radixgate.engine import SamplingParams

BOUNDED_SCHEMA = {
    "type": "object",
    "properties": {
        "color": {"enum": ["red", "green", "blue"]},
        "ok": {"type": "boolean"},
        "n": {"type": "integer", "minimum": 0, "maximum": 99},
        "name": {"type": "string", "maxLength": 16},
    },
    "required": ["color", "ok", "n", "name"],
    "additionalProperties": False,
}
PHONE = r"[0-9]{3}-[0-9]{4}"


@pytest.fixture(scope="module")
def engine():
    """One engine for the module (loading one takes seconds); it must end idle and leak-free."""
    from radixgate.engine import Engine, EngineConfig

    engine = Engine(EngineConfig(max_total_tokens=16384))
    yield engine
    try:
        engine.check_idle_invariant()
    finally:
        engine.shutdown()


def test_regex_and_schema_rows_share_a_batch_with_free_rows(engine) -> None:
    prompts = [f"Item {i}: write something" for i in range(6)]
    free = SamplingParams(max_new_tokens=8, temperature=0.0, ignore_eos=True)
    alone = engine.generate(prompts=prompts[:2], sampling=free)
    params = [free, free] + [SamplingParams(max_new_tokens=16, temperature=1.0, seed=i, regex=PHONE) for i in range(2)]
    params += [SamplingParams(max_new_tokens=64, temperature=1.0, json_schema=json.dumps(BOUNDED_SCHEMA))] * 2
    outs = engine.generate(prompts=prompts, sampling=params)
    # unconstrained rows are untouched by their neighbours' masks
    assert [o.token_ids for o in outs[:2]] == [o.token_ids for o in alone]
    for out in outs[2:4]:
        assert re.fullmatch(PHONE, out.text), out.text
        assert out.finish_reason == "stop"
    for out in outs[4:]:
        assert out.finish_reason == "stop", out.text
        jsonschema.validate(json.loads(out.text), BOUNDED_SCHEMA)
        assert "\n" not in out.text  # compact JSON by default


def test_compiled_once_per_schema_and_prefix_cache_still_hits(engine) -> None:
    sampling = SamplingParams(max_new_tokens=16, temperature=1.0, regex="(yes|no)")
    prompt = "A long shared question that the radix cache should keep between two requests: yes or no?"
    compiled_before = engine.grammars.num_compiled
    first = engine.generate(prompts=prompt, sampling=sampling)[0]
    second = engine.generate(prompts=prompt, sampling=sampling)[0]
    assert engine.grammars.num_compiled == compiled_before + 1
    assert first.text in ("yes", "no") and second.text in ("yes", "no")
    assert second.cached_tokens >= second.prompt_tokens - 1


@pytest.mark.parametrize(
    "kwargs, reason",
    [
        ({"regex": "[0-9"}, "Unclosed"),
        ({"json_schema": "{not json"}, "json_schema cannot be compiled"),
        ({"json_schema": json.dumps({"$ref": "#/definitions/missing"})}, "missing"),
        ({"ebnf": "root ::= undefined_rule"}, "undefined_rule"),
    ],
)
def test_uncompilable_grammar_is_a_value_error_saying_why(engine, kwargs, reason) -> None:
    with pytest.raises(ValueError, match=reason):
        engine.generate(prompts="hi", sampling=SamplingParams(max_new_tokens=4, **kwargs))


def test_sampling_params_take_one_grammar_and_no_ignore_eos() -> None:
    with pytest.raises(ValueError, match="at most one"):
        SamplingParams(regex="a", ebnf='root ::= "a"')
    with pytest.raises(ValueError, match="ignore_eos"):
        SamplingParams(regex="a", ignore_eos=True)
    with pytest.raises(ValueError, match="min_new_tokens"):
        SamplingParams(regex="a", min_new_tokens=2)
    assert SamplingParams(json_schema="{}").grammar_key == ("json_schema", "{}", False)
    assert SamplingParams(json_schema="{}", json_any_whitespace=True).grammar_key == ("json_schema", "{}", True)


def test_bounded_json_strings_exclude_control_characters(engine) -> None:
    key = ("json_schema", json.dumps(BOUNDED_SCHEMA), False)
    prefix = '{"color": "red", "ok": true, "n": 7, "name": "a'
    assert engine.grammars.new_matcher(key).accept_string(prefix + 'b"}')
    assert not engine.grammars.new_matcher(key).accept_string(prefix + '\tb"}')
