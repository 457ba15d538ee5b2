"""What no static rule can see, measured: a plain-`openai` app whose system prompt is read from a file
it rewrites on every request. After 20 requests through the gateway, `promptlint --stats URL` reports
the divergence at the app's call site as KV902, naming the system message and the varying text.

The gateway is the shared engine's app served by uvicorn in a thread on 127.0.0.1 and a free port
(promptlint reads `--stats` over HTTP), stopped at the end of the module."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from in_thread_server import serve_in_thread

import radixgate
from radixgate.gateway.app import create_app
from radixgate.gateway.config import GatewayConfig
from radixgate.linter import cli

APP = '''"""A support bot. Its system prompt lives in a file that the ticket tracker rewrites."""
from pathlib import Path

from openai import OpenAI

PROMPT_FILE = Path(__file__).with_name("system_prompt.txt")
POLICY = "Answer in two sentences. Refunds follow section 4 of the returns policy. " * 8


def note_tickets(number):
    PROMPT_FILE.write_text(f"You are Acme's support assistant. Open tickets: {number}.\\n" + POLICY)


def answer(client: OpenAI, question):
    system = PROMPT_FILE.read_text()
    reply = client.chat.completions.create(
        model="tiny",
        max_tokens=1,
        temperature=0,
        messages=[{"role": "system", "content": system}, {"role": "user", "content": question}],
    )
    return reply.choices[0].message.content
'''


@pytest.fixture(scope="module")
def gateway_url(worker) -> Iterator[str]:
    with serve_in_thread(create_app(GatewayConfig(), worker=worker), "gateway") as url:
        yield url


def _load(path: Path):
    spec = importlib.util.spec_from_file_location("drift_support_app", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_system_prompt_rewritten_per_request_is_a_measured_finding(gateway_url, tmp_path, capsys) -> None:
    from openai import OpenAI

    app_dir = tmp_path / "support"
    app_dir.mkdir()
    (app_dir / "bot.py").write_text(APP)
    bot = _load(app_dir / "bot.py")
    assert cli.main([str(app_dir), "--isolated", "--format", "json"]) == 0  # statically clean
    assert json.loads(capsys.readouterr().out) == []

    with radixgate.tagging_http_client() as http:
        client = OpenAI(base_url=gateway_url + "/v1", api_key="unused", http_client=http, max_retries=0)
        for i in range(20):
            bot.note_tickets(40 + i)
            bot.answer(client, f"Where is my order {i}?")

    code = cli.main([str(app_dir), "--stats", gateway_url, "--isolated", "--format", "json"])
    findings = json.loads(capsys.readouterr().out)
    assert code == 1
    (kv902,) = findings
    call_line = APP.splitlines().index("    reply = client.chat.completions.create(") + 1
    assert (kv902["code"], kv902["location"]["row"]) == ("KV902", call_line)
    message = kv902["message"]
    assert message.startswith("measured: 19 of 19 requests of `answer` diverge at token")
    assert "in the system message" in message
    assert "Open tickets: 59" in message and "(was '" in message and "Open tickets: 58" in message
    assert kv902["measured"]["template"] == "answer" and kv902["measured"]["requests"] == 20

    cli.main([str(app_dir), "--stats", gateway_url, "--isolated"])  # the text report, as a person reads it
    text = capsys.readouterr().out
    assert f"bot.py:{call_line}:1: KV902 [warning] measured: 19 of 19 requests" in text
