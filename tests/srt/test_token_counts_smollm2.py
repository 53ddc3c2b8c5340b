"""``meta_info["ssr"]``'s ``reasoning_tokens + answer_tokens == completion_tokens`` on a real model: SmolLM2-135M-
Instruct with its think block opened for it (the model never closes it: every request ends at ``max_new_tokens``
inside its reasoning, where a verify step may accept tokens past the cap) and with it closed in the prompt (no
reasoning). One SSR server."""

from __future__ import annotations

import pytest

pytest.importorskip("gguf")
pytest.importorskip("accelerate")

from conftest import start_server  # noqa: E402

pytestmark = pytest.mark.server

MARKERS = {"SSR_THINK_START": "<think>", "SSR_THINK_END": "</think>"}


def test_reasoning_and_answer_tokens_add_up_on_smollm2():
    from transformers import AutoTokenizer

    from ssr_sglang.testing.exactness import QUESTIONS
    from ssr_sglang.testing.smollm2 import cached_smollm2

    path = str(cached_smollm2())
    tok = AutoTokenizer.from_pretrained(path)

    def prompt(q, prefix):
        text = tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False)
        return tok(text + prefix, add_special_tokens=False).input_ids

    bad, phases = [], set()
    with start_server(path, "--speculative-algorithm", "SSR", env=MARKERS, name="smollm2-token-counts") as s:
        for q in QUESTIONS[:3]:
            for prefix, max_new in (("<think>\n", 61), ("<think>\nI know.\n</think>\n\n", 48)):
                out = s.generate(input_ids=prompt(q, prefix), max_new_tokens=max_new)
                meta, ssr = out["meta_info"], out["meta_info"]["ssr"]
                phases.add(ssr["phase"])
                if ssr["reasoning_tokens"] + ssr["answer_tokens"] != meta["completion_tokens"]:
                    bad.append((q[:20], max_new, meta["completion_tokens"], ssr["phase"], ssr["reasoning_tokens"],
                                ssr["answer_tokens"]))
    assert not bad, bad
    assert "reasoning" in phases, phases
