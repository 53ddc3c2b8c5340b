"""The bundled tiny reasoning models (see ``tiny-reasoner/MODEL_CARD.md``, dense, and
``tiny-hybrid-reasoner/MODEL_CARD.md``, Qwen3.5 hybrid) and their task generator."""

from pathlib import Path

BUNDLED_MODELS_ROOT = Path(__file__).resolve().parent
BUNDLED_MODEL_DIR = BUNDLED_MODELS_ROOT / "tiny-reasoner"
BUNDLED_HYBRID_MODEL_DIR = BUNDLED_MODELS_ROOT / "tiny-hybrid-reasoner"


def bundled_model_path(hybrid: bool = False) -> str:
    return str(BUNDLED_HYBRID_MODEL_DIR if hybrid else BUNDLED_MODEL_DIR)
