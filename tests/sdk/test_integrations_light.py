"""`import radixgate` without the framework extras: it works, stays light, and each integration loads its
framework only when imported (a fresh interpreter whose import system hides the extras)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

HIDE_EXTRAS = textwrap.dedent(
    """
    import sys

    class HideExtras:
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in {"langchain_core", "langchain_openai", "llama_index", "anthropic", "openai"}:
                raise ModuleNotFoundError(f"No module named {name!r}")
            return None

    sys.meta_path.insert(0, HideExtras())
    """
)


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", HIDE_EXTRAS + textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )


def test_sdk_works_without_the_extras_and_imports_no_framework():
    done = _run(
        """
        import warnings
        import radixgate as rg
        prompt = rg.Prompt(rg.system("Be brief. " * 700), rg.user("Hi"), template="t")
        request = prompt.to_anthropic(model="claude-sonnet-4-5", max_tokens=8)
        assert request["system"][0]["cache_control"] == {"type": "ephemeral"}
        assert rg.openai_cache_hints(prompt)["prompt_cache_key"] == prompt.static_prefix_hash
        heavy = {"torch", "langchain_core", "llama_index", "anthropic", "openai", "radixgate.langchain"}
        print(sorted(heavy & set(sys.modules)))
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_integrations_say_which_extra_to_install():
    for module, extra in (("radixgate.langchain", "langchain"), ("radixgate.llamaindex", "llamaindex")):
        done = _run(f"import {module}")
        assert done.returncode == 1
        assert f"pip install 'radixgate[{extra}]'" in done.stderr
