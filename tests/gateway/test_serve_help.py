"""`radixgate serve --help` explains every flag and names the OTEL_* variables that drive tracing."""

from __future__ import annotations

import argparse
import re

from radixgate.gateway.cli import build_parser


def _help_text() -> str:
    return build_parser().format_help()


def test_every_serve_flag_has_help() -> None:
    parser = build_parser()
    missing = [a.option_strings[0] for a in parser._actions if a.option_strings and not a.help]
    assert missing == []
    assert not [a for a in parser._actions if a.help == argparse.SUPPRESS]
    # The rendered text agrees: every flag line is followed by words on the line or the next one.
    lines = _help_text().splitlines()
    for i, line in enumerate(lines):
        flag = re.match(r"^  (--[\w-]+)(?: [A-Z_{},.\-\w]+)?\s*$", line)
        if flag:
            assert lines[i + 1].startswith(" " * 20) and lines[i + 1].strip(), f"{flag.group(1)} has no help"


def test_serve_help_names_the_tracing_variables() -> None:
    text = _help_text()
    for name in (
        "OTEL_TRACES_EXPORTER",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_SERVICE_NAME",
        "OTEL_SDK_DISABLED",
        "traceparent",
    ):
        assert name in text, name
