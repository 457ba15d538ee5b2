"""Statistics feedback: `--stats` from a saved JSON file or a live HTTP endpoint; KV901."""

import http.server
import json
import threading

import pytest

from radixgate.linter import cli, hit_rates

SOURCE = """from datetime import datetime
from openai import OpenAI

SYSTEM = "@SYSTEM@"


def ask(client: OpenAI, q):
    return client.chat.completions.create(
        model="m",
        messages=[{"role": "system", "content": f"{datetime.now()} " + SYSTEM},
                  {"role": "user", "content": q}])


def ask_by_id(client: OpenAI, user_id, q):
    return client.chat.completions.create(model="m", messages=[
        {"role": "system", "content": f"user {user_id}. " + SYSTEM},
        {"role": "user", "content": q}])


def clean(client: OpenAI, q):
    return client.chat.completions.create(model="m", messages=[
        {"role": "system", "content": SYSTEM}, {"role": "user", "content": q}])
""".replace(
    "@SYSTEM@",
    "You are a meticulous support assistant for Acme. Answer in three sentences, cite the policy. Refunds "
    "follow section 4 of the returns policy, shipping questions follow section 7, and anything about accounts, "
    "billing or legal matters goes to a human agent with a one-line summary of the ticket. Keep every reply "
    "polite and never share internal notes.",
)


def _template(name, source, requests, prompt, cached, static=1000, distinct=1):
    return {
        "template": name,
        "source": source,
        "requests": requests,
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "hit_rate": cached / prompt,
        "static_prefix_tokens": static,
        "distinct_static_prefixes": distinct,
        "recomputed_static_tokens": static * distinct,
    }


STATS = {
    "templates": [
        _template("by-time", "/srv/app/bot.py:9", 120, 150_000, 6_000),  # line 9 inside ask()
        _template("by-user", "bot.py:15", 300, 400_000, 300_000),
        _template("clean", "app/bot.py:22", 500, 600_000, 60_000),  # no static finding
        _template("elsewhere", "other/module.py:3", 50, 50_000, 0),
        {
            "template": "(untagged)",
            "source": None,
            "requests": 3,
            "prompt_tokens": 30,
            "cached_tokens": 0,
            "hit_rate": 0.0,
        },
    ]
}


@pytest.fixture()
def app(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "bot.py").write_text(SOURCE)
    (tmp_path / "hit_rates.json").write_text(json.dumps(STATS))
    return tmp_path


def _json(capsys, argv):
    code = cli.main(argv)
    return code, json.loads(capsys.readouterr().out)


def test_findings_carry_measurements_ordered_by_waste(app, capsys):
    code, out = _json(capsys, ["app", "--stats", "hit_rates.json", "--format", "json", "--isolated"])
    assert code == 1
    assert [(v["code"], v["location"]["row"]) for v in out] == [("KV901", 22), ("KV101", 10), ("KV101", 16)]
    kv901, by_time, by_user = out
    assert kv901["measured"]["recomputed_tokens"] == 540_000
    assert "ideal" in kv901["message"] and "540,000 prompt tokens recomputed" in kv901["message"]
    assert by_time["message"].endswith("measured hit rate 4% over 120 requests, 144,000 prompt tokens recomputed")
    assert by_user["measured"]["hit_rate"] == 0.75


def test_text_and_sarif_show_the_numbers(app, capsys):
    cli.main(["app", "--stats", "hit_rates.json", "--isolated"])
    text = capsys.readouterr().out
    assert "KV101 [warning] timestamp `datetime.now()` (changes every request) before" in text
    assert "— measured hit rate 4% over 120 requests, 144,000 prompt tokens recomputed" in text
    cli.main(["app", "--stats", "hit_rates.json", "--isolated", "--format", "sarif"])
    sarif = json.loads(capsys.readouterr().out)
    results = sarif["runs"][0]["results"]
    assert results[1]["properties"]["measured"]["requests"] == 120
    assert "measured hit rate 4%" in results[1]["message"]["text"]


def test_kv901_can_be_ignored(app, capsys):
    code, out = _json(capsys, ["app", "--stats", "hit_rates.json", "--format", "json", "--isolated", "--ignore", "KV9"])
    assert [v["code"] for v in out] == ["KV101", "KV101"]


def test_source_matching_is_by_path_suffix_and_call_span():
    assert hit_rates.same_file("app/bot.py", "/srv/app/bot.py")
    assert hit_rates.same_file("/home/x/app/bot.py", "bot.py")
    assert not hit_rates.same_file("app/robot.py", "bot.py")
    assert not hit_rates.same_file("other/bot.py", "app/bot.py")


def test_live_endpoint_over_http(app, capsys):
    body = json.dumps(STATS).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            ok = self.path == "/v1/prompt_stats" and self.headers.get("Authorization") in (None, "Bearer k1")
            self.send_response(200 if ok else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body if ok else b"{}")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        code, out = _json(capsys, ["app", "--stats", url, "--format", "json", "--isolated"])
        assert code == 1 and out[0]["code"] == "KV901"
        code, out = _json(
            capsys, ["app", "--stats", url + "/v1", "--stats-api-key", "k1", "--format", "json", "--isolated"]
        )
        assert code == 1 and out[0]["code"] == "KV901"
        assert cli.main(["app", "--stats", url, "--stats-api-key", "wrong", "--isolated"]) == 2
        assert cli.main(["app", "--stats", url + "/nope", "--isolated"]) == 2
        assert "cannot read statistics" in capsys.readouterr().err
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_bad_statistics_are_a_tool_failure(app, capsys):
    (app / "bad.json").write_text('{"templates": [{"source": "a.py:1"}]}')
    assert cli.main(["app", "--stats", "bad.json", "--isolated"]) == 2
    assert "malformed template entry" in capsys.readouterr().err
    assert cli.main(["app", "--stats", "missing.json", "--isolated"]) == 2


