"""Fine-tune a LoRA on the distilled rows so SmolLM2 reasons inside ``<think>`` … ``</think>``, then answers.

A row becomes: the reasoner's chat prompt (which ends with ``<think>\\n``, :data:`GENERATION_PROMPT`),
then the reasoning, :data:`THINK_CLOSE`, the answer and ``<|im_end|>``; the loss is on everything after
the prompt. Each piece is tokenized on its own, so the think end is always the same tokens as
``SSR_THINK_END=</think>`` encodes to. One CPU core, the bfloat16 base with float32 LoRAs on its top layers, AdamW,
batch 1 with gradient accumulation.

``python -m ssr_sglang.models.smollm2_reasoner train DATA.jsonl ADAPTER.safetensors``
"""

from __future__ import annotations

import json
import random
import re
import time
from pathlib import Path

from ssr_sglang.models.smollm2_reasoner import lora

THINK_OPEN = "<think>\n"
THINK_CLOSE = "\n</think>\n\n"
BASE_GEN_PROMPT = "<|im_start|>assistant\n"
GENERATION_PROMPT = BASE_GEN_PROMPT + THINK_OPEN


def reasoner_chat_template(base_template: str) -> str:
    """The base chat template with the generation prompt opening the think block (as DeepSeek-R1's does)."""
    old = "{{ '" + BASE_GEN_PROMPT.replace("\n", "\n") + "' }}"
    if old not in base_template:
        raise ValueError("unexpected SmolLM2 chat template: no '<|im_start|>assistant\\n' generation prompt")
    return base_template.replace(old, "{{ '" + GENERATION_PROMPT + "' }}")


def encode_row(tok, row: dict, template: str) -> tuple:
    """``(input_ids, n_prompt)`` of one distilled row."""
    prompt = tok.apply_chat_template(row["messages"], chat_template=template, add_generation_prompt=True,
                                     tokenize=False)
    enc = lambda s: tok(s, add_special_tokens=False).input_ids  # noqa: E731
    p = enc(prompt)
    target = enc(row["reasoning"].strip()) + enc(THINK_CLOSE) + enc(row["answer"].strip()) + [tok.eos_token_id]
    return p + target, len(p)


def usable_answer(row: dict):
    """The row's answer to train on, or None: a finished answer as it is; an unfinished one cut after its
    first complete ```python block (the base model often rambles on after its code)."""
    if row.get("usable"):
        return row["answer"]
    a = row["answer"]
    start = a.find("```python\n")
    end = a.find("\n```", start + 10) if start >= 0 else -1
    return a[:end + 4] if end >= 0 and len(row["reasoning"]) > 120 else None


def load_rows(path: Path) -> list:
    """The distilled rows that have an answer to train on (:func:`usable_answer`), with that answer."""
    rows = [json.loads(l) for l in Path(path).read_text().splitlines() if l.strip()]
    return [{**r, "answer": a} for r in rows if (a := usable_answer(r)) is not None]


def cut_after_list(row: dict):
    """A copy of ``row`` whose reasoning stops right after a numbered item, or None when it has fewer than two.

    The base model's habit is to end a numbered list with end-of-sequence; these copies teach the step from
    a list item to the think end instead. The cut is after the last item when text follows it, else after the
    one before it. Example: ``"Plan.\n1. a\n2. b\nSo c."`` -> ``"Plan.\n1. a\n2. b"``.
    """
    lines = row["reasoning"].strip().split("\n")
    items = [i for i, line in enumerate(lines) if re.match(r"\d+\.\s", line.strip())]
    if len(items) < 2:
        return None
    cut = items[-1] if items[-1] < len(lines) - 1 else items[-2]
    return {**row, "id": row["id"] + "/cut", "reasoning": "\n".join(lines[:cut + 1])}


def with_cut_copies(rows: list) -> list:
    """``rows`` and, for each HumanEval row (whose reasoning is distilled), its :func:`cut_after_list` copy."""
    cuts = [c for r in rows if r["id"].startswith("HumanEval/") and (c := cut_after_list(r)) is not None]
    return rows + cuts


def train(data_path: Path, out_path: Path, epochs: int = 3, lr: float = 1e-3, accum: int = 2, r: int = 8,
          alpha: float = 16.0, seed: int = 0, max_target: int = 512, first_layer: int = 18,
          cut_copies: bool = True) -> dict:
    """Train and save the adapter to ``out_path``; returns ``{"steps", "loss_first", "loss_last", "seconds"}``.
    Each example keeps its whole prompt and at most ``max_target`` tokens after it (a long ClassEval answer is
    trained on its start: the reasoning, the think end and the first part of the class)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ssr_sglang.testing.smollm2 import cached_smollm2

    torch.manual_seed(seed)
    base = cached_smollm2()
    tok = AutoTokenizer.from_pretrained(base)
    template = reasoner_chat_template(tok.chat_template)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.bfloat16)  # the weights as served
    model.config.use_cache = False
    wrapped = lora.wrap(model, r, alpha, first_layer)
    params = [p for m in wrapped.values() for p in (m.lora_A, m.lora_B)]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    rows = load_rows(data_path)
    examples = [encode_row(tok, row, template) for row in (with_cut_copies(rows) if cut_copies else rows)]
    examples = [(ids[:n + max_target], n) for ids, n in examples]
    total = epochs * len(examples) // accum
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10) * max(0.05, 1 - s / max(total, 1)))
    rng, losses, t0, step = random.Random(seed), [], time.time(), 0
    model.train()
    for ep in range(epochs):
        order = list(range(len(examples)))
        rng.shuffle(order)
        for k, i in enumerate(order):
            ids, n = examples[i]
            x = torch.tensor([ids])
            labels = x.clone()
            labels[0, :n] = -100
            loss = model(input_ids=x, labels=labels).loss
            (loss / accum).backward()
            losses.append(loss.item())
            if (k + 1) % accum == 0:
                torch.nn.utils.clip_grad_norm_(params, 1.0)
                opt.step(), sched.step(), opt.zero_grad()
                step += 1
                if step % 10 == 0:
                    print(f"epoch {ep} step {step}/{total} loss {sum(losses[-40:]) / len(losses[-40:]):.3f} "
                          f"{time.time() - t0:.0f}s", flush=True)
    lora.save(wrapped, out_path, r, alpha)
    head, tail = losses[:40], losses[-40:]
    return {"steps": step, "epochs": epochs, "examples": len(examples), "cut_copies": cut_copies, "max_target": max_target,
            "first_layer": first_layer, "r": r,
            "alpha": alpha, "lr": lr,
            "loss_first": sum(head) / len(head), "loss_last": sum(tail) / len(tail), "seconds": time.time() - t0}
