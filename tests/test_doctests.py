"""The worked examples in docstrings are run (fast tier): a module's ``>>>`` examples are part of what it
guarantees, so a change that breaks one fails here."""

import doctest
import importlib

import pytest

MODULES = [
    "ssr_sglang.core.tree", "ssr_sglang.core.width", "ssr_sglang.core.policy", "ssr_sglang.testing.exactness",
    "ssr_sglang.srt.draft_manager", "ssr_sglang.srt.overlap",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no examples to run"
    assert result.failed == 0


def test_every_module_with_examples_is_listed():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    found = {str(p.relative_to(root).with_suffix("")).replace("/", ".")
             for p in (root / "ssr_sglang").rglob("*.py") if ">>> " in p.read_text()}
    assert found <= set(MODULES), sorted(found - set(MODULES))
