"""DraftProposer behaviour and a rule-based fuzz of its API."""

import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from ssr_sglang.core.proposer import ANSWER_ID, DraftProposer, ProposerConfig
from ssr_sglang.core.tree import trie_size


def test_prefix_then_suffix_and_stats():
    p = DraftProposer(ProposerConfig(max_tokens=4, min_match=1))
    d = p.add_draft([10, 11, 12, 13, 14, 15, 16])
    prop = p.propose([], 8)
    assert (prop.tokens, prop.kind, prop.draft_id) == ([10, 11, 12, 13], "prefix", d)
    p.record(4)
    prop = p.propose([10, 11, 12, 13, 14], 2)
    assert prop.tokens == [15, 16] and prop.kind == "prefix"
    p.record(1)
    # mismatch at position 6: the draft is no longer aligned -> suffix
    prop = p.propose([10, 11, 12, 13, 14, 15, 99, 13], 3)
    assert p.aligned_drafts() == []
    # the answer's last token 13 occurs at draft index 3 (near where the draft stopped agreeing)
    assert (prop.kind, prop.tokens) == ("suffix", [14, 15, 16])
    p.record(2)
    s = p.stats
    assert (s.steps, s.accepted_prefix, s.accepted_suffix, s.per_draft) == (3, 5, 2, {d: 7})


def test_newest_aligned_draft_wins_and_late_alignment():
    p = DraftProposer(ProposerConfig(max_tokens=3))
    a = p.add_draft([1, 2, 3, 4])
    b = p.add_draft([1, 2, 3, 5])
    assert p.propose([1], 3).draft_id == b
    assert p.propose([1, 2, 3, 4], 3).tokens == []  # a exhausted, b dealigned
    assert p.aligned_drafts() == [a]
    c = p.add_draft([1, 2, 3, 4, 7, 8])  # added late, consistent with the answer
    d = p.add_draft([1, 9, 3, 4, 7, 9])  # added late, inconsistent
    assert p.aligned_drafts() == [c, a]
    prop = p.propose([1, 2, 3, 4], 3)
    assert (prop.draft_id, prop.tokens) == (c, [7, 8])
    assert d not in p.aligned_drafts()


def test_growing_draft_and_answer_reset():
    p = DraftProposer(ProposerConfig(max_tokens=5))
    d = p.add_draft([])
    assert p.propose([1, 2], 5).tokens == []
    p.extend_draft(d, [1, 2, 3])
    assert p.propose([1, 2], 5).tokens == [3]
    p.extend_draft(d, [4, 5])
    assert p.propose([1, 2, 3], 5).tokens == [4, 5]
    # answer that is not an extension (e.g. request restarted) is handled
    assert p.propose([1], 5).tokens == [2, 3, 4, 5]
    p.extend_draft(d, [6])
    assert p.propose([1, 2, 3, 4, 5, 6], 5).tokens == []


def test_cursor_resumes_near_where_the_draft_stopped_agreeing():
    # "7 1 2 3" occurs twice in the draft; the earliest occurrence is far before the edit
    draft = [7, 1, 2, 3, 40, 41, 42] + [50 + i for i in range(20)] + [7, 1, 2, 3, 60, 61, 62, 63]
    answer = draft[:27] + [99]  # the answer replaces the draft's second 7 ...
    p = DraftProposer(ProposerConfig(max_tokens=4, answer_source=False))
    d = p.add_draft(draft)
    assert p.propose(answer, 4).tokens == []  # 99 occurs nowhere
    answer += [1, 2, 3]  # ... and goes on as the draft does
    prop = p.propose(answer, 4)
    assert (prop.kind, prop.draft_id, prop.tokens) == ("suffix", d, [60, 61, 62, 63])
    p.record(4)
    # the cursor moved with the answer: the next step continues there
    prop = p.propose(answer + [60, 61, 62, 63], 4)
    assert prop.tokens == [] and p.cursor_drafts() == [d]  # the draft is exhausted
    p.extend_draft(d, [64, 65])
    assert p.propose(answer + [60, 61, 62, 63], 4).tokens == [64, 65]