def test_no_network_without_stats(app, capsys, monkeypatch):
    import httpx

    def refuse(*args, **kwargs):
        raise AssertionError("promptlint touched the network without --stats")

    monkeypatch.setattr(httpx, "get", refuse)
    assert cli.main(["app", "--isolated"]) == 1


def test_statistics_from_the_gateways_own_aggregator(app, capsys):
    """The JSON the gateway serves (built by its `PromptStatsRecorder`, as `/v1/prompt_stats` does)
    is what `--stats` reads: the contract, checked end to end without starting a server."""
    prompt_stats = pytest.importorskip("radixgate.gateway.observe.prompt_stats")
    aggregate = prompt_stats.PromptStatsRecorder()
    tags = prompt_stats.RequestTags.from_metadata(
        {
            "prompt_template": "by-time",
            "prompt_source": "app/bot.py:9",
            "static_prefix_hash": "a1",
            "static_prefix_chars": "400",
        }
    )
    for _ in range(40):  # the timestamp first: every request misses almost everything
        aggregate.record("tenant", tags, 1_000, 16, 100)
    (app / "live.json").write_text(json.dumps(aggregate.snapshot()))
    code, out = _json(capsys, ["app", "--stats", "live.json", "--format", "json", "--isolated"])
    assert code == 1
    by_time = out[0]
    assert (by_time["code"], by_time["location"]["row"]) == ("KV101", 10)
    assert by_time["measured"] == {
        "template": "by-time",
        "requests": 40,
        "hit_rate": 0.016,
        "recomputed_tokens": 39_360,
        "verdict": None,  # no drift measured: these rows were recorded without their prompts
    }
    assert "measured hit rate 2% over 40 requests, 39,360 prompt tokens recomputed" in by_time["message"]


def _drift(row, compared, *bins):
    """`row` with measured drift: `bins` are (token, requests, segment) with excerpts."""
    divergence = [
        {"token": t, "requests": n, "segment": s, "excerpt": f"now {t}", "previous": f"was {t}"} for t, n, s in bins
    ]
    return (
        row
        | {"compared_requests": compared, "divergent_requests": sum(n for _, n, _ in bins)}
        | {"divergence": divergence}
    )


DRIFT_STATS = {
    "templates": [
        _drift(_template("by-time", "/srv/app/bot.py:9", 120, 150_000, 6_000), 119, (3, 119, "system")),
        _drift(_template("by-user", "bot.py:15", 300, 400_000, 300_000, static=0), 299, (80, 299, "message 1 (user)")),
        _drift(_template("clean", "app/bot.py:22", 500, 600_000, 60_000), 499, (2, 250, "system"), (7, 200, "tools")),
        _drift(_template("few", "app/bot.py:9", 4, 4_000, 0), 3, (1, 3, "system")),  # too few compared to speak
    ]
}


def test_measured_drift_is_kv902_confirms_and_demotes_static_findings(app, capsys):
    (app / "drift.json").write_text(json.dumps(DRIFT_STATS))
    code, out = _json(capsys, ["app", "--stats", "drift.json", "--format", "json", "--isolated"])
    assert code == 1
    by_code = {(v["code"], v["location"]["row"]): v for v in out}
    # KV902 wherever the drift breaks the cache, a finding of its own beside the static one it confirms
    # (line 9 is inside the call KV101 reports at line 10); at line 22 it replaces KV901
    assert set(by_code) == {("KV902", 9), ("KV902", 22), ("KV101", 10), ("KV101", 16)}
    kv902 = by_code["KV902", 22]
    assert kv902["message"] == (
        "measured: 250 of 499 requests of `clean` diverge at token 2, in the system message: 'now 2' (was 'was 2')"
        "; 1 more such position — measured hit rate 10% over 500 requests, 540,000 prompt tokens recomputed"
    )
    assert kv902["severity"] == "warning" and kv902["measured"]["requests"] == 500
    confirmed, demoted = by_code["KV101", 10], by_code["KV101", 16]
    assert confirmed["measured"]["verdict"] == "confirmed by the measured drift (token 3, the system message)"
    assert confirmed["severity"] == "warning" and confirmed["message"].endswith(confirmed["measured"]["verdict"])
    assert demoted["severity"] == "info"  # the gateway saw 299 requests, none diverging before the question
    assert demoted["measured"]["verdict"].startswith("demoted: the measured drift shows no early divergence")
    # KV902 off: its findings go, the verdicts stay (they are the measurement, not the rule)
    _, out = _json(capsys, ["app", "--stats", "drift.json", "--format", "json", "--isolated", "--ignore", "KV902"])
    assert "KV902" not in {v["code"] for v in out}
    assert {v["location"]["row"]: v["severity"] for v in out if v["code"] == "KV101"} == {10: "warning", 16: "info"}


def test_drift_says_nothing_below_the_requests_it_needs():
    from radixgate._wire import TemplateStats
    from radixgate.linter import measured

    row = TemplateStats.from_json(DRIFT_STATS["templates"][3])
    assert measured.breaking(row) == [] and measured.verdict(row) is None
    inside_static = TemplateStats.from_json(
        _drift(_template("sdk", "a.py:1", 10, 10_000, 0, static=50), 9, (40, 9, "message 0 (user)"))
    )
    assert [d.token for d in measured.breaking(inside_static)] == [40]  # before the declared static prefix's end
