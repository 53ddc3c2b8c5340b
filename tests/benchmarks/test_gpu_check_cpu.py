"""CPU smoke test of benchmarks/gpu/ssr_gpu_check.py (``--tiny --device cpu``).

Runs the prepared GPU check end to end on a tiny random Qwen3 model and
checks the result file: expected keys, and SSR output token-identical to
the plain greedy baseline for every draft variant.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "gpu" / "ssr_gpu_check.py"


def _run(tmp_path: Path, *extra: str) -> dict:
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out))
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--tiny", "--device", "cpu", "--ks", "4,8", "--main-k", "8", *extra],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert (out / "results.md").is_file()
    return json.loads((out / "results.json").read_text())


def _check(res: dict, cache_mode: str) -> None:
    for key in ("model", "cache_mode", "baseline", "verify_cost", "ssr", "identical_all", "stage_s", "total_s"):
        assert key in res, key
    assert res["tiny"] is True and res["cache_mode"] == cache_mode
    assert "error" not in res
    b = res["baseline"]
    assert b["per_token_ms"] > 0 and b["answer_stats"]["length"] == res["L"] == 64
    ks = [r["k"] for r in res["verify_cost"]["rows"]]
    assert ks == [0, 1, 2, 4, 8, 16, 32]
    rows = res["ssr"]
    # 5 substitution rates + deleted span + inserted span + unrelated draft, for k = 8 and 4
    assert len(rows) == 16
    assert {r["k"] for r in rows} == {4, 8}
    for r in rows:
        for key in ("variant", "edit_rate", "steps", "accepted_per_step", "accepted_prefix", "accepted_suffix",
                    "ssr_ms", "plain_ms", "ratio", "identical", "first_divergence"):
            assert key in r, key
        assert r["identical"] and r["first_divergence"] is None, r
        assert 1 <= r["steps"] <= res["L"] - 1
        assert r["accepted_prefix"] + r["accepted_suffix"] == round(r["accepted_per_step"] * r["steps"])
    assert res["identical_all"] is True
    exact = [r for r in rows if r["variant"] == "sub 0%"]
    # an unedited draft is accepted in full: L-1 tokens in ceil((L-1)/(k+1)) steps
    for r in exact:
        assert r["steps"] == -(-(res["L"] - 1) // (r["k"] + 1)), r
        assert r["accepted_suffix"] == 0
    unrelated = [r for r in rows if r["variant"].startswith("unrelated")]
    assert all(r["steps"] >= res["L"] - 8 for r in unrelated)


def test_gpu_check_tiny_static(tmp_path):
    _check(_run(tmp_path), "static-eager")


def test_gpu_check_tiny_dynamic(tmp_path):
    _check(_run(tmp_path, "--cache", "dynamic"), "dynamic-eager")
