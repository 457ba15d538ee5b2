"""The rule catalog documents itself: docs/rules.md is generated from it and up to date."""

import inspect
import re

from radixgate.bench import docgen
from radixgate.linter.rules import RULES


def test_every_rule_has_code_name_message_and_the_four_sections():
    for code, rule in RULES.items():
        assert re.fullmatch(r"KV\d{3}|E999", code), code  # E999: a file that does not parse, as in ruff
        assert rule.name == rule.name.lower() and " " not in rule.name and "-" in rule.name
        doc = inspect.cleandoc(type(rule).__doc__)
        positions = [doc.index(h) for h in ("## What it does", "## Why is this bad?", "## Example", "## Use instead")]
        assert positions == sorted(positions), code
    assert len({r.name for r in RULES.values()}) == len(RULES)


def test_docs_rules_md_is_up_to_date():
    current = docgen.DEFAULT_PATH.read_text()
    assert current == docgen.render(), "run `python -m radixgate.bench.docgen`"
    for code in RULES:
        assert f'<a id="{code.lower()}"></a>' in current


def test_check_mode_reports_a_stale_file(tmp_path):
    stale = tmp_path / "rules.md"
    stale.write_text("old\n")
    assert docgen.main(["--check", "-o", str(stale)]) == 1
    assert docgen.main(["-o", str(stale)]) == 0
    assert docgen.main(["--check", "-o", str(stale)]) == 0
