"""Prompt rendering order, canonical serialization, volatility warnings and identity."""

from __future__ import annotations

import sys
import warnings

import pytest

import radixgate as rg

TOOL_A = {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {"q": {}}}}}
TOOL_B = {
    "function": {"parameters": {"properties": {"id": {}}, "type": "object"}, "name": "lookup"},
    "type": "function",
}


def test_less_volatile_segments_render_first_whatever_the_declared_order():
    prompt = rg.Prompt(
        rg.user("What changed?"),
        rg.context("User id: 42"),
        rg.history([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]),
        rg.document("Release notes ...", title="notes"),
        rg.system("You are a release bot."),
        template="t",
    )
    assert [s.volatility for s in prompt.segments] == sorted(s.volatility for s in prompt.segments)
    messages = prompt.messages()
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[0]["content"] == "You are a release bot.\n\n# notes\nRelease notes ..."
    assert messages[-1]["content"] == "What changed?\n\nUser id: 42"
    assert prompt.text() == (
        "You are a release bot.\n\n# notes\nRelease notes ...\n\nUser: hi\n\n"
        "Assistant: hello\n\nWhat changed?\n\nUser id: 42"
    )


def test_tool_schemas_serialize_canonically():
    one = rg.Prompt(rg.tools([TOOL_A, TOOL_B]), template="t")
    other = rg.Prompt(rg.tools([dict(reversed(list(TOOL_B.items()))), TOOL_A]), template="t")
    assert one.static_text() == other.static_text()
    assert one.static_prefix_hash == other.static_prefix_hash
    lines = one.static_text().splitlines()
    assert lines[0] == "# Tools" and '"name": "lookup"' in lines[1] and '"name": "search"' in lines[2]


def test_whitespace_and_unicode_are_normalized():
    composed, decomposed = "caf\u00e9", "cafe\u0301"
    a = rg.system(f"  Rules:\r\n  - be  kind\u00a0 \n\n\n\n{composed}\t ")
    b = rg.system(f"Rules:\n  - be kind \n\n{decomposed}")
    assert a.text == b.text == "Rules:\n  - be kind\n\ncaf\u00e9"


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("Current time: 2026-11-29T10:15:00Z.", "ISO timestamp"),
        ("Session 123e4567-e89b-12d3-a456-426614174000", "UUID"),
        ("Request id 1732871234", "long digit run"),
    ],
)
def test_volatile_static_content_warns_naming_the_segment_and_the_users_line(text, kind):
    with pytest.warns(rg.VolatileStaticSegmentWarning) as record:
        rg.Prompt(rg.system(text, name="intro"), template="t")
        line = sys._getframe().f_lineno - 1  # the call on the line above
    message = str(record[0].message)
    assert "'intro'" in message and kind in message
    assert record[0].filename == __file__ and record[0].lineno == line


def test_volatile_content_outside_static_segments_is_fine():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rg.Prompt(rg.system("Version 3.14, 2024 edition."), rg.context("Now: 2026-11-29T10:15:00Z"), rg.user("q"))


def test_template_defaults_to_construction_site_and_extend_keeps_it():
    base = rg.Prompt(rg.system("s"))
    line = sys._getframe().f_lineno - 1  # the call on the line above
    assert base.template.endswith(f"test_sdk_prompt.py:{line}")
    assert base.extend(rg.user("q")).template == base.template
    assert rg.Prompt(rg.system("s"), template="named").template == "named"


def test_static_identity_ignores_dynamic_segments():
    base = rg.Prompt(rg.system("Be brief."), rg.examples([("2+2", "4"), ("3+3", "6")]), template="t")
    one, two = base.extend(rg.user("a")), base.extend(rg.user("b"), rg.document("doc"))
    assert one.static_prefix_hash == two.static_prefix_hash == base.static_prefix_hash
    assert one.static_prefix_chars == len("Be brief.\n\n# Examples\n\nInput: 2+2\nOutput: 4\n\nInput: 3+3\nOutput: 6")
    assert rg.Prompt(rg.system("Be briefer."), template="t").static_prefix_hash != base.static_prefix_hash
    assert one.messages()[0]["content"].startswith(one.static_text())
    meta = one.metadata(source="app.py:3")
    assert meta == {
        "prompt_template": "t",
        "prompt_source": "app.py:3",
        "static_prefix_hash": base.static_prefix_hash,
        "static_prefix_chars": str(base.static_prefix_chars),
    }


def test_static_tokens_and_cacheable_check():
    prompt = rg.Prompt(rg.system("hello world"), rg.user("question"), template="t")
    assert prompt.static_tokens() == rg.count_tokens("hello world") == 2
    with pytest.warns(rg.ShortStaticPrefixWarning, match="static prefix is 2 tokens, below the 1024"):
        assert prompt.check_cacheable() is False
    assert rg.Prompt(rg.system("word " * 1100), template="t").check_cacheable() is True


def test_prefix_messages_are_the_system_part_only():
    prompt = rg.Prompt(rg.system("s"), rg.document("d"), rg.user("q"), template="t")
    assert prompt.prefix_messages() == [{"role": "system", "content": "s\n\nd"}]
    assert rg.Prompt(rg.user("q")).prefix_messages() == []


def test_prompts_compare_by_template_and_segments():
    a = rg.Prompt(rg.system("s"), rg.user("q"), template="t")
    assert a == rg.Prompt(rg.user("q"), rg.system("s"), template="t")
    assert a != rg.Prompt(rg.system("s"), rg.user("q"), template="u")
    assert "system:static" in repr(a)


def test_prefix_keeps_static_and_shared_and_does_not_warn_again():
    with pytest.warns(rg.VolatileStaticSegmentWarning):
        prompt = rg.Prompt(rg.system("Built 2026-11-29T10:00"), rg.document("d"), rg.user("q"), template="t")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cut = prompt.prefix()
    assert cut.template == "t" and [s.name for s in cut.segments] == ["system", "document"]
