"""The CPU stand-in for the xgrammar backend's ``apply_vocab_mask`` (:mod:`ssr_sglang.cpu.grammar_ops`)."""

from __future__ import annotations

import pytest
import torch

from ssr_sglang.cpu import grammar_ops


def _mask(vocab: int, allowed: list, rows: int = 2) -> torch.Tensor:
    words = (vocab + 31) // 32
    m = torch.zeros(rows, words, dtype=torch.int32)
    for r in range(rows):
        for t in allowed:
            m[r, t // 32] |= (1 << (t % 32)) if t % 32 != 31 else -(1 << 31)
    return m


def test_cpu_logits_are_masked_in_place():
    pytest.importorskip("xgrammar")
    logits = torch.arange(2 * 70, dtype=torch.float32).view(2, 70)
    allowed = [0, 31, 32, 69]
    out = grammar_ops.apply_vocab_mask(lambda *a: pytest.fail("SGLang's function called for CPU logits"),
                                       logits, _mask(70, allowed))
    assert out is None
    kept = torch.isfinite(logits)
    assert kept.sum(dim=1).tolist() == [4, 4]
    assert torch.nonzero(kept[0]).flatten().tolist() == allowed
    assert logits[1, 69].item() == 139.0


def test_other_devices_go_to_sglang():
    calls = []
    fake = type("Logits", (), {"device": torch.device("meta")})()
    grammar_ops.apply_vocab_mask(lambda logits, mask: calls.append((logits, mask)), fake, "mask")
    assert calls == [(fake, "mask")]