def test_contributes_aligned_ahead_or_recently_used():
    p = DraftProposer(ProposerConfig(max_tokens=4, answer_source=False))
    d = p.add_draft([1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    p.propose([1, 2], 4)
    assert p.contributes(d)  # aligned and ahead
    p.record(4)
    p.propose([1, 2, 3, 4, 5, 6, 77, 78], 4)  # diverged; nothing near matches 78
    assert not p.cursor_drafts() and p.contributes(d, horizon=64)  # its proposal was accepted 2 tokens ago
    assert not p.contributes(d, horizon=1)
    p.record(0)
    assert not p.contributes(d, horizon=1)
    e = p.add_draft([1, 2])  # aligned but behind the answer: nothing more to propose until it writes more
    assert not p.contributes(e)


def test_longer_match_wins_and_shared_continuations_add_up():
    p = DraftProposer(ProposerConfig(max_tokens=3, use_prefix=False, answer_source=False))
    a = p.add_draft([5, 6, 1, 2, 9, 9, 9])
    b = p.add_draft([1, 2, 8, 8, 8])
    c = p.add_draft([3, 1, 2, 8, 8, 7])
    # a and b match [.., 1, 2] by 2 tokens, c by 3; b and c agree on 8 8: that comes first
    br = p.propose_tree([0, 3, 1, 2], 6)
    assert br[0].tokens[:2] == [8, 8]
    assert br[-1].tokens[:1] == [9] and trie_size([x.tokens for x in br]) <= 6
    assert {x.draft_id for x in br} <= {a, b, c}


def test_answer_is_a_source():
    p = DraftProposer(ProposerConfig(max_tokens=4))
    p.add_draft([100, 101])
    answer = [1, 2, 3, 4, 5, 6, 7, 1, 2]
    prop = p.propose(answer, 4)
    assert (prop.kind, prop.draft_id, prop.tokens, prop.match_len) == ("suffix", -2, [3, 4, 5, 6], 2)
    p.record(4)
    assert p.stats.per_draft == {-2: 4}
    off = DraftProposer(ProposerConfig(max_tokens=4, answer_source=False))
    off.add_draft([100, 101])
    assert off.propose(answer, 4).tokens == []


def test_propose_tree_branches():
    p = DraftProposer(ProposerConfig(max_tokens=4, min_match=1))
    p.add_draft([1, 2, 3, 4, 5])
    p.add_draft([1, 2, 3, 9, 9])
    p.add_draft([1, 2, 6, 7])  # dealigned after [1,2,3]
    br = p.propose_tree([1, 2, 3], 6)
    assert [(b.kind, b.tokens) for b in br][:2] == [("prefix", [9, 9]), ("prefix", [4, 5])]
    assert trie_size([b.tokens for b in br]) <= 6
    br = p.propose_tree([1, 2, 3], 3)
    assert trie_size([b.tokens for b in br]) == 3 and br[0].tokens[0] == 9
    assert p.propose_tree([1, 2, 3], 0) == []


def _trie_walk(cands):
    """The chain propose() used to build: follow the best child of the full trie at every depth."""
    node, toks, best = DraftProposer._trie(cands), [], None
    while node:
        t, e = max(node.items(), key=lambda kv: kv[1][0])
        toks.append(t)
        best, node = e[2], e[1]
    return toks, best


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.5, 1.0, 2.0, 8.0]), st.sampled_from([0.5, 0.75, 0.9]),
                          st.lists(st.integers(0, 2), min_size=1, max_size=6)), min_size=2, max_size=8))
def test_best_path_equals_the_trie_walk(raw):
    """_best_path (level by level over the candidates still on the path) gives the trie walk's tokens
    and the same best candidate, ties included."""
    cands = [[w, q, toks, "suffix", i, 1] for i, (w, q, toks) in enumerate(raw)]
    assert DraftProposer._best_path(cands) == _trie_walk(cands)


def test_config_validation():
    for bad in (dict(max_tokens=0), dict(min_match=0), dict(local_weight=0), dict(max_tokens=True),
                dict(strong_run=0), dict(window=-1), dict(answer_weight=-1.0), dict(max_context=0)):
        with pytest.raises(ValueError):
            ProposerConfig(**bad)


small_tokens = st.lists(st.integers(0, 6), max_size=12)


