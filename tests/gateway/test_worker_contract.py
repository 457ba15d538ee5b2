"""The gateway↔engine contract at each worker kind: every `SamplingParams` field crosses the native
encoding and each worker's request body or is declared unsupported by that kind; the pool never sends
a request to a member that would drop part of it; and a `--dp-size`-style pool extended with a
remote radixgate worker gives the co-located engine's tokens and logprobs on every member."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from in_thread_server import serve_in_thread

from radixgate.engine.protocol import TOP_LEVEL_FIELDS, GenerateRequest, SamplingParams
from radixgate.gateway.api.errors import APIError
from radixgate.gateway.app import create_app
from radixgate.gateway.config import GatewayConfig
from radixgate.gateway.workers.pool import WorkerPool
from radixgate.gateway.workers.remote import OpenAIWorker, RadixgateWorker
from radixgate.gateway.workers.worker import LocalWorker, asked_fields

# One value per field that differs from its default (a new field fails the test until it has one).
EXAMPLES: dict[str, Any] = {
    "max_new_tokens": 7,
    "temperature": 0.5,
    "top_p": 0.9,
    "top_k": 5,
    "min_p": 0.1,
    "seed": 11,
    "stop": ["END"],
    "stop_token_ids": [42],
    "ignore_eos": True,
    "frequency_penalty": 1.5,
    "presence_penalty": -0.5,
    "repetition_penalty": 1.2,
    "logit_bias": {42: 5.0},
    "min_new_tokens": 2,
    "return_logprob": True,
    "top_logprobs_num": 3,
    "logprob_start_len": 0,
    "skip_special_tokens": False,
    "json_schema": '{"type": "object"}',
    "regex": "a+",
    "ebnf": 'root ::= "a"',
    "json_any_whitespace": True,
    "priority": 2,
    "cache_pins": ((4, 60.0),),
    "cache_credit": (4, 8),
}


def _one_field_set() -> Iterator[tuple[str, SamplingParams]]:
    for field in dataclasses.fields(SamplingParams):
        yield field.name, SamplingParams(**{field.name: EXAMPLES[field.name]})


def test_every_field_has_an_example() -> None:
    assert set(EXAMPLES) == {f.name for f in dataclasses.fields(SamplingParams)}


def test_every_field_round_trips_through_the_native_encoding_and_the_radixgate_body() -> None:
    worker = RadixgateWorker("http://127.0.0.1:1")
    assert worker.unsupported_fields == frozenset()  # a remote radixgate worker is a full engine
    for name, sampling in _one_field_set():
        assert asked_fields(sampling) == {name}
        assert SamplingParams.from_native(json.loads(json.dumps(sampling.to_native()))) == sampling, name
        body = json.loads(json.dumps(worker.body(GenerateRequest("r", [1, 2], sampling))))
        assert SamplingParams.from_native(body) == sampling, name
    native = SamplingParams().to_native()
    assert set(native) == {"sampling_params", *TOP_LEVEL_FIELDS}  # SGLang's places: logprobs, priority at the top


def test_an_openai_worker_sends_each_field_or_declares_it_unsupported() -> None:
    worker = OpenAIWorker("http://127.0.0.1:1", None, lambda text: [])
    all_fields = {f.name for f in dataclasses.fields(SamplingParams)}
    assert set(worker.SENT_FIELDS) | worker.unsupported_fields == all_fields
    assert not set(worker.SENT_FIELDS) & worker.unsupported_fields
    for name, sampling in _one_field_set():
        if name in worker.unsupported_fields:
            continue
        body = worker.body(GenerateRequest("r", [1, 2], sampling))
        assert body[worker.SENT_FIELDS[name]] == EXAMPLES[name], name


def _request(**sampling: Any) -> GenerateRequest:
    return GenerateRequest("contract-1", [5, 6, 7], SamplingParams(max_new_tokens=2, **sampling))


def test_a_field_no_member_honours_is_a_400_naming_it(worker: LocalWorker) -> None:
    pool = WorkerPool(worker.tokenizer, "tiny")
    pool.add_remote("openai+http://127.0.0.1:9")
    with pytest.raises(ValueError, match="frequency_penalty.*not honoured by any worker"):
        pool.validate(_request(frequency_penalty=1.0))
    pool.validate(_request(temperature=0.0))  # what the foreign worker is sent passes
    pool.validate(_request(logit_bias={}))  # an empty mapping asks for nothing


def test_a_request_goes_only_to_members_that_honour_all_of_it(worker: LocalWorker) -> None:
    """With the co-located engine down, a penalised request is a 503 with Retry-After: it is never
    handed to the foreign member that would drop the penalty (nothing listens there: trying it would
    name it in the error)."""
    pool = WorkerPool(worker.tokenizer, "tiny")
    local = pool.add_local(worker)
    foreign = pool.add_remote("openai+http://127.0.0.1:9")
    foreign.is_healthy = True
    pool.validate(_request(frequency_penalty=1.0))  # the local member declares it
    local.is_healthy = False

    async def first_error() -> APIError:
        with pytest.raises(APIError) as caught:
            async for _ in pool.stream(_request(frequency_penalty=1.0)):
                pass
        await pool.stop()
        return caught.value

    error = asyncio.run(first_error())
    assert error.status == 503 and error.headers == {"Retry-After": "1"}
    assert foreign.num_requests == 0 and local.num_requests == 0


@pytest.fixture(scope="module")
def remote_engine() -> Iterator[LocalWorker]:
    from radixgate.engine import Engine, EngineConfig

    engine = Engine(EngineConfig(model_path="tiny", max_total_tokens=4096))
    yield LocalWorker(engine)
    engine.shutdown()


def test_a_mixed_pool_gives_the_co_located_tokens_on_every_member(
    worker: LocalWorker, remote_engine: LocalWorker
) -> None:
    """`--dp-size` extended by `POST /workers` with a radixgate worker: penalties, min_tokens and
    logprobs reach the remote member too (they were dropped there), so each member answers alike."""
    pool = WorkerPool(worker.tokenizer, "tiny", policy="round_robin", health_check_interval_s=3600)
    pool.add_local(worker)
    remote_app = create_app(GatewayConfig(), worker=remote_engine)
    prompt = worker.tokenize("The contract test says the same words again and again and again")
    asked = {"frequency_penalty": 1.5, "presence_penalty": 1.0, "min_new_tokens": 4}
    sampling = SamplingParams(max_new_tokens=12, temperature=0.0, return_logprob=True, top_logprobs_num=2, **asked)
    expected = worker.engine.generate(input_ids=[prompt], sampling=sampling)[0]
    plain = worker.engine.generate(input_ids=[prompt], sampling=SamplingParams(max_new_tokens=12, temperature=0.0))
    assert expected.token_ids != plain[0].token_ids  # dropping the penalties would show
    body = {
        "input_ids": prompt,
        "sampling_params": {"max_new_tokens": 12, "temperature": 0.0, **asked},
        "return_logprob": True,
        "top_logprobs_num": 2,
    }
    with serve_in_thread(remote_app, "remote worker") as url:
        pool.add_remote(url)
        with TestClient(create_app(GatewayConfig(), worker=pool)) as front:
            assert all(m.is_healthy for m in pool.members.values())  # the remote passed its /server_info probe
            for target in list(pool.members.values()):
                for member in pool.members.values():
                    member.is_healthy = member is target
                before = target.num_requests
                r = front.post("/generate", json=body)
                assert r.status_code == 200, r.text
                assert target.num_requests == before + 1, target.kind
                answer = r.json()
                assert answer["output_ids"] == expected.token_ids, target.kind
                got = [entry[0] for entry in answer["meta_info"]["output_token_logprobs"]]
                assert got == pytest.approx(expected.output_token_logprobs, abs=1e-5), target.kind
                for member in pool.members.values():
                    member.is_healthy = True
    remote_engine.check_idle_invariant()


def test_the_native_field_catalog_honours_every_sampling_field() -> None:
    """`/generate`'s request-field catalog lists each `SamplingParams` field where the native encoding
    puts it, as honoured: a new field fails here until the catalog lists it."""
    from radixgate.gateway.api.request_fields import GENERATE_FIELDS, HONOURED, SAMPLING_PARAMS_FIELDS

    for name, sampling in _one_field_set():
        table = GENERATE_FIELDS if name in TOP_LEVEL_FIELDS else SAMPLING_PARAMS_FIELDS
        where = "sampling_params" if table is SAMPLING_PARAMS_FIELDS else None
        assert table[name].status == HONOURED, name
        assert name in (sampling.to_native()[where] if where else sampling.to_native()), name
