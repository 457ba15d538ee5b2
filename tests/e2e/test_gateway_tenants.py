"""Two API keys, two tenants, one live server: neither sees the other's cached prefixes or statistics."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import openai
import pytest
import requests

from radixgate.gateway.observe import prompt_stats_cli as stats_cli
from radixgate.gateway.server_process import ServerProcess

PROMPT = "Tenant isolation check. " + " ".join(f"Confidential clause {i} of the contract." for i in range(60))


@pytest.fixture(scope="module")
def keys_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    keys = tmp_path_factory.mktemp("keys") / "keys.json"
    keys.write_text(json.dumps({"key-a": "tenant-a", "key-b": "tenant-b"}))
    return keys


@pytest.fixture
def server(live_server: Callable[..., ServerProcess], keys_file: Path) -> ServerProcess:
    return live_server(["--api-keys-file", str(keys_file), "--max-total-tokens", "32768"])


def _client(server: ServerProcess, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=key, max_retries=0, timeout=60)


def _usage(client: openai.OpenAI, template: str, prompt: str = PROMPT) -> openai.types.CompletionUsage:
    metadata = {"prompt_template": template, "prompt_source": "tests:1"}
    reply = client.completions.create(
        model="tiny", prompt=prompt, max_tokens=1, extra_body={"metadata": metadata, "cache_salt": "tenant:tenant-a"}
    )
    return reply.usage


def _cached(client: openai.OpenAI, template: str, prompt: str = PROMPT) -> int:
    return _usage(client, template, prompt).prompt_tokens_details.cached_tokens


def test_tenants_are_isolated(server: ServerProcess) -> None:
    # A prompt no other test sends, so the test holds alone and in any order.
    prompt = "Isolation: " + PROMPT
    a, b = _client(server, "key-a"), _client(server, "key-b")
    assert _cached(a, "contract-a", prompt) == 0
    prompt_tokens = _usage(a, "contract-a", prompt).prompt_tokens
    assert _cached(a, "contract-a", prompt) == prompt_tokens - 1  # all but the last token, recomputed for logits
    assert _cached(b, "contract-b", prompt) == 0  # A's identical prompt is invisible to B, whatever B sends
    assert _cached(b, "contract-b", prompt) == prompt_tokens - 1


def test_keys_are_required_except_for_health(server: ServerProcess) -> None:
    assert requests.get(f"{server.base_url}/health").status_code == 200
    for path in ("/v1/models", "/metrics", "/get_server_info", "/v1/prompt_stats"):
        r = requests.get(f"{server.base_url}{path}")
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key", path
    with pytest.raises(openai.AuthenticationError):
        _client(server, "key-c").models.list()


def test_stats_command_sees_only_its_tenant(
    server: ServerProcess, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _cached(_client(server, "key-a"), "contract-a")
    _cached(_client(server, "key-b"), "contract-b")
    assert stats_cli.main(["--url", server.base_url, "--api-key", "key-a"]) == 0
    templates = {t["template"]: t for t in json.loads(capsys.readouterr().out)["templates"]}
    assert "contract-a" in templates and "contract-b" not in templates
    assert templates["contract-a"]["source"] == "tests:1"
    assert stats_cli.main(["--url", server.base_url]) == 2  # no key: a clear failure, not a traceback
    assert "401" in capsys.readouterr().err
