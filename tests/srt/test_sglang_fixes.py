"""The SGLang 0.5.23 fixes the plugin applies on every speculative server (ssr_sglang.srt.sglang_fixes)."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from ssr_sglang.srt import sglang_fixes


@pytest.fixture
def sizing(monkeypatch):
    """``allocation_sizing`` reading a speculative configuration set by the test (no server)."""
    import sglang.srt.runtime_context as rc
    from sglang.srt.mem_cache import allocation_sizing as sz

    conf = {}

    def spec():
        return NS(speculative_algorithm=conf["algo"], speculative_num_steps=conf.get("steps"),
                  speculative_eagle_topk=conf.get("topk"), speculative_num_draft_tokens=conf["n"],
                  max_speculative_num_draft_tokens=None)

    monkeypatch.setattr(sz, "get_spec", spec)
    monkeypatch.setattr(rc, "get_spec", spec)
    monkeypatch.setattr(sz, "get_schedule", lambda: NS(page_size=conf.get("page", 1)))
    monkeypatch.setattr(sz, "get_parallel", lambda: NS(attn_dcp_size=1))
    monkeypatch.setattr(sz, "max_speculative_num_draft_tokens", lambda: conf["n"])

    def headroom(**kw):
        conf.clear()
        conf.update(kw)
        original = sz.get_req_to_token_extra_context_len
        original = getattr(original, "__wrapped__", original)  # SGLang's own, whether or not hooks are applied
        return original(), sglang_fixes._row_headroom(original), sz.get_alloc_reserve_per_decode()

    return headroom


# (SSR's decode steps are NGRAM's: the same reserve; its algorithm is only registered inside a server)
@pytest.mark.parametrize("algo,n,steps,topk", [("NGRAM", 12, None, None), ("NGRAM", 16, None, None),
                                               ("EAGLE", 8, 7, 1)])
def test_row_holds_the_decode_reserve_at_page_size_1(sizing, algo, n, steps, topk):
    """SGLang's row headroom is ``4 + num_draft_tokens`` at page size 1, less than the ``2 * num_draft_tokens``
    reserved past the committed length each decode step (the bug: 16 < 24 with 12 draft tokens). The last
    decode step of a request starts at most at ``context_len - 4``, so a reserve past ``4 + n`` spilled."""
    sglang_own, fixed, reserve = sizing(algo=algo, n=n, steps=steps, topk=topk)
    assert sglang_own == 4 + n < reserve  # what SGLang 0.5.23 sizes, and why it spilled
    assert fixed >= reserve
    # the furthest any decode step reserves: committed <= context_len - 4, plus the reserve
    context_len = 160
    assert context_len - 4 + reserve <= context_len + fixed


def test_no_change_without_speculation_or_where_sglang_already_fits(sizing):
    sglang_own, fixed, _ = sizing(algo=None, n=None)
    assert fixed == sglang_own == 4
    sglang_own, fixed, reserve = sizing(algo="EAGLE", n=4, steps=3, topk=1)  # reserve 8 fits 4 + 4
    assert fixed == sglang_own == 8 == reserve
    sglang_own, fixed, reserve = sizing(algo="NGRAM", n=12, page=16)  # SGLang widens for pages > 1 itself
    assert fixed == sglang_own == reserve + 15
