"""SuffixIndex / MatchCursor vs a brute-force longest-suffix-match reference."""

import random

import pytest
from hypothesis import given, settings, strategies as st

from ssr_sglang.core.suffix_index import SuffixIndex


def brute_match(sources, context, max_span, min_match, window):
    """sources: list of (source_id, priority, tokens) in the order added."""
    ctx = list(context)[-window:] if window else []
    best = None
    for order, (sid, prio, toks) in enumerate(sources):
        found = None
        for length in range(len(ctx), 0, -1):
            pat = ctx[len(ctx) - length:]
            # earliest occurrence that is followed by at least one token
            for end in range(length - 1, len(toks) - 1):
                if toks[end - length + 1:end + 1] == pat:
                    found = (length, end + 1)
                    break
            if found:
                break
        if found and found[0] >= max(1, min_match):
            key = (found[0], prio, order)
            if best is None or key > best[0]:
                best = (key, sid, found[1])
    if best is None:
        return None
    (length, _, _), sid, pos = best
    toks = next(t for s, _, t in sources if s == sid)
    return length, sid, pos, toks[pos:pos + max_span]


def as_tuple(m):
    return None if m is None else (m.length, m.source_id, m.position, m.span)


tokens_st = st.lists(st.integers(0, 3), max_size=40)


@settings(max_examples=300, deadline=None)
@given(
    srcs=st.lists(st.tuples(st.sampled_from([0, 0, 1, -1]), tokens_st), min_size=1, max_size=4),
    context=st.lists(st.integers(0, 3), max_size=30),
    window=st.sampled_from([1, 2, 5, 64]),
    max_span=st.integers(0, 6),
    min_match=st.integers(1, 4),
    split=st.integers(0, 40),
)
def test_match_equals_brute_force(srcs, context, window, max_span, min_match, split):
    idx = SuffixIndex(max_context=window)
    sources = []
    for sid, (prio, toks) in enumerate(srcs):
        idx.add_source(sid * 3 + 1, prio)
        idx.extend(sid * 3 + 1, toks[:split])
        idx.extend(sid * 3 + 1, toks[split:])
        sources.append((sid * 3 + 1, prio, toks))
    got = as_tuple(idx.match(context, max_span, min_match))
    assert got == brute_match(sources, context, max_span, min_match, window)
    # matches(): the per-source list starts with the best one
    all_m = idx.matches(context, max_span, min_match)
    assert (as_tuple(all_m[0]) if all_m else None) == got
    assert len({m.source_id for m in all_m}) == len(all_m)


@settings(max_examples=150, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["ctx", "ext", "add"]), st.integers(0, 3),
                              st.lists(st.integers(0, 3), max_size=6)), max_size=40),
       window=st.sampled_from([3, 64]))
def test_cursor_tracks_growing_sources(ops, window):
    """An incremental cursor equals the stateless match after any interleaving."""
    idx = SuffixIndex(max_context=window)
    cur = idx.cursor()
    sources = []
    context = []
    for op, which, toks in ops:
        if op == "add" or not sources:
            sid = len(sources)
            idx.add_source(sid)
            sources.append((sid, 0, []))
        if op == "ext":
            sid, _, stoks = sources[which % len(sources)]
            idx.extend(sid, toks)
            stoks.extend(toks)
        elif op == "ctx":
            cur.feed(toks)
            context.extend(toks)
        m = as_tuple(cur.best(4, 1))
        assert m == brute_match(sources, context, 4, 1, window)


def test_cap_and_bookkeeping():
    idx = SuffixIndex(max_tokens=10)
    idx.add_source(0)
    idx.add_source(1)
    assert idx.extend(0, [1, 2, 3, 4, 5, 6]) == 6
    assert idx.extend(1, [1, 2, 3, 4, 5, 6]) == 4
    assert idx.extend(1, [7]) == 0
    assert idx.tokens(1) == [1, 2, 3, 4]
    assert idx.total_tokens == 10
    with pytest.raises(ValueError):
        idx.add_source(0)
    idx.remove_source(0)
    assert idx.extend(1, [5, 6, 7]) == 3
    assert 0 not in idx and 1 in idx


def test_ties_prefer_recent_then_priority():
    idx = SuffixIndex()
    for sid in (5, 2):
        idx.add_source(sid)
        idx.extend(sid, [1, 2, 3, 9 + sid])
    m = idx.match([7, 2, 3], 2)
    assert (m.length, m.source_id, m.span) == (2, 2, [11])  # 2 was added last
    idx.add_source(9, priority=-1)
    idx.extend(9, [2, 3, 42])
    assert idx.match([2, 3], 2).source_id == 2  # lower priority loses tie
    idx.add_source(8, priority=1)
    idx.extend(8, [3, 43])
    m = idx.match([2, 3], 2)
    assert m.source_id == 2 and m.length == 2  # longer match beats priority
    assert idx.match([9, 3], 2).source_id == 8  # equal length: priority wins


def test_match_at_end_falls_back_to_usable_occurrence():
    idx = SuffixIndex()
    idx.add_source(0)
    idx.extend(0, [1, 2, 5, 1, 2, 3])
    # [3], [2,3], [1,2,3] occur only at the very end: nothing follows them
    assert idx.match([1, 2, 3], 3) is None
    # [1,2] occurs twice; the earliest occurrence has the longest continuation
    m = idx.match([0, 1, 2], 3)
    assert (m.length, m.position, m.span) == (2, 2, [5, 1, 2])
    idx.extend(0, [4])  # now [1,2,3] is followed by 4
    assert as_tuple(idx.match([1, 2, 3], 3)) == (3, 0, 6, [4])


def test_long_random_source_spot_check():
    rng = random.Random(0)
    toks = [rng.randrange(50) for _ in range(3000)]
    idx = SuffixIndex()
    idx.add_source(0)
    idx.extend(0, toks)
    for _ in range(50):
        i = rng.randrange(10, 2990)
        ctx = [99] + toks[i - 8:i]
        m = idx.match(ctx, 5, 1)
        assert m is not None and m.length == 8
        assert toks[m.position - 8:m.position] == toks[i - 8:i]
        assert m.position <= i  # earliest occurrence
        assert m.span == toks[m.position:m.position + 5]


@settings(max_examples=300, deadline=None)
@given(
    srcs=st.lists(st.tuples(st.sampled_from([0, 1, -1]), tokens_st), min_size=1, max_size=4),
    context=st.lists(st.integers(0, 3), max_size=30),
    window=st.sampled_from([1, 2, 5, 64]),
    min_match=st.integers(1, 4),
)
def test_occurrences_equal_per_source_matches(srcs, context, window, min_match):
    """occurrences(): every source's longest usable match, as matches() reports it (without spans);
    has_token(): whether a token is among a source's indexed tokens."""
    idx = SuffixIndex(max_context=window)
    for sid, (prio, toks) in enumerate(srcs):
        idx.add_source(sid, prio)
        idx.extend(sid, toks)
    got = sorted(idx.occurrences(context, min_match))
    want = sorted((m.source_id, m.length, m.position) for m in idx.matches(context, 1, min_match))
    assert got == want
    for sid, (_, toks) in enumerate(srcs):
        for t in range(5):
            assert idx.has_token(sid, t) == (t in toks)
