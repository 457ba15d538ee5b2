"""The labeled corpus: at least 60 snippets, about half positive; precision >= 0.95 and
recall >= 0.90 (printed by `python -m radixgate.bench.lint_eval`)."""

from pathlib import Path

from radixgate.bench import lint_eval as evaluate

CORPUS = Path(__file__).parent / "corpus"


def test_corpus_size_and_balance():
    samples = evaluate.evaluate(CORPUS)
    positives = sum(1 for s in samples if s.expected)
    assert len(samples) >= 60
    assert abs(positives - (len(samples) - positives)) <= len(samples) // 10
    langchain = [s for s in samples if "langchain" in s.path.read_text()]
    assert len(langchain) >= 8


def test_precision_and_recall_meet_the_targets():
    samples = evaluate.evaluate(CORPUS)
    total, rules = evaluate.score(samples)
    assert total.precision >= 0.95, evaluate.report(samples)
    assert total.recall >= 0.90, evaluate.report(samples)
    assert set(rules) >= {"KV101", "KV102", "KV103", "KV104", "KV201", "KV202", "KV203", "KV204", "KV301"}


def test_scores_count_false_positives_and_negatives():
    s = evaluate.Sample
    total, rules = evaluate.score(
        [
            s(Path("a"), frozenset({"KV101"}), frozenset({"KV202"})),
            s(Path("b"), frozenset(), frozenset()),
            s(Path("c"), frozenset({"KV101"}), frozenset({"KV101"})),
        ]
    )
    assert (total.tp, total.fp, total.fn) == (1, 1, 1)
    assert rules["KV202"].precision == 0.0 and rules["KV101"].recall == 0.5


def test_the_evaluate_command_prints_the_table(capsys):
    assert evaluate.main(["--corpus", str(CORPUS)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("corpus: ") and "precision" in out and "\nall " in out