class ProposerMachine(RuleBasedStateMachine):
    """Random draft arrivals / extensions / answer growth / proposals / feedback."""

    def __init__(self):
        super().__init__()
        self.cfg = ProposerConfig(max_tokens=6, min_match=1, max_index_tokens=60, max_context=8, window=6, back=3)
        self.p = DraftProposer(self.cfg)
        self.drafts = {}
        self.answer = []
        self.last = None

    @rule(tokens=small_tokens, ref=st.booleans())
    def add(self, tokens, ref):
        sid = self.p.add_reference(tokens) if ref else self.p.add_draft(tokens)
        self.drafts[sid] = list(tokens)

    @precondition(lambda self: self.drafts)
    @rule(which=st.integers(0, 100), tokens=small_tokens)
    def extend(self, which, tokens):
        sid = sorted(self.drafts)[which % len(self.drafts)]
        self.p.extend_draft(sid, tokens)
        self.drafts[sid].extend(tokens)

    @rule(tokens=small_tokens)
    def grow_answer(self, tokens):
        self.answer.extend(tokens)

    @rule(keep=st.integers(0, 30))
    def rewind_answer(self, keep):
        self.answer = self.answer[:keep]

    def source_tokens(self):
        return {t for d in self.drafts.values() for t in d} | set(self.answer)

    def source(self, sid):
        return self.answer if sid == ANSWER_ID else self.drafts[sid]

    @rule(n=st.integers(0, 10))
    def propose(self, n):
        prop = self.p.propose(self.answer, n)
        assert len(prop.tokens) <= min(n, self.cfg.max_tokens)
        assert set(prop.tokens) <= self.source_tokens()
        if prop.kind == "prefix":
            d = self.drafts[prop.draft_id]
            k = len(self.answer)
            assert d[:k] == self.answer and d[k:k + len(prop.tokens)] == prop.tokens
        elif prop.kind == "suffix":
            d = self.source(prop.draft_id)
            m = prop.match_len
            assert 1 <= m <= len(self.answer)
            # the proposal follows an occurrence of the answer's last m tokens in its source
            assert any(d[i - m:i] == self.answer[-m:] and d[i:i + len(prop.tokens)] == prop.tokens
                       for i in range(m, len(d)))
        else:
            assert prop.tokens == []
        self.last = [prop.tokens]

    @rule(n=st.integers(0, 12))
    def propose_tree(self, n):
        branches = self.p.propose_tree(self.answer, n)
        assert trie_size([b.tokens for b in branches]) <= n
        assert all(b.tokens and len(b.tokens) <= self.cfg.max_tokens for b in branches)
        assert len({tuple(b.tokens) for b in branches}) == len(branches)
        for b in branches:  # every branch continues an occurrence of the answer's end in its source
            d = self.source(b.draft_id)
            m = b.match_len
            if b.kind == "prefix":
                assert d[:len(self.answer) + len(b.tokens)] == self.answer + b.tokens
            else:
                assert any(d[i - m:i] == self.answer[-m:] and d[i:i + len(b.tokens)] == b.tokens
                           for i in range(m, len(d)))
        assert {t for b in branches for t in b.tokens} <= self.source_tokens()
        self.last = [b.tokens for b in branches]

    @rule(acc=st.integers(-2, 12), branch=st.integers(-1, 5))
    def record(self, acc, branch):
        self.p.record(acc, branch)

    @invariant()
    def stats_consistent(self):
        s = self.p.stats
        assert s.accepted == sum(s.per_draft.values())
        assert s.steps == s.steps_prefix + s.steps_suffix + s.steps_empty


TestProposerMachine = ProposerMachine.TestCase
TestProposerMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


def test_record_padding_label_counts_nothing():
    p = DraftProposer(ProposerConfig(max_tokens=4))
    d = p.add_draft([1, 2, 3])
    p.propose_tree([], 4)
    p.record(1, -1)  # deepest accepted node was padding
    assert p.stats.accepted == 0 and p.stats.steps_empty == 1
    p.propose_tree([1], 4)
    p.record(2, 0)
    assert p.stats.accepted_prefix == 2 and p.stats.per_draft == {d: 2}


def test_core_is_engine_free():
    import subprocess
    import sys
    code = ("import sys, ssr_sglang.core; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'sglang', 'vllm')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
