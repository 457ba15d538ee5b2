"""Client behaviour against `httpx.MockTransport`: metadata, retries, error mapping, streaming."""

from __future__ import annotations

import json
import sys
import time

import httpx
import pytest
from sdk_fakes import FakeServer

import radixgate as rg

BASE = "http://testserver/v1"
THIS_FILE = "test_sdk_client.py"


def make_client(server: FakeServer, **options) -> rg.Client:
    options.setdefault("retry_backoff", 0.001)
    http = httpx.Client(transport=httpx.MockTransport(server.handler))
    return rg.Client(base_url=BASE, http_client=http, **options)


PROMPT = rg.Prompt(rg.system("You are a support bot. " * 20), template="support")


def test_chat_sends_prompt_static_first_with_metadata():
    server = FakeServer()
    client = make_client(server, model="tiny")
    prompt = PROMPT.extend(rg.user("Where is my order?"), rg.context("User id: 7"))
    reply = client.chat(prompt, max_tokens=4)
    line = sys._getframe().f_lineno - 1  # the call on the line above
    body = server.bodies()[0]
    assert body["messages"][0] == {"role": "system", "content": PROMPT.static_text()}
    assert body["messages"][-1]["content"] == "Where is my order?\n\nUser id: 7"
    assert body["max_tokens"] == 4 and "temperature" not in body and body["model"] == "tiny"
    meta = body["metadata"]
    assert meta["prompt_template"] == "support"
    assert meta["prompt_source"].endswith(f"{THIS_FILE}:{line}")  # relative to the working directory
    assert meta["static_prefix_hash"] == PROMPT.static_prefix_hash and len(meta["static_prefix_hash"]) == 16
    assert meta["static_prefix_chars"] == str(len(PROMPT.static_text()))
    assert all(isinstance(v, str) for v in meta.values())
    assert reply.text == "ok!" and reply.usage.prompt_tokens > 0 and reply.cached_tokens == 0


def test_second_request_reports_cached_tokens_and_hit_ratio():
    server = FakeServer()
    client = make_client(server, model="tiny")
    client.chat(PROMPT.extend(rg.user("first question")))
    reply = client.chat(PROMPT.extend(rg.user("second question")))
    assert reply.usage.cached_tokens > 0
    assert 0.5 < reply.hit_ratio < 1 and reply.hit_ratio == reply.usage.cached_tokens / reply.usage.prompt_tokens


def test_send_metadata_false_sends_openai_fields_only():
    server = FakeServer()
    client = make_client(server, model="m", send_metadata=False, stream_usage=False)
    list(client.chat_stream([{"role": "user", "content": "hi"}]))
    body = server.bodies()[0]
    assert set(body) == {"model", "messages", "stream"}


def test_plain_messages_get_call_site_template_and_system_hash():
    server = FakeServer()
    client = make_client(server, model="m")
    client.chat([{"role": "system", "content": "rules"}, {"role": "user", "content": "q"}], metadata={"team": "x"})
    meta = server.bodies()[0]["metadata"]
    assert meta["prompt_template"] == meta["prompt_source"] and "test_sdk_client.py:" in meta["prompt_source"]
    assert meta["static_prefix_chars"] == "5" and meta["team"] == "x"


def test_model_defaults_to_first_listed_model():
    server = FakeServer()
    client = make_client(server)
    client.complete("hello")
    client.complete("again")
    paths = [r.url.path for r in server.requests]
    assert paths == ["/v1/models", "/v1/completions", "/v1/completions"]
    assert server.bodies()[0]["model"] == "tiny"


@pytest.mark.parametrize("status", [408, 429, 500, 503])
def test_retries_resend_identical_bytes(status):
    server = FakeServer(failures=[httpx.Response(status, json={"error": {"message": "busy"}})] * 2)
    client = make_client(server, model="m", max_retries=2)
    reply = client.chat(rg.Prompt(rg.system("s"), rg.context(f"time {time.time_ns()}"), rg.user("q")))
    assert reply.text == "ok!"
    assert len(server.requests) == 3
    assert len({r.content for r in server.requests}) == 1
    assert len({tuple(r.headers.items()) for r in server.requests}) == 1


def test_connection_errors_are_retried_then_raised():
    request_errors = [httpx.ConnectError("refused")] * 3
    server = FakeServer(failures=list(request_errors))
    client = make_client(server, model="m", max_retries=2)
    with pytest.raises(rg.APIConnectionError, match="Could not connect"):
        client.complete("x")
    assert len(server.requests) == 3


def test_timeout_maps_to_api_timeout_error():
    server = FakeServer(failures=[httpx.ReadTimeout("slow")])
    client = make_client(server, model="m", max_retries=0)
    with pytest.raises(rg.APITimeoutError) as info:
        client.complete("x")
    assert isinstance(info.value, rg.APIConnectionError) and "timed out" in str(info.value)


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (400, rg.BadRequestError),
        (401, rg.AuthenticationError),
        (403, rg.PermissionDeniedError),
        (404, rg.NotFoundError),
        (422, rg.UnprocessableEntityError),
        (429, rg.RateLimitError),
        (500, rg.InternalServerError),
        (418, rg.APIStatusError),
    ],
)
def test_status_errors_map_to_openai_style_classes(status, error):
    server = FakeServer(failures=[httpx.Response(status, json={"error": {"message": "nope", "type": "x"}})])
    client = make_client(server, model="m", max_retries=0)
    with pytest.raises(error) as info:
        client.chat([{"role": "user", "content": "q"}])
    assert info.value.status_code == status and "nope" in str(info.value)
    assert isinstance(info.value, rg.APIError) and info.value.body["error"]["message"] == "nope"


