"""examples/bad_app.py: every planted anti-pattern is found with the right code; code written
with radixgate's `Prompt` has none; and the bad app really runs against an OpenAI-compatible
server."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
from pathlib import Path

from radixgate.linter import Settings, lint_source

ROOT = Path(__file__).resolve().parents[2]
BAD_APP = ROOT / "examples" / "bad_app.py"

#: The findings planted in examples/bad_app.py with KV301 selected: (code, text of the line).
#: Lines are found by their text so that edits above them keep this list valid; the closed-loop
#: issue uses `planted_findings()` to match the gateway's statistics to these call sites.
PLANTED: list[tuple[str, str]] = [
    ("KV203", "random.shuffle(examples)"),
    ("KV101", 'system = (f"Current time: {stamp}'),  # timestamp before the instructions
    ("KV101", 'system = (f"Current time: {stamp}'),  # user id before the instructions
    ("KV201", '+ "\\nTools: " + json.dumps(TOOLS)'),
    ("KV202", '", ".join(TOOL_NAMES)'),
    ("KV102", 'f"\\nRequest id: {uuid.uuid4()}"'),  # before the fixed few-shot messages
    ("KV301", "response = client.chat.completions.create("),  # support_chat
    ("KV204", "for name in os.listdir(docs_dir):"),
    ("KV301", "response = client.chat.completions.create("),  # rag_answer
    ("KV103", 'prompt = f"Question: {question}'),
    ("KV301", "response = client.chat.completions.create("),  # rag_question_first
    ("KV101", "ANSWER_TEMPLATE.format(today=datetime.now().isoformat())"),
    ("KV301", "response = client.chat.completions.create("),  # templated_answer
    ("KV301", "response = client.chat.completions.create("),  # quick_answer: short prefix
    ("KV101", 'lambda q: support_chat(client, args.model, f"user-{random.randint'),  # a random user id
]


def planted_findings(path: Path = BAD_APP) -> list[tuple[str, int]]:
    """(code, line) of every planted finding, in file order."""
    lines = path.read_text().splitlines()
    out, start = [], 0
    for code, text in PLANTED:
        row = next(i for i in range(start, len(lines)) if text in lines[i])
        out.append((code, row + 1))
        start = row if code != "KV301" else row + 1
    return out


def test_every_planted_anti_pattern_is_reported_with_its_code():
    found = lint_source(BAD_APP.read_text(), str(BAD_APP), Settings(extend_select=("KV301",)))
    assert [(v.code, v.row) for v in found] == planted_findings()
    kinds = {v.code for v in found}
    assert kinds == {"KV101", "KV102", "KV103", "KV201", "KV202", "KV203", "KV204", "KV301"}


SDK_APP = """
import datetime
import radixgate as rg
from radixgate import Prompt, context, examples, system, user

INSTRUCTIONS = "You are the support assistant of Acme Online. Answer in three sentences."
SUPPORT = rg.Prompt(rg.system(INSTRUCTIONS), rg.tools([{"type": "function"}]), template="bot")
FEW = Prompt(system(INSTRUCTIONS), examples([("Where is my parcel?", "Which order?")]))


def answer(client, user_id, question, past):
    prompt = SUPPORT.extend(rg.context(f"User {user_id}, {datetime.datetime.now()}"),
                            rg.user(question), rg.history(past))
    return client.chat(prompt)


def few(client, question):
    return client.chat(FEW.extend(context(f"now {datetime.datetime.now()}"), user(question)))
"""


def test_code_written_with_the_sdk_has_no_findings():
    assert lint_source(SDK_APP, "sdk_app.py", Settings(select=("KV",))) == []
    examples = [p for p in (ROOT / "examples").glob("*.py") if p.name != "bad_app.py"]
    for path in examples:  # the SDK examples, as they land
        found = lint_source(path.read_text(), str(path), Settings(select=("KV",)))
        assert found == [], f"{path.name}: {[(v.code, v.row, v.message) for v in found]}"


class _FakeOpenAI(http.server.BaseHTTPRequestHandler):
    bodies: list[dict] = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.bodies.append(body)
        reply = {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_bad_app_runs_against_an_openai_compatible_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FakeOpenAI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        done = subprocess.run(
            [sys.executable, str(BAD_APP), "--base-url", url, "--requests", "5", "--model", "tiny"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.count("-> 'ok'") == 5
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    bodies = _FakeOpenAI.bodies
    assert len(bodies) == 5 and {b["model"] for b in bodies} == {"tiny"}
    assert all("metadata" not in b for b in bodies)  # the bad app tags nothing
    assert bodies[0]["messages"][0]["content"].startswith("Current time: ")
