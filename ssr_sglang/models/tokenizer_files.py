"""Tokenizer-folder fix-ups shared by the bundled model's trainer and the test-model builder."""

from __future__ import annotations

import json
from pathlib import Path

THINK_TOKENS = ("<think>", "</think>")


def keep_think_tokens_in_text(folder) -> None:
    """Mark ``<think>``/``</think>`` as added but not *special* tokens, as Qwen3's tokenizer does.

    Special tokens are dropped when text is detokenized (``skip_special_tokens``), and then
    ``--reasoning-parser`` never sees the think end and puts the whole reply in ``reasoning_content``.
    Token ids do not change.
    """
    folder = Path(folder)
    tok_path = folder / "tokenizer.json"
    data = json.loads(tok_path.read_text())
    for added in data.get("added_tokens", []):
        if added["content"] in THINK_TOKENS:
            added["special"] = False
    tok_path.write_text(json.dumps(data, ensure_ascii=False, indent=2))
    cfg_path = folder / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    for key in ("extra_special_tokens", "additional_special_tokens"):
        if isinstance(cfg.get(key), list):
            cfg[key] = [t for t in cfg[key] if t not in THINK_TOKENS]
    cfg_path.write_text(json.dumps(cfg, indent=2))
