"""`radixgate serve` flags: passed through to EngineConfig, and bad values exit 2 with the engine's message."""

from __future__ import annotations

import socket

import pytest

from radixgate.gateway import cli


def _args(*argv: str):
    return cli.build_parser().parse_args(list(argv))


def test_only_given_engine_flags_reach_the_engine_config() -> None:
    from radixgate.engine import EngineConfig

    config = cli.engine_config(
        _args(
            "--page-size",
            "16",
            "--disable-radix-cache",
            "--schedule-policy",
            "fcfs",
            "--kv-cache-dtype",
            "auto",
            "--max-total-tokens",
            "4096",
        )
    )
    defaults = EngineConfig()
    assert (config.page_size, config.disable_radix_cache, config.schedule_policy, config.max_total_tokens) == (
        16,
        True,
        "fcfs",
        4096,
    )
    assert config.chunked_prefill_size == defaults.chunked_prefill_size
    assert config.enable_hicache == defaults.enable_hicache


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--kv-cache-dtype", "int3"], "kv_cache_dtype"),
        (["--page-size", "3"], "page_size"),
        (["--schedule-policy", "random"], "schedule_policy"),
        (["--max-queued-requests", "0"], "max_queued_requests"),
        (["--api-keys-file", "/nonexistent/keys.json"], "keys.json"),
    ],
)
def test_bad_values_exit_2_with_a_message(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("radixgate serve: ") and message in err


def test_busy_port_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        assert cli.main(["--port", str(taken.getsockname()[1])]) == 2
    assert "cannot listen" in capsys.readouterr().err


def test_keys_from_flag_and_file_are_merged(tmp_path) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text("k-file team-x\n")
    config = cli.gateway_config(
        _args("--api-keys-file", str(keys), "--api-key", "k-flag", "--rate-limit-rpm", "10"), engine=None
    )
    assert dict(config.api_keys) == {"k-file": "team-x", "k-flag": "default"}
    assert config.rate_limit_rpm == 10 and config.auth_enabled


def test_print_urls(capsys: pytest.CaptureFixture[str]) -> None:
    cli.print_urls("0.0.0.0", 1234, auth_enabled=False)
    out = capsys.readouterr().out
    assert "http://127.0.0.1:1234/v1" in out and "/metrics" in out and "/dashboard" in out
    assert "warning" in out


def test_served_connections_have_nodelay() -> None:
    """Streamed tokens must not wait for Nagle's algorithm: accepted sockets get TCP_NODELAY."""
    import asyncio

    async def accepted_nodelay() -> int:
        seen: dict[str, int] = {}

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            seen["nodelay"] = writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            writer.close()

        sock = cli.listen_socket("127.0.0.1", 0)
        server = await asyncio.start_server(handle, sock=sock)
        _, writer = await asyncio.open_connection("127.0.0.1", sock.getsockname()[1])
        for _ in range(100):
            if seen:
                break
            await asyncio.sleep(0.01)
        writer.close()
        server.close()
        await server.wait_closed()
        return seen["nodelay"]

    assert asyncio.run(accepted_nodelay()) == 1


def test_serve_freezes_what_start_up_built_before_it_serves(monkeypatch: pytest.MonkeyPatch) -> None:
    """What start-up built (the model, the engine, the modules) leaves the collector's generations
    after the app is made and before the first request is served, so no full collection walks it
    mid-stream; the garbage of start-up is collected, not frozen."""
    import gc
    import types
    import weakref

    import uvicorn

    from radixgate.gateway import app as app_module

    class Garbage:
        pass

    seen: dict[str, object] = {}

    def create_app(config):  # what the real one does here: build the worker, leave garbage behind
        cycle = Garbage()
        cycle.self = cycle  # type: ignore[attr-defined]
        seen["garbage"], seen["frozen_at_create"] = weakref.ref(cycle), gc.get_freeze_count()
        return types.SimpleNamespace(state=types.SimpleNamespace(gateway=types.SimpleNamespace(auth=None)))

    monkeypatch.setattr(app_module, "create_app", create_app)
    monkeypatch.setattr(cli, "install_key_reload", lambda args, auth: None)
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: seen.update(frozen=gc.get_freeze_count()))
    gc.unfreeze()
    try:
        assert cli.main(["--port", "0", "--worker", "http://127.0.0.1:9"]) == 0
    finally:
        gc.unfreeze()  # the rest of the test session collects as before
    assert seen["frozen_at_create"] == 0 and seen["frozen"] > 10_000  # all that was imported and built
    assert seen["garbage"]() is None  # collected before the freeze
