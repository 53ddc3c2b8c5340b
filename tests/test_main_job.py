"""The README's first command: the main job runs end to end and reports identical outputs."""

from __future__ import annotations

import json


def test_main_job_on_bundled_model(tmp_path):
    from ssr_sglang.main_job import main

    assert main(["--n", "2", "--methods", "plain,ssr", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "results.json").read_text())
    ssr = result["summary"]["ssr"]
    assert ssr["identical_to_plain"] == 2
    assert ssr["answers_correct"] == 2
    assert ssr["drafts_started"] >= 2
    assert ssr["answer_accept_length"] > 2
    assert (tmp_path / "results.md").read_text().count("|") > 10
