"""Smoke tests of benchmarks/bench_core.py (with peers) and benchmarks/bench_acceptance.py.

Both scripts run as subprocesses on tiny settings; the JSON output keys are checked, and an
unedited draft must give close to ``num_nodes`` tokens per verify step. Peers that are not
installed (arctic-inference) are allowed to be skipped, but the skip must be reported.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BENCH_DATA, require_bench_data

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
DATA = BENCH_DATA / "classeval" / "ClassEval_data.json"


def _run(args, timeout=120):
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc.stdout


def test_bench_core_peers(tmp_path):
    out = tmp_path / "core.json"
    text = _run([str(BENCH / "bench_core.py"), "--sizes", "300", "--out", str(out)])
    res = json.loads(out.read_text())
    assert "Side by side" in text
    (row,) = res["rows"]
    for key in ("update_bulk_us_per_token", "update_streamed_us_per_token", "propose_chain_us_per_step",
                "record_us_per_step", "chain_tokens_per_step"):
        assert row[key] > 0, key
    impls = {r["impl"]: r for r in res["side_by_side"]}
    skipped = res["meta"]["peers"]["skipped"]
    assert any(i.startswith("ssr") for i in impls)
    for peer, prefix in (("arctic", "arctic"), ("ngram", "sglang")):
        have = any(i.startswith(prefix) for i in impls)
        assert have or skipped.get(peer), f"{peer} neither measured nor reported as skipped"
        if skipped.get(peer):
            assert f"skipped {peer}" in text
    for r in res["side_by_side"]:
        for key in ("update_bulk_us_per_token", "update_streamed_us_per_token", "propose_us_per_step",
                    "record_us_per_step", "tokens_per_step"):
            assert r[key] > 0, (r["impl"], key)
        assert r["tokens_per_step"] >= 1.0


def test_bench_acceptance(tmp_path):
    require_bench_data(DATA)
    out = tmp_path / "acc.json"
    text = _run([str(BENCH / "bench_acceptance.py"), "--limit", "2", "--rates", "0,0.3", "--nodes", "8",
                 "--ops", "rename,drop,mixed", "--out", str(out)])
    res = json.loads(out.read_text())
    assert "controlled" in res["meta"]["note"] and "tokenizer" in res["meta"]
    assert "| op | rate |" in text
    rows = {(r["op"], r["rate"], r["num_nodes"], r["mode"]): r for r in res["rows"]}
    for r in res["rows"]:
        for key in ("tokens_per_step", "pct_prefix", "pct_suffix", "tasks"):
            assert key in r
    # the unedited draft: close to num_nodes tokens per verify step, all via the prefix path
    for mode in ("prefix", "both"):
        assert rows[("none", 0.0, 8, mode)]["tokens_per_step"] > 7.5
    assert rows[("none", 0.0, 8, "suffix")]["tokens_per_step"] > 6.5
    assert rows[("none", 0.0, 8, "prefix")]["pct_suffix"] == 0
    assert rows[("none", 0.0, 8, "suffix")]["pct_prefix"] == 0
    # edits cost acceptance; the suffix path recovers after a divergence
    for op in ("rename", "drop", "mixed"):
        assert rows[(op, 0.3, 8, "both")]["tokens_per_step"] < rows[("none", 0.0, 8, "both")]["tokens_per_step"]
        assert rows[(op, 0.3, 8, "both")]["tokens_per_step"] >= rows[(op, 0.3, 8, "prefix")]["tokens_per_step"]
