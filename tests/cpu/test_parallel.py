"""Tensor/data parallelism on the CPU engine without a server: bind groups per rank, CPU groups
without NCCL (ssr_sglang.cpu.parallel)."""

from __future__ import annotations

import pytest

from ssr_sglang.cpu import parallel


@pytest.mark.parametrize("ranks,cores,expected", [
    (1, [0, 1], "0-1"),
    (2, [0, 1], "0|1"),
    (2, [0, 1, 2, 3, 4], "0-1|2-3"),  # the remainder stays unbound
    (4, [0, 1], "0|1|0|1"),  # more ranks than cores: shared round-robin
    (2, [0, 2, 3, 8], "0,2|3,8"),
])
def test_bind_groups(ranks, cores, expected):
    assert parallel.bind_groups(ranks, cores) == expected


def _binding(monkeypatch, env: dict, world_size: int, numa_index: int) -> str:
    for key in (parallel.BIND_ENV, parallel.BIND_DEFAULTED_ENV):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(parallel, "_available_cores", lambda: [0, 1])
    import os

    return parallel._bind_groups_hook(lambda **kw: os.environ[parallel.BIND_ENV], numa_index=numa_index,
                                      world_size=world_size)


def test_default_is_widened_per_rank_and_user_setting_kept(monkeypatch):
    defaulted = {parallel.BIND_ENV: "0", parallel.BIND_DEFAULTED_ENV: "1"}
    assert _binding(monkeypatch, defaulted, world_size=1, numa_index=0) == "0"  # one rank: unchanged
    assert _binding(monkeypatch, defaulted, world_size=2, numa_index=1) == "0|1"
    # router mode: a dp_size=1 worker whose device id (base gpu id) is 1
    assert _binding(monkeypatch, defaulted, world_size=1, numa_index=1) == "0|1"
    assert _binding(monkeypatch, {parallel.BIND_ENV: "0"}, world_size=2, numa_index=1) == "0"  # the user's


def test_gloo_groups_get_no_nccl():
    seen = {}

    def original(*args, **kwargs):
        seen.update(kwargs, args=args)

    parallel._group_hook(original, [[0, 1]], 0, "gloo", group_name="tp")
    assert seen["use_pynccl"] is False and seen["use_custom_allreduce"] is False
    seen.clear()
    parallel._group_hook(original, [[0, 1]], 0, "nccl", group_name="tp")
    assert "use_pynccl" not in seen


def test_bootstrap_marks_its_default(monkeypatch):
    from ssr_sglang.cpu import bootstrap

    monkeypatch.delenv(parallel.BIND_ENV, raising=False)
    monkeypatch.delenv(parallel.BIND_DEFAULTED_ENV, raising=False)
    bootstrap.apply_cpu_env_defaults()
    import os

    assert os.environ[parallel.BIND_ENV] == "0" and os.environ[parallel.BIND_DEFAULTED_ENV] == "1"
