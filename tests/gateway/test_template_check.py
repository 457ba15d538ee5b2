"""`radixgate check-template`: each turn's next prompt against prompt + reply, through real chat templates
(the built-in model's, ones written here to break in one known way each, and, where they are present,
two public ones named in data/chat_templates/README.md)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from radixgate._cli import main as radixgate_main
from radixgate.engine.tiny_tokenizer import CHAT_TEMPLATE
from radixgate.gateway.features.template_check import check, load_template, main

DATA = Path(__file__).parent / "data" / "chat_templates"
CHATML = (
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}{% for c in m.tool_calls or [] %}"
    "<tool_call>{{ c.function.name }} {{ ARGS }}</tool_call>{% endfor %}<|im_end|>\n{% endfor -%}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _breaks(template: str) -> list[tuple[str, int, str]]:
    return [(b.conversation, b.turn, b.construct) for b in check(template).breaks]


def test_the_built_in_template_extends_every_turn() -> None:
    template, tokens = load_template("tiny")
    report = check(template, tokens, "tiny")
    assert (report.turns_checked, report.breaks, report.skipped) == (8, [], {})


def test_a_template_that_drops_reasoning_from_history_is_flagged_at_that_turn(capsys) -> None:
    path = DATA / "drops_reasoning.jinja"
    assert _breaks(path.read_text()) == [
        ("reasoning-field", 4, "reasoning dropped from history"),
        ("reasoning-inline", 4, "reasoning dropped from history"),
    ]
    assert main([str(path)]) == 1
    out = capsys.readouterr().out
    assert "8 replies checked, 2 break(s)" in out and "'<think>\\nThe user asks" in out
    assert radixgate_main(["check-template", "tiny"]) == 0  # through the `radixgate` command
    assert "0 break(s)" in capsys.readouterr().out


def test_each_construct_is_named() -> None:
    # tool-call arguments written back with tojson: the JSON string the client returns gets quoted
    reserialised = CHATML.replace("{{ ARGS }}", "{{ c.function.arguments | tojson }}")
    assert _breaks(reserialised) == [("tool-call", 2, "tool call re-serialised")]
    # the reply stripped of its trailing period in history
    stripped = CHATML.replace("{{ m.content }}", "{{ m.content.rstrip('.') if m.role == 'assistant' else m.content }}")
    stripped = stripped.replace("{{ ARGS }}", "{{ c.function.arguments }}")
    assert ("plain", 4, "reply re-rendered in history") in _breaks(stripped)
    # the last user message marked, so the mark moves once a reply follows it
    marked = CHATML.replace("{{ m.content }}", "{{ m.content }}{% if loop.last %} (latest){% endif %}")
    marked = marked.replace("{{ ARGS }}", "{{ c.function.arguments }}")
    assert ("plain", 2, "message 1 (user) re-rendered once a reply follows it") in _breaks(marked)


def test_templates_load_from_a_tokenizer_config_or_a_checkpoint_folder(tmp_path, capsys) -> None:
    config = {"chat_template": [{"name": "default", "template": CHAT_TEMPLATE}], "eos_token": {"content": "<|im_end|>"}}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    assert load_template(str(tmp_path)) == (CHAT_TEMPLATE, {"eos_token": "<|im_end|>"})
    assert main([str(tmp_path / "tokenizer_config.json"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["breaks"] == []
    assert main([str(tmp_path / "missing.jinja")]) == 2
    assert "not `tiny`, a .jinja file" in capsys.readouterr().err


PUBLIC = os.environ.get("RADIXGATE_PUBLIC_CHAT_TEMPLATES")


@pytest.mark.skipif(not PUBLIC, reason="the public templates are not in the repository (README beside the data)")
def test_two_public_templates() -> None:
    folder = Path(PUBLIC or ".")
    expected = {
        "tool_chat_template_deepseekr1.jinja": (
            "d8a988b1f69b3597f14b25e36e1e55ab3897912ed95db41621cc8e239d0e23a7",
            {("tool-call", 2, "tool call re-serialised"), ("reasoning-inline", 4, "reasoning dropped from history")},
        ),
        "tool_chat_template_hermes.jinja": (
            "c619d0dbda72d4748beafc7547b591bbcce0db650b99a7167b422cea9cc94228",
            {("tool-call", 2, "tool call re-serialised")},
        ),
    }
    for name, (sha256, breaks) in expected.items():
        text = (folder / name).read_text(encoding="utf-8")
        assert hashlib.sha256(text.encode()).hexdigest() == sha256, name
        assert breaks <= set(_breaks(text)), name


def test_a_conversation_the_template_refuses_is_skipped_and_said(capsys) -> None:
    strict = "{% if tools %}{{ raise_exception('this template takes no tools') }}{% endif %}" + CHATML
    report = check(strict.replace("{{ ARGS }}", "{{ c.function.arguments }}"), name="strict")
    assert list(report.skipped) == ["tool-call"] and "takes no tools" in report.skipped["tool-call"]
    assert report.breaks == [] and report.turns_checked == 6  # the tool-call conversation's two are not
