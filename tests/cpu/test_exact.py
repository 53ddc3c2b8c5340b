"""Exact mode (SSR_CPU_EXACT_VERIFY=1): linear layers and the lm head give each row of a step what a
one-row step gives, bit for bit."""

import pytest
import torch

from ssr_sglang.cpu import exact


@pytest.fixture
def installed(monkeypatch):
    from sglang.srt.layers import logits_processor
    from sglang.srt.layers.quantization import unquant

    # restore SGLang's methods after the test
    monkeypatch.setattr(unquant.UnquantizedLinearMethod, "apply", unquant.UnquantizedLinearMethod.apply)
    monkeypatch.setattr(logits_processor.LogitsProcessor, "_compute_lm_head",
                        logits_processor.LogitsProcessor._compute_lm_head)
    monkeypatch.setattr(exact, "_installed", False)
    monkeypatch.setenv(exact.ENV, "1")
    exact.install()
    return unquant


def test_not_installed_unless_requested(monkeypatch):
    from sglang.srt.layers.quantization import unquant

    before = unquant.UnquantizedLinearMethod.apply
    monkeypatch.setattr(exact, "_installed", False)
    monkeypatch.delenv(exact.ENV, raising=False)
    exact.install()
    assert unquant.UnquantizedLinearMethod.apply is before


@pytest.mark.parametrize("rows", [2, 8, 16, 64, 600])
def test_linear_rows_equal_one_row_steps(installed, rows):
    torch.manual_seed(rows)
    layer = torch.nn.Module()
    layer.weight = torch.nn.Parameter((torch.randn(576, 1536) / 40).bfloat16(), requires_grad=False)
    method = installed.UnquantizedLinearMethod()
    x = torch.randn(rows, 1536).bfloat16()
    together = method.apply(layer, x)
    alone = torch.cat([method.apply(layer, x[i:i + 1]) for i in range(rows)])
    assert torch.equal(together, alone)  # 600: prompts prefilled together, as one step
