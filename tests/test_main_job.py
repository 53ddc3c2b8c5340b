"""The README's first command: the main job runs end to end, side by side, and reports identical outputs."""

from __future__ import annotations

import json

import pytest


@pytest.mark.server
def test_main_job_on_bundled_model_with_constrained_answers(tmp_path):
    """The README's command, default settings, plus ``--grammar regex`` (every task also served with its answer
    under the answer-format regex, after the think end) in the same run on the same servers: SSR equals plain,
    unconstrained and constrained alike; constrained answers match the regex; after the warm-up the policy
    decides from measurements. (That constrained requests get drafts, on a fixed schedule so that a busy
    machine cannot talk the policy out of them, is tests/srt/test_constrained.py's.)"""
    import re

    from ssr_sglang.main_job import main
    from ssr_sglang.models.tasks import ANSWER_GRAMMARS

    assert main(["--n", "2", "--warmup", "4", "--methods", "plain,ssr", "--grammar", "regex",
                 "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "results.json").read_text())
    assert set(result["results"]) == {"plain", "ssr", "plain+regex", "ssr+regex"}
    for method in ("ssr", "ssr+regex"):
        summary = result["summary"][method]
        assert summary["identical_to_plain"] == 2 and summary["answers_correct"] == 2, (method, summary)
        lo, hi = summary["e2e_speedup_ci95"]
        assert lo <= summary["e2e_speedup"] <= hi
        assert summary["per_task_speedup"]["min"] <= summary["per_task_speedup"]["max"]
        for row in result["results"][method]:
            decisions = row["ssr"]["decisions"]
            assert decisions and not any(d["reason"].startswith("learning") for d in decisions), decisions
    for row in result["results"]["ssr+regex"]:
        assert re.fullmatch(ANSWER_GRAMMARS["regex"], row["text"].split("</think>")[-1]), row["text"]
    assert result["summary"]["ssr"]["drafts_started"] > 0
    md = (tmp_path / "results.md").read_text()
    assert "95% CI" in md and md.count("|") > 20 and "ssr+regex" in md


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