def test_bad_request_is_not_retried():
    server = FakeServer(failures=[httpx.Response(400, text="unknown field metadata")])
    client = make_client(server, model="m", max_retries=3)
    with pytest.raises(rg.BadRequestError, match="unknown field metadata"):
        client.complete("x")
    assert len(server.requests) == 1


def test_retry_after_header_is_honoured():
    server = FakeServer(failures=[httpx.Response(429, headers={"retry-after": "0.2"})])
    client = make_client(server, model="m", retry_backoff=0.0)
    start = time.monotonic()
    client.complete("x")
    assert time.monotonic() - start >= 0.2


def test_retry_delay_policy():
    from radixgate._base_client import retry_delay

    assert retry_delay(0, {"retry-after": "3"}, backoff=0.5, max_delay=8) == 3.0
    assert retry_delay(0, {"retry-after-ms": "250"}, backoff=0.5, max_delay=8) == 0.25
    assert 0.375 <= retry_delay(0, {}, backoff=0.5, max_delay=8) <= 0.5
    assert 1.5 <= retry_delay(2, {"retry-after": "600"}, backoff=0.5, max_delay=8) <= 2.0  # too long: ignored
    assert 6.0 <= retry_delay(10, None, backoff=0.5, max_delay=8) <= 8.0


def test_chat_stream_yields_chunks_and_final_usage():
    server = FakeServer()
    client = make_client(server, model="m")
    with client.chat_stream(PROMPT.extend(rg.user("q")), max_tokens=2) as stream:
        texts = [chunk.text for chunk in stream]
    assert "".join(texts) == "ok!"
    assert stream.usage is not None and stream.usage.prompt_tokens > 0
    body = server.bodies()[0]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


def test_complete_stream_and_prompt_text():
    server = FakeServer()
    client = make_client(server, model="m")
    chunks = list(client.complete_stream(PROMPT.extend(rg.user("q"))))
    assert "".join(c.text for c in chunks) == "ok!" and chunks[-1].usage is not None
    assert server.bodies()[0]["prompt"] == PROMPT.extend(rg.user("q")).text()


def test_stream_error_event_raises():
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b'data: {"error": {"message": "engine died"}}\n\n')

    client = rg.Client(base_url=BASE, model="m", http_client=httpx.Client(transport=httpx.MockTransport(handler)))
    with pytest.raises(rg.APIError, match="engine died"):
        list(client.chat_stream([{"role": "user", "content": "q"}]))


def test_non_json_success_body_is_a_validation_error():
    client = rg.Client(
        base_url=BASE,
        model="m",
        http_client=httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200, text="<html>"))),
    )
    with pytest.raises(rg.APIResponseValidationError, match="base_url"):
        client.complete("x")


def test_warm_prefills_only_static_and_shared_segments():
    server = FakeServer()
    client = make_client(server, model="m")
    prompt = PROMPT.extend(rg.document("doc text"), rg.history([{"role": "user", "content": "h"}]), rg.user("q"))
    usage = client.warm(prompt)
    body = server.bodies()[0]
    assert body["messages"] == prompt.prefix_messages() and body["max_tokens"] == 1
    assert body["metadata"]["prompt_template"] == "support" and usage is not None
    assert client.chat(prompt).cached_tokens >= usage.prompt_tokens - 2
    assert client.warm(rg.Prompt(rg.user("only a question"))) is None


def test_server_endpoints_live_at_the_root():
    server = FakeServer()
    client = make_client(server, api_key="sk-test")
    info = client.server_info()
    assert info.cache_hit_rate == 0.5 and info["token_usage"] == 0.1 and info.model_extra["page_size"] == 1
    stats = client.prompt_stats()
    assert stats.get("t").hit_rate == 0.5 and stats.get("missing") is None
    client.flush_cache()
    assert client.health()
    paths = [r.url.path for r in server.requests]
    assert paths == ["/server_info", "/v1/prompt_stats", "/flush_cache", "/health"]
    assert server.requests[0].headers["authorization"] == "Bearer sk-test"


def test_health_is_false_when_unreachable():
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    client = rg.Client(base_url=BASE, http_client=httpx.Client(transport=httpx.MockTransport(refuse)))
    assert client.health() is False


def test_short_static_prefix_warns_once_per_template():
    server = FakeServer()
    client = make_client(server, model="m", min_static_tokens=1024)
    with pytest.warns(rg.ShortStaticPrefixWarning, match="below the 1024"):
        client.chat(PROMPT.extend(rg.user("q")))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        client.chat(PROMPT.extend(rg.user("again")))


def test_options_are_keyword_only_and_validated():
    with pytest.raises(TypeError):
        rg.Client("http://x/v1")  # type: ignore[misc]
    with pytest.raises(ValueError, match="max_retries"):
        rg.Client(max_retries=-1)
    assert json.loads(json.dumps({"ok": True}))
