"""The demo's ideal (`radixgate.bench.demo_ideal`): hand-counted on a tiny app, and declared from texts
the fixed app really sends."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from radixgate.bench.demo_ideal import CALLS, QUICK_SYSTEM, IdealReuse, declared_segments, ideal_reuse

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

TINY_APP = """
INSTRUCTIONS = "be brief"
TOOLS = [{"name": "a"}]
TOOL_NAMES = {"y", "x"}
FEW_SHOT = [{"role": "user", "content": "hi there"}, {"role": "assistant", "content": "hello"}]
ANSWER_TEMPLATE = "Today is {today}. Say yes now."
STAMP = str(1)  # not a literal: skipped


def make_docs():
    for i, body in enumerate(["doc one", "doc two words"]):
        print(i, body)
"""


def test_ideal_counts_each_calls_static_tokens_once_on_a_hand_counted_app(tmp_path: Path) -> None:
    app = tmp_path / "bad_app.py"
    app.write_text(TINY_APP)
    texts = declared_segments(str(app))
    assert texts == {
        "instructions": ["be brief"],
        "tools": ['{"name": "a"}'],
        "tool names": ["x, y"],
        "few-shot": ["hi there", "hello"],
        "documents": ["doc one", "doc two words"],
        "returns template": ["Say yes now."],
        "quick system": ["You are a helpful assistant."],
    }
    # Words as tokens: support = instructions 2 + tools 2 + tool names 2 + few-shot 2+1 = 9;
    # rag_answer = rag_question_first = documents 2+3 = 5; templated_answer 3; quick_answer 5.
    # 7 requests make calls 0 1 2 3 4 0 1: static 9+5+5+3+5+9+5 = 41.
    # Reused: request 2 (documents, sent by request 1) 5, request 5 (support, request 0) 9,
    # request 6 (documents) 5: 19.
    assert ideal_reuse(str(app), 7, str.split) == IdealReuse(requests=7, static_tokens=41, reused_tokens=19)
    assert ideal_reuse(str(app), 2, str.split) == IdealReuse(2, 14, 0)  # two different calls share nothing
    assert IdealReuse(7, 41, 19).hit_rate(76) == 0.25 and IdealReuse(0, 0, 0).hit_rate(0) == 0.0


def test_declared_texts_are_what_the_fixed_app_sends_for_each_call() -> None:
    """Every declared static text occurs in the prompt the fixed app builds for that call, so the
    ideal counts content the fixed app really puts first (rendered by the SDK, not by demo_ideal)."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        spec = importlib.util.spec_from_file_location("demo_ideal_fixed_app", EXAMPLES / "fixed_app.py")
        assert spec is not None and spec.loader is not None
        fixed = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(fixed)
    finally:
        sys.path.remove(str(EXAMPLES))
    texts = declared_segments(str(EXAMPLES / "bad_app.py"))
    prompts = fixed.build_prompts(fixed.make_docs(), len(CALLS))
    for (call, segments), prompt in zip(CALLS, prompts, strict=True):
        system = prompt.messages()[0]
        assert system["role"] == "system", call
        for name in segments:
            for text in texts[name]:
                assert text in system["content"], (call, name, text)
    assert f'"content": "{QUICK_SYSTEM}"' in (EXAMPLES / "bad_app.py").read_text()
