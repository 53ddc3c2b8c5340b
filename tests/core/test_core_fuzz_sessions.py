"""Rule-based fuzzing of whole SSR request sessions (engine-free).

A session is what the scheduler does to one request's :class:`RequestSSR` (and so to its
:class:`DraftProposer` and suffix index): reasoning tokens arrive, drafts are forked at arbitrary
moments, their tokens arrive in arbitrary chunks, drafts end on their own or are cancelled, the think
block closes, and every answer step proposes a token tree that the (simulated) target accepts
partly, fully or not at all, plus a bonus token.  Whatever the order, nothing may raise, a step never
proposes more than ``N - 1`` tree nodes (``N`` = ``--speculative-num-draft-tokens``), every proposed
token is in the vocabulary, and the counters stay consistent.

A second machine drives :class:`SuffixIndex` directly with source arrivals, removals (cancelled
drafts) and context growth past the cap.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from ssr_sglang.core.suffix_index import SuffixIndex
from ssr_sglang.core.tree import PAD_TOKEN, layout_tree, trie_size
from ssr_sglang.srt.config import RequestConfig
from ssr_sglang.srt.request_state import ANSWER, REASONING, RequestSSR
from ssr_sglang.srt.think_ids import ThinkIds

VOCAB = 40
THINK_START, THINK_END, FORCE_TAIL = 1, 2, 3
IDS = ThinkIds(start=[THINK_START], end=[THINK_END], force=[THINK_END, FORCE_TAIL], force_tail=[FORCE_TAIL])
content = st.integers(4, VOCAB - 1)  # never a think marker
chunks = st.lists(content, min_size=0, max_size=12)
FUZZ = settings(max_examples=60, stateful_step_count=40, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


class FakeReq(SimpleNamespace):
    """The few ``Req`` fields :class:`RequestSSR` reads."""


class SessionMachine(RuleBasedStateMachine):
    @initialize(n=st.integers(2, 12), prefix=st.booleans(), suffix=st.booleans(),
                max_index=st.sampled_from([0, 5, 40, 1 << 20]))
    def start(self, n, prefix, suffix, max_index):
        self.n = n
        cfg = RequestConfig(checkpoints=(4, 10, 30), use_prefix=prefix, use_suffix=suffix)
        self.st = RequestSSR("r", cfg, IDS, prompt_tail=[7, 8, THINK_START], num_nodes=n)
        assert self.st.phase == REASONING
        # A small index cap makes extend() drop tokens: proposals must still be in range.
        self.st.proposer._index.max_tokens = max_index
        self.out: list = []
        self.branches = []  # DraftBranch objects, with FakeReq drafts
        self.closed = 0
        self.last_tree = None
        self.finished = False

    # -- reasoning ------------------------------------------------------
    @precondition(lambda self: self.st.phase == REASONING and not self.finished)
    @rule(toks=chunks)
    def reason(self, toks):
        self.out += toks
        self.st.advance(self.out)
        assert self.st.phase == REASONING
        assert self.st.reasoning_len == len(self.out)

    @precondition(lambda self: self.st.phase == REASONING and not self.finished)
    @rule(after=chunks)
    def close_think(self, after):
        end_at = len(self.out)
        self.out += [THINK_END] + after
        self.st.advance(self.out)
        assert self.st.phase == ANSWER
        assert self.st.answer_start == end_at + 1

    # -- drafts -----------------------------------------------------------
    @precondition(lambda self: not self.finished)
    @rule(seeded=st.booleans())
    def fork(self, seeded):
        k = len(self.branches)
        b = self.st.add_draft(f"r#ssr-{k:04d}", checkpoint=self.st.reasoning_len, seeded=seeded)
        b.req = FakeReq(output_ids=[], origin_input_ids=[7, 8, THINK_START, *self.out, THINK_END, FORCE_TAIL],
                        cached_tokens=len(self.out))
        self.branches.append(b)

    def _live(self):
        return [b for b in self.branches if not b.finished]

    @precondition(lambda self: any(not b.finished and b.req is not None for b in self.branches))
    @rule(which=st.integers(0, 100), toks=st.lists(content, min_size=1, max_size=15))
    def draft_decodes(self, which, toks):
        live = [b for b in self._live() if b.req is not None]
        live[which % len(live)].req.output_ids.extend(toks)

    @precondition(lambda self: any(not b.finished for b in self.branches))
    @rule(which=st.integers(0, 100), cancelled=st.booleans())
    def draft_ends(self, which, cancelled):
        live = self._live()
        b = live[which % len(live)]
        self.st.close_draft(b, cancelled=cancelled)
        assert b.finished and b.cancelled == cancelled
        assert b.req is None or b.consumed == len(b.req.output_ids)  # its last tokens were taken
        self.st.close_draft(b, cancelled=not cancelled)  # idempotent: counted once
        self.closed += 1

    @precondition(lambda self: any(not b.finished for b in self.branches))
    @rule(which=st.integers(0, 100))
    def draft_lost(self, which):
        """A draft whose Req is not known yet (or was rejected at admission): nothing to read."""
        live = self._live()
        b = live[which % len(live)]
        b.req = None

    # -- answer steps -------------------------------------------------------
    @precondition(lambda self: self.st.phase == ANSWER and not self.finished)
    @rule(mode=st.sampled_from(["reject", "partial", "full"]), pick=st.integers(0, 100),
          bonus=content, cut=st.integers(0, 100))
    def verify_step(self, mode, pick, bonus, cut):
        st_ = self.st
        st_.settle(self.out)
        st_.advance(self.out)
        if not st_.has_drafts:
            st_.note_plain_step(self.out)
            self.out.append(bonus)
            return
        branches = st_.propose(self.out)
        toks = [list(b.tokens) for b in branches]
        assert trie_size(toks) <= self.n - 1, (toks, self.n)
        for b in toks:
            assert 1 <= len(b) <= self.n - 1
            assert all(0 <= t < VOCAB for t in b), b
        last = self.out[-1] if self.out else THINK_START
        tree = layout_tree(last, toks, self.n)
        assert tree.tokens.shape == (self.n,) and tree.mask.shape == (self.n * self.n,)
        assert tree.num_real == 1 + trie_size(toks)
        assert all(0 <= t < VOCAB for t in tree.tokens.tolist()) and PAD_TOKEN < VOCAB
        assert np.all(tree.parents[1:] < np.arange(1, self.n))  # BFS order: parents first
        accepted = []
        if toks and mode != "reject":
            path = toks[pick % len(toks)]
            accepted = path if mode == "full" else path[: cut % (len(path) + 1)]
        self.out += accepted + [bonus]

    @precondition(lambda self: not self.finished)
    @rule()
    def finish(self):
        live = len(self._live())
        m = self.st.finish(self.out)
        assert m is self.st.finish(self.out)  # idempotent
        assert not self._live()
        self.closed += live
        self.finished = True

    @rule(which=st.integers(0, 100), toks=st.lists(content, min_size=1, max_size=5))
    def late_draft_tokens(self, which, toks):
        """Tokens a draft made in the step its abort was in flight; metrics stay readable."""
        ended = [b for b in self.branches if b.finished and b.req is not None]
        if ended:
            ended[which % len(ended)].req.output_ids.extend(toks)
            self.st.pull_drafts()
        assert self.st.metrics()["phase"] == self.st.phase

    # -- invariants -----------------------------------------------------------
    @invariant()
    def counters_consistent(self):
        if not hasattr(self, "st"):
            return
        c = self.st.counters
        assert min(getattr(c, f) for f in vars(c)) >= 0
        assert c.drafts_finished + c.drafts_cancelled == self.closed == sum(b.finished for b in self.branches)
        assert c.draft_tokens == sum(b.consumed for b in self.branches)
        assert all(b.consumed <= len(b.req.output_ids) for b in self.branches if b.req is not None)
        assert c.accepted_prefix + c.accepted_suffix <= max(0, c.answer_tokens)
        assert c.answer_verify_steps <= max(0, c.answer_tokens)
        p = self.st._proposer
        if p is not None:
            idx = p._index
            assert idx.total_tokens <= max(idx.max_tokens, 0)
            assert p.num_drafts == len(self.branches) + 0


SessionMachine.TestCase.settings = FUZZ
test_request_sessions = SessionMachine.TestCase


class IndexMachine(RuleBasedStateMachine):
    """Sources come and go (cancelled drafts), the context grows past ``max_context``."""

    def __init__(self):
        super().__init__()
        self.idx = SuffixIndex(max_tokens=200, max_context=8)
        self.cur = self.idx.cursor()
        self.ctx: list = []
        self.next_id = 0
        self.model: dict = {}

    @rule(toks=chunks, prio=st.integers(-1, 1))
    def add(self, toks, prio):
        sid = self.next_id
        self.next_id += 1
        self.idx.add_source(sid, prio)
        self.model[sid] = list(toks[: self.idx.extend(sid, toks)])

    @precondition(lambda self: self.model)
    @rule(which=st.integers(0, 100), toks=chunks)
    def extend(self, which, toks):
        sid = sorted(self.model)[which % len(self.model)]
        self.model[sid] += list(toks[: self.idx.extend(sid, toks)])

    @precondition(lambda self: self.model)
    @rule(which=st.integers(0, 100))
    def remove(self, which):
        sid = sorted(self.model)[which % len(self.model)]
        self.idx.remove_source(sid)
        del self.model[sid]

    @rule(toks=chunks)
    def feed(self, toks):
        self.ctx += toks
        self.cur.feed(toks)

    @rule(span=st.integers(1, 12), min_match=st.integers(1, 4))
    def query(self, span, min_match):
        ms = self.cur.matches(span, min_match)
        best = self.cur.best(span, min_match)
        assert (best is None) == (not ms)
        for m in ms:
            src = self.model[m.source_id]
            assert min_match <= m.length <= self.idx.max_context
            assert len(m.span) <= span and all(0 <= t < VOCAB for t in m.span)
            assert self.ctx[len(self.ctx) - m.length:] == src[m.position - m.length:m.position]
            assert m.span == src[m.position:m.position + span]
        # The cursor agrees with a stateless query over the same context.
        fresh = self.idx.match(self.ctx, span, min_match)
        assert (fresh is None) == (best is None)
        if best is not None:
            assert fresh.length == best.length

    @invariant()
    def totals(self):
        assert self.idx.total_tokens == sum(map(len, self.model.values())) <= self.idx.max_tokens
        assert sorted(self.idx.source_ids) == sorted(self.model)


IndexMachine.TestCase.settings = FUZZ
test_suffix_index_sessions = IndexMachine.TestCase
