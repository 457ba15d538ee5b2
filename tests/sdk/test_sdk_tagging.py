"""`radixgate.tagging_http_client`: plain openai-client apps get call-site metadata, bodies otherwise kept."""

from __future__ import annotations

import json
import sys

import httpx

import radixgate as rg
from radixgate._tagging import TaggingTransport


def test_tagging_transport_adds_call_site_metadata_once():
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={})

    http = httpx.Client(transport=TaggingTransport(httpx.MockTransport(handler)))
    http.post("http://x/v1/chat/completions", json={"model": "m", "messages": []})
    line = sys._getframe().f_lineno - 1  # the call on the line above
    http.post("http://x/v1/chat/completions", json={"model": "m", "metadata": {"prompt_source": "mine.py:1"}})
    first, second = (json.loads(r.content) for r in seen)
    assert first["metadata"]["prompt_source"].endswith(f"test_sdk_tagging.py:{line}")
    assert first["metadata"]["prompt_template"] == "test_tagging_transport_adds_call_site_metadata_once"
    assert first["messages"] == [] and second["metadata"] == {"prompt_source": "mine.py:1"}
    assert isinstance(rg.tagging_http_client(), httpx.Client)
