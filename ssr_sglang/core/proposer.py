"""Per-request proposer: draft answers -> speculative token proposals.

A request may own several drafts (iterative SSR: one per reasoning
checkpoint, newest last).  Every call to :meth:`DraftProposer.propose` gets
the answer generated so far (append-only across calls) and returns tokens
for the target model to verify:

1. **prefix** -- a draft is *aligned* while ``answer == draft[:len(answer)]``.
   The newest aligned draft that extends past the answer proposes
   ``draft[len(answer):][:k]``.  A draft is dropped from prefix use at its
   first mismatch; a draft added after the answer started is aligned iff
   its prefix equals the answer so far.
2. **suffix** -- otherwise, the longest suffix of the answer occurring in a
   draft (or in a reference source such as the prompt) is looked up in a
   :class:`~ssr_sglang.core.suffix_index.SuffixIndex`, and the tokens that
   follow it there are proposed, at most ``spec_factor * match_len +
   spec_offset`` of them (SuffixDecoding-style: short matches are weak
   evidence).

Per step the cost is O(new answer tokens x sources) plus the proposal
length: alignment is checked incrementally, and the suffix cursor advances
one automaton transition per new token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

from .suffix_index import DEFAULT_MAX_CONTEXT, DEFAULT_MAX_TOKENS, SuffixIndex

__all__ = ["ProposerConfig", "Proposal", "Branch", "ProposerStats", "DraftProposer"]

PREFIX = "prefix"
SUFFIX = "suffix"


@dataclass
class ProposerConfig:
    """Knobs of :class:`DraftProposer`.

    ``max_tokens``: proposal length cap (chain); ``min_match``: shortest
    suffix match used; ``spec_factor``/``spec_offset``: suffix span cap
    ``floor(spec_factor * match_len + spec_offset)``; ``adaptive``: shrink
    the suffix length limit to ``accepted + 1`` after a partial accept and
    double it after a full accept (prefix proposals always use
    ``max_tokens``: alignment already is strong evidence and a dealigned
    draft stops proposing by itself); ``use_prefix``/``use_suffix``: for
    ablations; ``max_index_tokens``/``max_context``: suffix index caps.
    """

    max_tokens: int = 8
    min_match: int = 2
    spec_factor: float = 1.0
    spec_offset: float = 1.0
    adaptive: bool = True
    min_tokens: int = 1
    use_prefix: bool = True
    use_suffix: bool = True
    max_index_tokens: int = DEFAULT_MAX_TOKENS
    max_context: int = DEFAULT_MAX_CONTEXT

    def __post_init__(self) -> None:
        for name in ("max_tokens", "min_match", "min_tokens", "max_index_tokens", "max_context"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < (0 if name == "max_index_tokens" else 1):
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        if self.min_tokens > self.max_tokens:
            raise ValueError(f"min_tokens ({self.min_tokens}) must be <= max_tokens ({self.max_tokens})")
        for name in ("spec_factor", "spec_offset"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
                raise ValueError(f"{name} must be a non-negative number, got {v!r}")


@dataclass
class Proposal:
    """Proposed continuation of the answer.

    ``kind`` is ``'prefix'``, ``'suffix'`` or ``None`` (empty proposal);
    ``draft_id`` the source it came from (-1 if none); ``match_len`` the
    suffix match length (for prefix: the aligned answer length).
    """

    tokens: List[int]
    kind: Optional[str] = None
    draft_id: int = -1
    match_len: int = 0


Branch = Proposal  # one candidate continuation of a tree proposal


@dataclass
class ProposerStats:
    steps: int = 0
    proposed: int = 0
    accepted_prefix: int = 0
    accepted_suffix: int = 0
    steps_prefix: int = 0
    steps_suffix: int = 0
    steps_empty: int = 0
    per_draft: Dict[int, int] = field(default_factory=dict)

    @property
    def accepted(self) -> int:
        return self.accepted_prefix + self.accepted_suffix


class _Draft:
    __slots__ = ("tokens", "aligned", "checked", "is_reference")

    def __init__(self, is_reference: bool) -> None:
        self.tokens: List[int] = []
        self.aligned = not is_reference
        self.checked = 0  # answer positions compared so far
        self.is_reference = is_reference


def _as_ints(tokens: Sequence[int]) -> List[int]:
    tolist = getattr(tokens, "tolist", None)
    if tolist is not None:
        return list(tolist())
    return [int(t) for t in tokens]


class DraftProposer:
    """Proposals for one request from its drafts (see module docstring)."""

    def __init__(self, config: Optional[ProposerConfig] = None) -> None:
        self.config = config or ProposerConfig()
        cfg = self.config
        self._index = SuffixIndex(cfg.max_index_tokens, cfg.max_context)
        self._cursor = self._index.cursor()
        self._drafts: Dict[int, _Draft] = {}
        self._draft_order: List[int] = []  # prefix candidates, oldest first
        self._answer: List[int] = []
        self._suffix_limit = cfg.max_tokens
        self._last: List[Proposal] = []
        self.stats = ProposerStats()

    # -- sources -------------------------------------------------------
    def add_draft(self, tokens: Sequence[int] = ()) -> int:
        """Register a draft answer (may be empty and grow later); return its id."""
        return self._add(tokens, priority=0, is_reference=False)

    def add_reference(self, tokens: Sequence[int], priority: int = -1) -> int:
        """Register a suffix-only source (prompt, reasoning, ...).

        With the default negative priority it loses ties against drafts.
        """
        return self._add(tokens, priority=priority, is_reference=True)

    def _add(self, tokens, priority: int, is_reference: bool) -> int:
        sid = len(self._drafts)
        self._index.add_source(sid, priority)
        self._drafts[sid] = _Draft(is_reference)
        if not is_reference:
            self._draft_order.append(sid)
        self.extend_draft(sid, tokens)
        return sid

    def extend_draft(self, draft_id: int, tokens: Sequence[int]) -> None:
        """Append newly generated tokens to a draft."""
        d = self._drafts[draft_id]
        tokens = _as_ints(tokens)
        if not tokens:
            return
        d.tokens.extend(tokens)
        self._index.extend(draft_id, tokens)
        if d.aligned:
            self._check_alignment(d)

    def _check_alignment(self, d: _Draft) -> None:
        upto = min(len(d.tokens), len(self._answer))
        lo = d.checked
        if upto > lo:
            if d.tokens[lo:upto] != self._answer[lo:upto]:
                d.aligned = False
            d.checked = upto

    @property
    def num_drafts(self) -> int:
        return len(self._draft_order)

    def draft_tokens(self, draft_id: int) -> List[int]:
        return self._drafts[draft_id].tokens

    def aligned_drafts(self) -> List[int]:
        """Ids of drafts still aligned with the answer, newest first."""
        return [sid for sid in reversed(self._draft_order) if self._drafts[sid].aligned]

    # -- answer tracking ----------------------------------------------
    def _sync_answer(self, answer: Sequence[int]) -> None:
        mine = self._answer
        m = len(mine)
        n = len(answer)
        if n < m or (m and int(answer[m - 1]) != mine[-1]):
            self._reset_answer(answer)
            return
        if n == m:
            return
        new = _as_ints(answer[m:])
        mine.extend(new)
        for d in self._drafts.values():
            if d.aligned:
                self._check_alignment(d)
        self._cursor.feed(new)

    def _reset_answer(self, answer: Sequence[int]) -> None:
        """The answer was not an extension of the last one: start over."""
        self._answer = []
        self._cursor.reset()
        for d in self._drafts.values():
            d.aligned = not d.is_reference
            d.checked = 0
        self._sync_answer(answer)

    # -- proposals -----------------------------------------------------
    def _prefix_branch(self, d_id: int, n: int, k: int) -> Optional[Proposal]:
        toks = self._drafts[d_id].tokens
        if len(toks) <= n:
            return None
        return Proposal(toks[n : n + k], PREFIX, d_id, n)

    def _suffix_cap(self, match_len: int) -> int:
        cfg = self.config
        return int(cfg.spec_factor * match_len + cfg.spec_offset)

    def propose(self, answer: Sequence[int], max_tokens: Optional[int] = None) -> Proposal:
        """A chain proposal continuing ``answer`` (at most ``max_tokens``)."""
        cfg = self.config
        self._sync_answer(answer)
        k = cfg.max_tokens if max_tokens is None else min(max_tokens, cfg.max_tokens)
        prop = None
        if k > 0:
            n = len(self._answer)
            if cfg.use_prefix:
                for sid in reversed(self._draft_order):
                    d = self._drafts[sid]
                    if d.aligned and len(d.tokens) > n:
                        prop = Proposal(d.tokens[n : n + k], PREFIX, sid, n)
                        break
            if prop is None and cfg.use_suffix:
                ks = min(k, self._suffix_limit) if cfg.adaptive else k
                m = self._cursor.best(ks, cfg.min_match)
                if m is not None:
                    span = m.span
                    cap = self._suffix_cap(m.length)
                    if len(span) > cap:
                        span = span[:cap]
                    if span:
                        prop = Proposal(span, SUFFIX, m.source_id, m.length)
        if prop is None:
            prop = Proposal([])
        self._last = [prop]
        return prop

    def propose_tree(self, answer: Sequence[int], max_nodes: int) -> List[Branch]:
        """Candidate branches whose merged trie has at most ``max_nodes`` nodes.

        Order = priority: prefix continuations of aligned drafts (newest
        first), then the best suffix match of each source (best first).
        Branches that are a prefix of an earlier branch are dropped; the
        last branch that does not fit in the node budget is truncated.
        """
        cfg = self.config
        self._sync_answer(answer)
        k = min(max_nodes, cfg.max_tokens) if max_nodes > 0 else 0
        cands: List[Proposal] = []
        if k > 0:
            n = len(self._answer)
            if cfg.use_prefix:
                for sid in reversed(self._draft_order):
                    d = self._drafts[sid]
                    if d.aligned and len(d.tokens) > n:
                        cands.append(Proposal(d.tokens[n : n + k], PREFIX, sid, n))
            if cfg.use_suffix:
                ks = min(k, self._suffix_limit) if cfg.adaptive else k
                for m in self._cursor.matches(ks, cfg.min_match):
                    span = m.span[: self._suffix_cap(m.length)]
                    if span:
                        cands.append(Proposal(span, SUFFIX, m.source_id, m.length))
        out: List[Branch] = []
        trie: dict = {}
        budget = max_nodes
        for c in cands:
            if budget <= 0:
                break
            node = trie
            used = 0
            fresh = 0
            for t in c.tokens:
                child = node.get(t)
                if child is None:
                    if budget - fresh <= 0:
                        break
                    child = node[t] = {}
                    fresh += 1
                node = child
                used += 1
            if fresh == 0:
                continue  # fully contained in earlier branches
            budget -= fresh
            if used < len(c.tokens):
                c.tokens = c.tokens[:used]
            out.append(c)
        self._last = out
        return out

    # -- feedback ------------------------------------------------------
    def record(self, accepted: int, branch: int = 0) -> None:
        """Feedback after verifying the last proposal.

        ``accepted``: number of proposed tokens accepted (bonus and padding
        nodes excluded); ``branch``: for :meth:`propose_tree`, the index of
        the branch the accepted path belongs to, i.e. ``TokenTree.labels``
        of the deepest accepted node.  A negative or unknown ``branch``
        (label -1: root or padding) records a step with nothing accepted.
        """
        st = self.stats
        st.steps += 1
        last = self._last
        self._last = []
        if not last or not 0 <= branch < len(last):
            st.steps_empty += 1
            return
        st.proposed += sum(len(b.tokens) for b in last)
        p = last[branch]
        accepted = max(0, min(int(accepted), len(p.tokens)))
        if p.kind == PREFIX:
            st.steps_prefix += 1
            st.accepted_prefix += accepted
        elif p.kind == SUFFIX:
            st.steps_suffix += 1
            st.accepted_suffix += accepted
            if self.config.adaptive:
                if accepted >= len(p.tokens):
                    self._suffix_limit = min(self.config.max_tokens, max(self._suffix_limit, accepted) * 2)
                else:
                    self._suffix_limit = max(self.config.min_tokens, accepted + 1)
        else:
            st.steps_empty += 1
        if accepted and p.draft_id >= 0:
            st.per_draft[p.draft_id] = st.per_draft.get(p.draft_id, 0) + accepted
