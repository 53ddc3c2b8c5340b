"""DraftProposer behaviour and a rule-based fuzz of its API."""

import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from ssr_sglang.core.proposer import DraftProposer, ProposerConfig
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
    assert (prop.kind, prop.tokens) == ("suffix", [14, 15])  # cap: 1*1+1
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


def test_adaptive_suffix_length():
    cfg = ProposerConfig(max_tokens=8, min_match=1, spec_factor=10.0, adaptive=True)
    p = DraftProposer(cfg)
    p.add_reference(list(range(100)))
    prop = p.propose([50], 8)
    assert prop.kind == "suffix" and len(prop.tokens) == 8
    p.record(1)  # partial accept -> limit 2
    assert len(p.propose([50, 51, 52], 8).tokens) == 2
    p.record(2)  # full accept -> limit 4
    assert len(p.propose([50, 51, 52, 53, 54, 55], 8).tokens) == 4
    off = DraftProposer(ProposerConfig(max_tokens=8, min_match=1, spec_factor=10.0, adaptive=False))
    off.add_reference(list(range(100)))
    off.propose([50], 8)
    off.record(0)  # no shrink when adaptive=False
    assert off.propose([50, 7], 8).tokens == list(range(8, 16))


def test_propose_tree_branches():
    p = DraftProposer(ProposerConfig(max_tokens=4, min_match=1, spec_factor=4.0))
    p.add_draft([1, 2, 3, 4, 5])
    p.add_draft([1, 2, 3, 9, 9])
    p.add_draft([1, 2, 6, 7])  # dealigned after [1,2,3]
    br = p.propose_tree([1, 2, 3], 6)
    assert [(b.kind, b.tokens) for b in br][:2] == [("prefix", [9, 9]), ("prefix", [4, 5])]
    assert trie_size([b.tokens for b in br]) <= 6
    br = p.propose_tree([1, 2, 3], 3)
    assert [b.tokens for b in br] == [[9, 9], [4]]
    assert p.propose_tree([1, 2, 3], 0) == []


def test_config_validation():
    for bad in (dict(max_tokens=0), dict(min_match=0), dict(spec_factor=-1), dict(max_tokens=True),
                dict(min_tokens=9, max_tokens=8), dict(max_context=0)):
        with pytest.raises(ValueError):
            ProposerConfig(**bad)


small_tokens = st.lists(st.integers(0, 6), max_size=12)


class ProposerMachine(RuleBasedStateMachine):
    """Random draft arrivals / extensions / answer growth / proposals / feedback."""

    def __init__(self):
        super().__init__()
        self.cfg = ProposerConfig(max_tokens=6, min_match=1, spec_factor=2.0, max_index_tokens=60, max_context=8)
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
        return {t for d in self.drafts.values() for t in d}

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
            d = self.drafts[prop.draft_id]
            m = prop.match_len
            assert m >= 1 and self.answer[-m:] == self.answer[len(self.answer) - m:]
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
