"""The runtime wheel: the plugin and its CPU engine, without test fixtures or benchmark drivers.

The wheel is built from this checkout (``pip wheel``), unpacked, and every module it holds is imported from
the unpacked copy in a fresh interpreter (CPU engine on, so the stand-ins load as in a server process).
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LEFT_OUT = ("ssr_sglang/testing/", "ssr_sglang/main_job.py", "ssr_sglang/models/smollm2_reasoner/",
            "ssr_sglang/models/train.py")
IMPORT_ALL = """
import importlib, pkgutil, sys
root = sys.argv[1]
import ssr_sglang
assert ssr_sglang.__file__.startswith(root), ssr_sglang.__file__
failed = []
for m in pkgutil.walk_packages([root + "/ssr_sglang"], "ssr_sglang."):
    if not m.name.endswith("__main__"):
        try:
            importlib.import_module(m.name)
        except Exception as e:
            failed.append((m.name, repr(e)[:300]))
print("FAILED", failed)
print("TESTING", sorted(k for k in sys.modules if k.startswith("ssr_sglang.testing")))
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(ROOT), "-w", str(out)],
                   check=True, capture_output=True, timeout=600)
    (path,) = out.glob("ssr_sglang-*.whl")
    return path


@pytest.mark.slow
def test_wheel_leaves_out_test_fixtures_and_benchmark_drivers(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "ssr_sglang/srt/plugin.py" in names and "ssr_sglang_cpu.pth" in names
    assert any(n.startswith("ssr_sglang/models/tiny-reasoner/") for n in names)  # the bundled model ships
    shipped = [n for n in names if n.startswith(LEFT_OUT)]
    assert not shipped, shipped


@pytest.mark.slow
def test_every_module_of_the_wheel_imports_without_the_checkout(wheel, tmp_path):
    zipfile.ZipFile(wheel).extractall(tmp_path)
    env = {"PATH": "/usr/bin:/bin", "SGLANG_USE_CPU_ENGINE": "1", "PYTHONPATH": str(tmp_path), "HOME": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", IMPORT_ALL, str(tmp_path)], env=env, capture_output=True, text=True,
                       timeout=600, cwd=tmp_path)
    lines = dict(line.split(" ", 1) for line in r.stdout.splitlines() if line.startswith(("FAILED ", "TESTING ")))
    assert lines.get("FAILED") == "[]", (lines, r.stderr[-3000:])
    assert lines.get("TESTING") == "[]", lines
