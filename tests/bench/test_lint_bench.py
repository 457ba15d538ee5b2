"""The speed benchmark runs and prints lines per second (the full 100,000-line figure comes from
`python -m radixgate.bench.lint`; here a small corpus keeps the test fast)."""

from pathlib import Path

import pytest

from radixgate.bench import lint as bench


def test_generated_corpus_is_prompt_code_with_findings(tmp_path: Path):
    files, lines = bench.generate(tmp_path, 3000)
    assert lines >= 3000 and files >= 2
    n_files, n_lines, findings, cpu, wall = bench.bench([str(tmp_path)])
    assert (n_files, n_lines) == (files, lines)
    assert findings >= lines // 20  # the corpus is dense with cache-hostile prompts
    assert cpu > 0 and wall > 0


@pytest.mark.slow
def test_bench_command_prints_lines_per_second_beside_pyflakes(capsys):
    assert bench.main(["--lines", "2000", "--repeat", "1", "--against", "pyflakes"]) == 0
    out = capsys.readouterr().out
    assert "lines/s (CPU time)" in out and "lines/s (wall time)" in out
    ratio = float(out.split("promptlint / pyflakes speed: ")[1].split()[0])
    assert ratio > 0
