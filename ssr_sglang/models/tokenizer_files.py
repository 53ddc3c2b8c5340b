"""Chat tokenizers for locally trained models (the bundled model and the test models).

Byte-level BPE trained with ``tokenizers``; ``<|endoftext|>`` (pad), ``<|im_start|>``, ``<|im_end|>`` (eos),
``<think>`` and ``</think>`` are single tokens, with a Qwen-style chat template whose generation prompt opens
a think block.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

THINK_TOKENS = ("<think>", "</think>")
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *THINK_TOKENS]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
)


def train_chat_tokenizer(texts: Iterable[str], out_dir, vocab_size: int = 512):
    """Train on ``texts``, save a ``PreTrainedTokenizerFast`` folder to ``out_dir``, and return it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=None, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", unk_token=None,
                                   additional_special_tokens=["<|im_start|>"])
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out_dir))
    keep_think_tokens_in_text(out_dir)
    return fast


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
