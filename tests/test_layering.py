"""The package's layers import downwards only: ``core/`` is engine-free (no SGLang, no torch, nothing of
the rest of the package), ``cpu/`` (the CPU engine's stand-ins) never imports ``srt/`` (the SGLang glue).
Read from the source (every import statement, function-level ones included), so a lazy import counts."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "ssr_sglang"
# layer -> module prefixes it must not import
FORBIDDEN = {
    "core": ("sglang", "torch", "ssr_sglang.srt", "ssr_sglang.cpu", "ssr_sglang.frontend", "ssr_sglang.testing"),
    "cpu": ("ssr_sglang.srt",),
}


def _imports(path: Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.lineno, node.module
            for alias in node.names:  # from ssr_sglang import srt
                yield node.lineno, f"{node.module}.{alias.name}"


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_a_layer_imports_nothing_above_it(layer):
    bad = [f"{path.relative_to(PKG.parent)}:{line}: {name}"
           for path in sorted((PKG / layer).rglob("*.py"))
           for line, name in _imports(path)
           if any(name == p or name.startswith(p + ".") for p in FORBIDDEN[layer])]
    assert not bad, "\n".join(bad)
