"""Fixes for SGLang 0.5.23 bugs that SSR servers hit, applied on every speculative server.

Each is a ``HookRegistry`` hook registered by :func:`install` (from the plugin entry point, in every
SGLang process) and is a pass-through on a server without ``--speculative-algorithm``. They apply to
SGLang's own algorithms too (NGRAM, EAGLE): the bugs are SGLang's, not SSR's.

``req_to_token`` row headroom (``get_req_to_token_extra_context_len``)
    Every speculative decode step reserves KV up to ``kv_committed_len + get_alloc_reserve_per_decode()``
    per request (``eagle_utils.eagle_prepare_for_decode``; the reserve is ``2 * max(steps * topk,
    num_draft_tokens)``, the overlap double buffer, taken on the non-overlap path too) and writes the
    new slots into the request's ``req_to_token`` row. SGLang widens that row beyond the context length
    by the reserve only for ``page_size > 1`` (and UNO); at ``page_size == 1`` it is ``context_len + 4 +
    num_draft_tokens`` wide. A request generating up to the context limit (``max_new_tokens`` clamped to
    ``context_len - prompt - 2``) then reserves past its row's end: the write runs on into the next row
    (the Triton kernel and the CPU stand-in alike address the flat table), and when the request is freed
    SGLang reads ``row[start:end]``, which stops at the row's end, so the spilled slots are never freed.
    A decode step starts at most at ``committed = context_len - 4``, so up to ``num_draft_tokens - 8``
    slots leak per such request (4 with NGRAM's and SSR's default of 12: reserve 24, headroom 16), and the
    scheduler's idle leak check (``Scheduler.on_idle``, every idle pass) raises ``pool memory leak
    detected!`` and takes the server down; the spill can also overwrite the first slots of a
    neighbouring request's row. The hook widens the row to hold the reserve at every page size (upstream:
    sgl-project/sglang issue 33579, the same bug reported for DFLASH). The table grows by a few ints
    per request slot.
"""

from __future__ import annotations

ROW_HEADROOM = "sglang.srt.mem_cache.allocation_sizing.get_req_to_token_extra_context_len"
TARGETS = (ROW_HEADROOM,)



def install() -> None:
    """Register the fixes (once per process)."""
    from ssr_sglang.hook_once import register_once

    register_once(__name__, [(ROW_HEADROOM, _row_headroom, "AROUND")])


def _row_headroom(original, *args, **kwargs) -> int:
    extra = original(*args, **kwargs)
    from sglang.srt.runtime_context import get_spec

    if get_spec().speculative_algorithm is None:
        return extra
    from sglang.srt.mem_cache.allocation_sizing import get_alloc_page_size, get_alloc_reserve_per_decode

    # nxt = committed + reserve, rounded up to a page; committed < context_len on any decode step
    return max(extra, get_alloc_reserve_per_decode() + get_alloc_page_size() - 1)
