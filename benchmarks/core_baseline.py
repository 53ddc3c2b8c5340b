"""Load ``ssr_sglang/core`` as it was at a git revision, beside today's, in the same process.

The files of ``ssr_sglang/core/`` at ``rev`` (from ``git show``; nothing is checked out) are written
to a temporary folder as package ``ssr_core_baseline`` and imported, so benchmarks can put
``impl@REV`` rows next to today's in one run (``bench_core.py --baseline``,
``bench_acceptance.py --baseline``).
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "ssr_core_baseline"


def load_core(rev: str):
    """The package ``ssr_core_baseline`` holding ``ssr_sglang/core`` at git revision ``rev``."""
    if PACKAGE in sys.modules:
        raise RuntimeError(f"{PACKAGE} is already loaded (one baseline per process)")
    root = Path(tempfile.mkdtemp(prefix="ssr-core-baseline-"))
    pkg = root / PACKAGE
    pkg.mkdir()
    names = subprocess.run(["git", "-C", str(REPO), "ls-tree", "--name-only", rev, "ssr_sglang/core/"],
                           check=True, capture_output=True, text=True).stdout.split()
    for name in names:
        if name.endswith(".py"):
            text = subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:{name}"], check=True,
                                  capture_output=True, text=True).stdout
            (pkg / Path(name).name).write_text(text)
    sys.path.insert(0, str(root))
    return importlib.import_module(PACKAGE)
