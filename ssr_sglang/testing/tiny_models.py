"""Build small random-init reasoning-style models that SGLang can load, with no model hub.

Each folder holds a ``config.json`` (``Qwen3ForCausalLM``, ``LlamaForCausalLM``, or the hybrid
``Qwen3_5ForCausalLM``: Gated DeltaNet layers with a full-attention layer every fourth), safetensors weights,
and a byte-level BPE tokenizer trained locally with ``tokenizers`` that knows ``<think>`` and
``</think>`` as single tokens, plus a chat template that opens a think block.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

from ssr_sglang import settings
from ssr_sglang.models.tokenizer_files import train_chat_tokenizer


QWEN3_5_FULL_ATTENTION_INTERVAL = 4


def _corpus(seed: int, n_lines: int = 3000) -> list[str]:
    rng = random.Random(seed)
    words = (
        "the a reasoning answer class def return self value list count item total step first then "
        "so because check add sum table row name id price qty def init get set print for in if else"
    ).split()
    lines = []
    for _ in range(n_lines):
        k = rng.randint(4, 14)
        lines.append(" ".join(rng.choice(words) for _ in range(k)) + rng.choice([".", ":", "", "()"]))
        if rng.random() < 0.2:
            lines.append(f"{rng.randint(0, 999)} + {rng.randint(0, 999)} = {rng.randint(0, 1999)}")
    return lines


def train_tokenizer(out_dir: str | os.PathLike, vocab_size: int = 512, seed: int = 0):
    """Train a byte-level BPE chat tokenizer on a small random corpus and save it to ``out_dir``."""
    return train_chat_tokenizer(_corpus(seed), out_dir, vocab_size)


def build_tiny_model(
    out_dir: str | os.PathLike,
    arch: str = "qwen3",
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 128,
    vocab_size: int = 512,
    max_position_embeddings: int = 4096,
    init_std: float = 0.2,
    seed: int = 0,
) -> Path:
    """Write a random-init model folder that SGLang loads (about 0.1M parameters by default).

    ``init_std`` 0.2 (not the usual 0.02) makes greedy output varied instead of one repeated token,
    which tests of speculative decoding need: some n-gram repeats, no trivial full acceptance.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(out, vocab_size=vocab_size, seed=seed)
    common = dict(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_position_embeddings,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="bfloat16",
        initializer_range=init_std,
    )
    if arch == "qwen3":
        config, cls = Qwen3Config(head_dim=hidden_size // num_heads, **common), Qwen3ForCausalLM
    elif arch == "llama":
        config, cls = LlamaConfig(**common), LlamaForCausalLM
    elif arch == "qwen3_5":  # hybrid: at least 4 layers, each fourth full attention, the others Gated DeltaNet
        from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

        common["num_hidden_layers"] = n = max(num_layers, QWEN3_5_FULL_ATTENTION_INTERVAL)
        head_dim = hidden_size // num_heads
        types = ["full_attention" if (i + 1) % QWEN3_5_FULL_ATTENTION_INTERVAL == 0 else "linear_attention"
                 for i in range(n)]
        config = Qwen3_5TextConfig(head_dim=head_dim, layer_types=types, linear_conv_kernel_dim=4,
                                   linear_key_head_dim=head_dim, linear_value_head_dim=head_dim,
                                   linear_num_key_heads=num_kv_heads, linear_num_value_heads=num_heads, **common)
        cls = Qwen3_5ForCausalLM
    else:
        raise ValueError(f"arch must be 'qwen3', 'llama' or 'qwen3_5', got {arch!r}")
    torch.manual_seed(seed)
    model = cls(config).to(torch.bfloat16)
    model.save_pretrained(str(out), safe_serialization=True)
    _write_rope_theta(out / "config.json")
    if arch == "qwen3_5":  # SGLang's Qwen3.5 config reads the interval, transformers writes layer_types only
        cfg = json.loads((out / "config.json").read_text())
        cfg["full_attention_interval"] = QWEN3_5_FULL_ATTENTION_INTERVAL
        (out / "config.json").write_text(json.dumps(cfg, indent=2))
    (out / "generation_config.json").unlink(missing_ok=True)
    return out


def _write_rope_theta(config_path: Path, default: float = 10000.0) -> None:
    """transformers 5.x writes only ``rope_parameters``; SGLang also reads a top-level ``rope_theta``."""
    cfg = json.loads(config_path.read_text())
    rope = cfg.get("rope_parameters") or {}
    cfg.setdefault("rope_theta", rope.get("rope_theta", default))
    config_path.write_text(json.dumps(cfg, indent=2))


def cached_tiny_model(arch: str = "qwen3", root: str | os.PathLike | None = None, **kwargs) -> Path:
    """Build once into ``root`` (default: ``$SSR_TEST_MODEL_DIR`` or ``.cache/test-models``), then reuse."""
    root = Path(root or settings.get("SSR_TEST_MODEL_DIR"))
    tag = "-".join(f"{k}{v}" for k, v in sorted(kwargs.items()))
    out = root / (f"tiny-{arch}" + (f"-{tag}" if tag else ""))
    def built() -> bool:
        return (out / "model.safetensors").exists() and (out / "tokenizer.json").exists()

    if not built():
        from ssr_sglang.testing import file_lock

        with file_lock(out.parent / (out.name + ".lock")):  # concurrent callers (xdist workers) build it once
            if not built():  # built beside it and renamed, so a reader never sees a half-written folder
                tmp = out.with_name(out.name + ".building")
                shutil.rmtree(tmp, ignore_errors=True)
                shutil.rmtree(out, ignore_errors=True)
                build_tiny_model(tmp, arch=arch, **kwargs)
                tmp.rename(out)
    return out


if __name__ == "__main__":
    import sys

    print(cached_tiny_model(sys.argv[1] if len(sys.argv) > 1 else "qwen3"))
