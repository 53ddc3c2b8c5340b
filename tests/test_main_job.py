"""The README's first command: the main job runs end to end, side by side, and reports identical outputs."""

from __future__ import annotations

import json

import pytest


@pytest.mark.server
def test_main_job_on_bundled_model(tmp_path):
    from ssr_sglang.main_job import main

    assert main(["--n", "2", "--warmup", "4", "--methods", "plain,ssr", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "results.json").read_text())
    ssr = result["summary"]["ssr"]
    assert ssr["identical_to_plain"] == 2
    assert ssr["answers_correct"] == 2
    lo, hi = ssr["e2e_speedup_ci95"]
    assert lo <= ssr["e2e_speedup"] <= hi
    assert ssr["per_task_speedup"]["min"] <= ssr["per_task_speedup"]["max"]
    # after the warm-up the policy decides from the server's own history, and says why
    for row in result["results"]["ssr"]:
        decisions = row["ssr"]["decisions"]
        assert decisions and not any(d["reason"].startswith("learning") for d in decisions), decisions
    md = (tmp_path / "results.md").read_text()
    assert "95% CI" in md and md.count("|") > 20


@pytest.mark.server
def test_main_job_with_constrained_answers(tmp_path):
    """``--grammar regex``: every task also served with its answer under the answer-format regex (after the
    think end): constrained SSR equals constrained plain, its answers match the regex, and it gets drafts."""
    import re

    from ssr_sglang.main_job import main
    from ssr_sglang.models.tasks import ANSWER_GRAMMARS

    # a fixed schedule: whether the auto policy forks on a busy machine is not what this test checks (and so
    # one warm-up task: the policy has nothing to learn)
    assert main(["--n", "2", "--warmup", "1", "--methods", "plain,ssr", "--grammar", "regex",
                 "--ssr-env", '{"SSR_EVERY": "16", "SSR_MAX_DRAFTS": "4"}', "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "results.json").read_text())
    assert set(result["results"]) == {"plain", "ssr", "plain+regex", "ssr+regex"}
    summary = result["summary"]["ssr+regex"]
    assert summary["identical_to_plain"] == 2 and summary["answers_correct"] == 2
    for row in result["results"]["ssr+regex"]:
        assert re.fullmatch(ANSWER_GRAMMARS["regex"], row["text"].split("</think>")[-1]), row["text"]
    assert summary["drafts_started"] > 0
    assert "ssr+regex" in (tmp_path / "results.md").read_text()


def test_constrained_runs_are_compared_with_plain_under_the_same_grammar():
    from ssr_sglang.main_job import summarize

    def row(latency, ids):
        return {"latency": latency, "answer_time": latency / 2, "reasoning_time": latency / 2, "reasoning_steps": 3,
                "output_ids": ids}

    results = {"plain": [row(2.0, [1, 2])], "ngram": [row(1.5, [1, 2])], "ssr": [row(1.0, [1, 2])],
               "plain+regex": [row(4.0, [1, 3])], "ngram+regex": [row(3.0, [1, 3])], "ssr+regex": [row(1.0, [1, 3])]}
    s = summarize(results, [{"expected": None}])
    assert s["ssr"]["e2e_speedup"] == 2.0 and s["ssr+regex"]["e2e_speedup"] == 4.0
    assert s["ssr+regex"]["identical_to_plain"] == 1 and s["ssr"]["identical_to_plain"] == 1
    assert s["ssr+regex"]["vs_ngram"]["speedup"] == 3.0 and s["ssr"]["vs_ngram"]["speedup"] == 1.5
    assert "e2e_speedup_ci95" not in s["plain+regex"]


def test_ssr_against_ngram_task_by_task():
    from ssr_sglang.main_job import versus

    ngram = [{"latency": x, "reasoning_time": x / 2} for x in (1.0, 1.2, 0.9, 1.1)]
    ssr = [{"latency": x, "reasoning_time": x * 0.6} for x in (0.8, 1.0, 1.0, 0.8)]
    v = versus(ngram, ssr)
    assert abs(v["speedup"] - 4.2 / 3.6) < 1e-9
    lo, hi = v["ci95"]
    assert lo <= v["speedup"] <= hi
    assert v["per_task"]["slower"] == 1 and v["per_task"]["min"] == 0.9
    assert abs(v["reasoning_ratio"] - (3.6 * 0.6) / 2.1) < 1e-9


def test_exact_mode_is_set_for_every_server_or_refused():
    """Exact mode changes how the engine computes every row, prefills included: set on the SSR server
    alone it compares an exact SSR with a plain server that rounds differently."""
    from ssr_sglang.main_job import parse_args

    assert parse_args(["--exact"]).exact
    with pytest.raises(SystemExit):
        parse_args(["--ssr-env", '{"SSR_CPU_EXACT_VERIFY": "1"}'])
    with pytest.raises(SystemExit):
        parse_args(["--exact", "--device", "cuda"])
