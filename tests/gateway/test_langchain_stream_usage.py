"""What docs/langchain.md says about streaming usage: on a custom base URL LangChain's ChatOpenAI
asks for usage in a stream only with `stream_usage=True`; then it carries the cached tokens."""

from __future__ import annotations

from fastapi.testclient import TestClient


def _streamed(client: TestClient, **options):
    from langchain_openai import ChatOpenAI

    chat = ChatOpenAI(model="tiny", base_url=f"{client.base_url}/v1", api_key="-", http_client=client, **options)
    merged = None
    for chunk in chat.stream("Stream usage on a custom base URL, please.", max_tokens=2):
        merged = chunk if merged is None else merged + chunk
    return merged


def test_stream_usage_needs_stream_usage_true_on_a_custom_base_url(client: TestClient) -> None:
    assert _streamed(client).usage_metadata is None
    usage = _streamed(client, stream_usage=True).usage_metadata
    assert usage["input_tokens"] > 0 and usage["output_tokens"] == 2
    assert usage["input_token_details"]["cache_read"] > 0  # the second request of the same prompt
