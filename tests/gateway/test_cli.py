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
