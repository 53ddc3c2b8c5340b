"""The fast tier keeps exactly one server module: its shared end-to-end check (docs/testing.md)."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_exactly_one_module_is_the_fast_tiers_server():
    smoke = sorted(str(p.relative_to(TESTS)) for p in TESTS.rglob("test_*.py")
                   if re.search(r"pytest\.mark\.smoke\b", p.read_text()))
    assert smoke == ["srt/test_ssr_bundled_model.py"], smoke

