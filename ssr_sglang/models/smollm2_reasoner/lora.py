"""A minimal LoRA for the Llama linear layers of SmolLM2: wrap, train, save, load, merge.

``W x`` becomes ``W x + (alpha / r) B (A x)`` with ``A`` (r x in) random and ``B`` (out x r) zero at the
start, so an untrained adapter changes nothing. Adapter files are safetensors holding
``<module>.lora_A`` / ``<module>.lora_B`` in float32 and the rank and alpha in their metadata.
"""

from __future__ import annotations

import math
from pathlib import Path

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "down_proj")


def _lora_class():
    import torch

    class _LoRALinear(torch.nn.Module):
        def __init__(self, base: torch.nn.Linear, r: int, alpha: float):
            super().__init__()
            self.base, self.scale = base, alpha / r
            self.lora_A = torch.nn.Parameter(torch.empty(r, base.in_features))
            self.lora_B = torch.nn.Parameter(torch.zeros(base.out_features, r))
            torch.nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))

        def forward(self, x):
            delta = (x.float() @ self.lora_A.t() @ self.lora_B.t()) * self.scale
            return self.base(x) + delta.to(x.dtype)

    return _LoRALinear


def wrap(model, r: int = 8, alpha: float = 16.0, first_layer: int = 0) -> dict:
    """Freeze ``model`` and put a LoRA (float32) on every :data:`TARGETS` linear of decoder layers
    ``first_layer`` and up; ``{name: lora module}``. Nothing below ``first_layer`` needs gradients, so
    backward stops there."""
    cls = _lora_class()
    for p in model.parameters():
        p.requires_grad_(False)
    wrapped = {}
    for name, mod in list(model.named_modules()):
        for child_name, child in list(mod.named_children()):
            if child_name in TARGETS and _layer_index(name) >= first_layer:
                lora = cls(child, r, alpha)
                setattr(mod, child_name, lora)
                wrapped[f"{name}.{child_name}"] = lora
    return wrapped


def _layer_index(name: str) -> int:
    parts = name.split(".")
    return int(parts[parts.index("layers") + 1]) if "layers" in parts else -1


def save(wrapped: dict, path: Path, r: int, alpha: float) -> None:
    from safetensors.torch import save_file

    tensors = {}
    for name, m in wrapped.items():
        tensors[f"{name}.lora_A"] = m.lora_A.detach().float().contiguous()
        tensors[f"{name}.lora_B"] = m.lora_B.detach().float().contiguous()
    save_file(tensors, str(path), metadata={"r": str(r), "alpha": str(alpha)})


def deltas(path: Path) -> dict:
    """``{"<module>.weight": float32 delta}`` from an adapter file; raises ``ValueError`` when the file is
    not a readable adapter (corrupt, truncated, pairs missing)."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            r, alpha = int(meta["r"]), float(meta["alpha"])
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as e:  # safetensors raises several types for a damaged file
        raise ValueError(f"{path} is not a readable LoRA adapter ({type(e).__name__}: {e})") from e
    out = {}
    for key in tensors:
        if key.endswith(".lora_A"):
            mod = key[:-len(".lora_A")]
            b = tensors.get(mod + ".lora_B")
            if b is None or b.shape[1] != r or tensors[key].shape[0] != r:
                raise ValueError(f"{path}: {mod} has no matching lora_B of rank {r}")
            out[mod + ".weight"] = (b.float() @ tensors[key].float()) * (alpha / r)
    if not out:
        raise ValueError(f"{path} holds no LoRA pairs")
    return out
