"""The bundled tiny reasoning model (see ``tiny-reasoner/MODEL_CARD.md``) and its task generator."""

from pathlib import Path

BUNDLED_MODEL_DIR = Path(__file__).resolve().parent / "tiny-reasoner"


def bundled_model_path() -> str:
    return str(BUNDLED_MODEL_DIR)
