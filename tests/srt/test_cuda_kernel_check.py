"""SSR on CUDA refuses to start without the kernels that verify sampled requests (flashinfer), naming them
and the fallback flag; ``SSR_GREEDY_ONLY=1`` starts anyway and refuses sampled requests with a 400."""

import types

import pytest

from ssr_sglang.srt import spec


def test_cuda_without_flashinfer_refuses_to_start(monkeypatch):
    monkeypatch.delenv("SSR_GREEDY_ONLY", raising=False)
    with pytest.raises(ValueError) as e:
        spec.check_cuda_kernels("cuda", has_module=lambda name: name != "flashinfer")
    msg = str(e.value)
    assert "flashinfer" in msg and "tree_speculative_sampling_target_only" in msg and "SSR_GREEDY_ONLY=1" in msg


def test_cuda_with_flashinfer_and_other_devices_start(monkeypatch):
    monkeypatch.delenv("SSR_GREEDY_ONLY", raising=False)
    spec.check_cuda_kernels("cuda:0", has_module=lambda name: True)
    spec.check_cuda_kernels("cpu", has_module=lambda name: False)


def test_greedy_only_starts_and_refuses_sampled_requests(monkeypatch):
    monkeypatch.setenv("SSR_GREEDY_ONLY", "1")
    spec.check_cuda_kernels("cuda", has_module=lambda name: False)
    greedy = types.SimpleNamespace(temperature=1.0, top_k=1)  # SGLang's normalized temperature 0
    spec.check_request_sampling(greedy, "cuda")
    with pytest.raises(ValueError, match="sampling_params.temperature"):
        spec.check_request_sampling(types.SimpleNamespace(temperature=0.6, top_k=20), "cuda")
    spec.check_request_sampling(types.SimpleNamespace(temperature=0.6, top_k=20), "cpu")  # CPU verifies them
