"""The fast tier keeps exactly one server module: its shared end-to-end check (docs/testing.md)."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_exactly_one_module_is_the_fast_tiers_server():
    smoke = sorted(str(p.relative_to(TESTS)) for p in TESTS.rglob("test_*.py")
                   if re.search(r"pytest\.mark\.smoke\b", p.read_text()))
    assert smoke == ["srt/test_ssr_bundled_model.py"], smoke



def test_the_full_runs_longest_first_files_exist_and_are_out_of_the_fast_tier():
    """tests/conftest.py's LONGEST_FIRST schedules the full run; a renamed file would fall to the end unnoticed."""
    from conftest import LONGEST_FIRST

    root = TESTS.parent
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
    for f in LONGEST_FIRST:
        text = (root / f).read_text()
        assert "mark.server" in text or "mark.slow" in text, f
