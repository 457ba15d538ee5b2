"""lm-evaluation-harness against a real `radixgate serve`: a loglikelihood (multiple-choice) task and
a generate_until task, both defined in tests/e2e/lm_eval_tasks over local data (nothing downloads).
The harness's `local-completions` model with `tokenizer_backend=remote` reads /tokenizer_info and
/tokenize, scores choices with `echo` + `logprobs`, and generates with `stop`."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from live_servers import KEYLESS

from radixgate.gateway.server_process import ServerProcess

TASKS = Path(__file__).resolve().parent / "lm_eval_tasks"


@pytest.fixture
def server(live_server: Callable[..., ServerProcess]) -> ServerProcess:
    return live_server(KEYLESS)  # shared with other files; the harness's scores depend on no cache state


def test_lm_eval_loglikelihood_and_generate_until(server: ServerProcess, monkeypatch, tmp_path) -> None:
    lm_eval = pytest.importorskip("lm_eval")
    from lm_eval.tasks import TaskManager

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets"))
    monkeypatch.chdir(TASKS)  # the task files name their data relative to here
    results = lm_eval.simple_evaluate(
        model="local-completions",
        model_args=(
            f"model=tiny,base_url={server.base_url}/v1/completions,tokenizer_backend=remote,"
            "tokenized_requests=True,num_concurrent=1,max_retries=1,timeout=60"
        ),
        tasks=["radixgate_mc", "radixgate_gen"],
        task_manager=TaskManager(include_path=str(TASKS), include_defaults=False),
        log_samples=True,
        random_seed=0,
    )
    mc, gen = results["results"]["radixgate_mc"], results["results"]["radixgate_gen"]
    mc_samples = results["samples"]["radixgate_mc"]
    assert len(mc_samples) == 4
    right = 0
    for sample in mc_samples:  # one (logprob, is_greedy) per choice, each a sum of real logprobs
        scores = [resp[0][0] for resp in sample["resps"]]
        assert len(scores) == 3 and all(isinstance(s, float) and s < 0 for s in scores), scores
        assert len(set(scores)) == 3, scores  # three different continuations, three different sums
        right += max(range(3), key=scores.__getitem__) == sample["target"]
    # The reported accuracy is the share of questions whose gold choice got the server's highest score.
    assert mc["acc,none"] == right / 4
    gen_samples = results["samples"]["radixgate_gen"]
    assert len(gen_samples) == 3 and all(isinstance(s["resps"][0][0], str) for s in gen_samples)
    assert all("\n" not in s["resps"][0][0] for s in gen_samples)
    matches = sum(s["filtered_resps"][0] == s["target"] for s in gen_samples)
    assert gen["exact_match,none"] == matches / 3
    assert os.path.isdir(TASKS)
