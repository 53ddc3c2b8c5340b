"""Servers, models and HTTP helpers for tests and benchmarks (not used by the plugin)."""

from __future__ import annotations

import contextlib
from pathlib import Path


@contextlib.contextmanager
def file_lock(path: Path):
    """Hold an exclusive ``flock`` on ``path`` (created if missing): processes that build the same cached
    artefact (pytest-xdist workers, a test beside a benchmark) build it once, the others wait and reuse it."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
