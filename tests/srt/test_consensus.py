"""Rank consensus (ssr_sglang.srt.consensus): two real gloo ranks compare their decision digests."""

from __future__ import annotations

import multiprocessing as mp
import os

import pytest

from ssr_sglang.srt import consensus


def _rank(rank: int, port: int, diverge_at: int, out) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        con = consensus.RankConsensus(rank, 2, 1, consensus._torch_gather(dist.group.WORLD))
        for step in range(5):
            con.note_state("req-1", ("reasoning", (("req-1#ssr-0000", 16, False, False, False),), step))
            tokens = bytes([step, 7 if rank == 0 or step != diverge_at else 8])
            con.record("verify", tokens, "tree")
            con.step()
        out.put((rank, "ok", con.summary()))
    except consensus.RankDivergence as e:
        out.put((rank, "diverged", str(e)))
    finally:
        dist.destroy_process_group()


def _run(diverge_at: int) -> dict:
    from ssr_sglang.testing.server import free_port

    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_rank, args=(r, port, diverge_at, out)) for r in (0, 1)]
    for p in procs:
        p.start()
    results = {}
    for _ in procs:
        rank, status, detail = out.get(timeout=120)
        results[rank] = (status, detail)
    for p in procs:
        p.join(timeout=30)
    return results


@pytest.mark.slow  # two spawned gloo ranks
def test_ranks_that_agree_pass_every_check():
    results = _run(diverge_at=-1)
    for rank in (0, 1):
        status, summary = results[rank]
        assert status == "ok", summary
        assert summary["checks"] == 5 and summary["agreed"] and summary["records"] == 10
    assert results[0][1]["rank_digests"] == results[1][1]["rank_digests"]


@pytest.mark.slow  # two spawned gloo ranks
def test_a_divergent_tree_stops_every_rank_at_that_step():
    results = _run(diverge_at=2)
    for rank in (0, 1):
        status, message = results[rank]
        assert status == "diverged"
        assert "diverged across tensor-parallel ranks at scheduler step 3" in message


def test_check_every_validated(monkeypatch):
    monkeypatch.setenv(consensus.EVERY_ENV, "-2")
    with pytest.raises(ValueError, match=consensus.EVERY_ENV):
        consensus.check_every()
    monkeypatch.setenv(consensus.EVERY_ENV, "0")
    assert consensus.check_every() == 0
    monkeypatch.delenv(consensus.EVERY_ENV)
    assert consensus.check_every() == 1
