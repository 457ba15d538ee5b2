"""radixgate's LangChain and LlamaIndex templates are safe sinks, like `Prompt`: they render static-first."""

from __future__ import annotations

import pytest
from promptlint_assert import LONG, assert_lints

TEMPLATE = """
{imports}

PROMPT = {owner}.from_messages([
    ("system", "Today is {{now}}. {long}"),
    ("human", "{{question}}"),
])
"""


@pytest.mark.parametrize(
    "imports, owner",
    [
        ("from radixgate.langchain import ChatPromptTemplate", "ChatPromptTemplate"),
        ("import radixgate.langchain as rgl", "rgl.ChatPromptTemplate"),
        ("from radixgate.llamaindex import ChatPromptTemplate", "ChatPromptTemplate"),
    ],
)
def test_integration_templates_are_safe_sinks(imports: str, owner: str) -> None:
    assert_lints(TEMPLATE.format(imports=imports, owner=owner, long=LONG))


@pytest.mark.parametrize("module", ["langchain_core.prompts", "llama_index.core.prompts"])
def test_the_frameworks_own_templates_still_lint(module: str) -> None:
    source = TEMPLATE.format(imports=f"from {module} import ChatPromptTemplate", owner="ChatPromptTemplate", long=LONG)
    assert_lints(source, "KV101")
