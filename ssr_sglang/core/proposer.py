"""Per-request proposer: draft answers -> speculative token proposals.

A request may own several drafts (iterative SSR: one per reasoning
checkpoint, newest last), plus suffix-only *references* (prompt, reasoning).
Every call to :meth:`DraftProposer.propose` / :meth:`~DraftProposer.propose_tree`
gets the answer generated so far (append-only across calls) and returns
tokens for the target model to verify.

**Cursors.** Each draft keeps a *cursor*: the draft position that corresponds
to the next answer token (``draft index = answer index + offset``), valid
while the answer keeps agreeing with the draft there, and ``run``, how many
answer tokens in a row agreed up to it (its evidence).  A draft starts with
its cursor at 0: while nothing differed it is *aligned* and its continuation
is a **prefix** proposal.  At the first difference the cursor is lost; the
place where it was lost (``home``) is remembered, because the answer usually
resumes near there: after a renamed identifier a few tokens later, after an
inserted line at the same place, after a line the draft has and the answer
lacks a little further on.

**Suffix candidates** (a draft without a strong cursor): the occurrences of
the answer's last token in the draft from a little before ``home`` on (the
nearest ones first, at most ``local_candidates``, within ``window`` tokens
past where the answer would be if it had kept pace), each scored by how many
answer tokens match backwards from it; and the longest suffix match anywhere
in the source (the :class:`~ssr_sglang.core.suffix_index.SuffixIndex`
automaton; at least ``min_match`` tokens), which finds moved text.  The best
candidate becomes the draft's new cursor, so when the answer follows it the
next step simply continues there (a *suffix* proposal with growing evidence).

**Scores and the tree.** A candidate with evidence ``e`` (matched tokens)
continues correctly at each next token with an assumed probability ``q(e) =
1 - 1 / (e + 2)``; candidates near ``home`` (and cursor continuations) weigh
``local_weight`` times a far match; references (prompt, reasoning) weigh
``reference_weight`` and are consulted (their cursors' continuations and
searches) only in steps where no draft proposes with a strong cursor, so they
neither cost time nor take tree nodes while a draft is being followed.  Every candidate's
continuation is inserted into one trie, a node scoring the summed weight x
``q^depth`` of the candidates through it, so a continuation that several
occurrences or drafts share scores higher.  :meth:`~DraftProposer.propose_tree`
keeps the best-scoring ``max_nodes`` nodes (a child never scores above its
parent, so they form a tree) and returns them as branches, best first;
:meth:`~DraftProposer.propose` follows the best child from the root.

Per step the cost is one slice comparison per source with a cursor (the new
answer tokens against it) and the continuation of each cursor; only a step
with a draft that lacks a strong cursor searches: the automata match the
answer's last tokens (skipped, by two dict look-ups, in a source that lacks
its last ``min_match`` tokens), the window near ``home`` is scanned (skipped
when the draft lacks the last token: the automaton's root knows) with at most
``local_candidates`` backward comparisons, and the answer's own token
positions are brought up to date.  ``benchmarks/bench_core.py --baseline REV``
measures it against an earlier core.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

from .suffix_index import DEFAULT_MAX_CONTEXT, DEFAULT_MAX_TOKENS, SuffixIndex

__all__ = ["ProposerConfig", "Proposal", "Branch", "ProposerStats", "DraftProposer"]

PREFIX = "prefix"
SUFFIX = "suffix"
ANSWER_ID = -2  # source id of the answer itself (``answer_source``) in proposals and ``per_draft``


@dataclass
class ProposerConfig:
    """Knobs of :class:`DraftProposer`.

    ``max_tokens``: proposal depth cap; ``min_match``: shortest match used
    when a suffix match is searched anywhere in a source (matches near a
    draft's last cursor need one token); ``strong_run``: a cursor with at
    least this many agreeing tokens in a row proposes alone (no search for
    other occurrences in its draft); ``local_candidates``/``window``/
    ``back``: how many occurrences near a lost cursor are scored, from
    ``back`` tokens before where it was lost to ``window`` tokens past where
    the answer would be had it kept pace; ``local_weight``: weight of a
    candidate near the cursor against a match elsewhere (1);
    ``reference_weight``: weight of a reference source's candidates (0.125: on
    ``bench_acceptance.py --context`` it gains most and loses no edit kind);
    ``use_prefix``/``use_suffix``: for ablations (without prefix, drafts
    start with no cursor and are found by suffix matching);
    ``max_index_tokens``/``max_context``: suffix index caps.
    """

    max_tokens: int = 8
    min_match: int = 2
    strong_run: int = 4
    local_candidates: int = 8
    window: int = 256
    back: int = 8
    local_weight: float = 2.0
    distance_scale: float = 20.0
    reference_weight: float = 0.125
    answer_source: bool = True
    answer_weight: float = 0.5
    use_prefix: bool = True
    use_suffix: bool = True
    max_index_tokens: int = DEFAULT_MAX_TOKENS
    max_context: int = DEFAULT_MAX_CONTEXT

    def __post_init__(self) -> None:
        for name in ("max_tokens", "min_match", "strong_run", "local_candidates", "window", "back",
                     "max_index_tokens", "max_context"):
            v = getattr(self, name)
            lowest = 0 if name in ("max_index_tokens", "local_candidates", "window", "back") else 1
            if not isinstance(v, int) or isinstance(v, bool) or v < lowest:
                raise ValueError(f"{name} must be an int >= {lowest}, got {v!r}")
        for name in ("local_weight", "distance_scale", "reference_weight", "answer_weight"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
                raise ValueError(f"{name} must be a positive number, got {v!r}")


@dataclass
class Proposal:
    """Proposed continuation of the answer.

    ``kind`` is ``'prefix'``, ``'suffix'`` or ``None`` (empty proposal);
    ``draft_id`` the source it came from (-1 if none); ``match_len`` the
    evidence: for a prefix proposal the aligned answer length, for a suffix
    proposal how many of the answer's last tokens precede it in the source.
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
    __slots__ = ("sid", "tokens", "aligned", "is_reference", "weight", "off", "checked", "run", "home",
                 "lost_at", "taken", "used_at")

    def __init__(self, sid: int, is_reference: bool, weight: float) -> None:
        self.sid = sid
        self.tokens: List[int] = []
        self.is_reference = is_reference
        self.weight = weight
        self.taken = 0  # tokens the suffix index took (under its cap): no search looks further
        self.used_at = 0  # answer length when a proposal of this draft was last accepted (or it was added)
        self.aligned = False
        self.off: Optional[int] = None
        self.checked = self.run = self.lost_at = 0
        self.home = -1

    def restart(self, use_prefix: bool) -> None:
        """The answer starts (again) from nothing."""
        draft = not self.is_reference
        self.aligned = draft and use_prefix
        self.off = 0 if self.aligned else None  # cursor: draft index = answer index + off
        self.checked = 0  # answer positions compared with the cursor so far
        self.run = 0  # answer tokens in a row that agreed with the draft up to the cursor
        self.home = 0 if draft else -1  # draft index where the cursor was last lost (-1: none)
        self.lost_at = 0  # answer length when it was lost
        self.used_at = 0


def _index_positions(where: "defaultdict[int, List[int]]", tokens: List[int], lo: int, hi: int) -> None:
    """Enter ``tokens[lo:hi]`` in the position lists ``where`` (a ``defaultdict(list)``)."""
    for i, t in enumerate(tokens[lo:hi], lo):
        where[t].append(i)


_FAR_FEED = 32  # the automata match at most this many of the answer's last tokens (see _search)
_CHECK_WHOLE = 64  # answers up to this long are compared whole; longer ones at both ends
_CHECK_ENDS = 16


def _same_start(answer: Sequence[int], mine: List[int]) -> bool:
    """Whether ``answer`` starts with ``mine`` (known answer, ``len(answer) >= len(mine)``): compared
    whole up to 64 tokens, else its first and last 16 tokens (a scheduler's answer only grows; a
    rewritten one differs near its end or its start). Example: ``mine = [3, 0]``,
    ``answer = [0, 0, 3]`` -> False (the last-token check alone would take it for an extension)."""
    m = len(mine)
    if m <= _CHECK_WHOLE:
        return _as_ints(answer[:m]) == mine
    head, tail = _CHECK_ENDS, m - _CHECK_ENDS  # only the ends are read: a view of a long answer is not copied
    return _as_ints(answer[:head]) == mine[:head] and _as_ints(answer[tail:m]) == mine[tail:]


def _as_ints(tokens: Sequence[int]) -> List[int]:
    """``tokens`` as a list of ints; a list of ints (what SGLang's ``output_ids`` are) is returned as it
    is (callers copy it), so the per-step path does not convert token by token."""
    if type(tokens) is list and (not tokens or (type(tokens[0]) is int and type(tokens[-1]) is int)):
        return tokens
    tolist = getattr(tokens, "tolist", None)
    if tolist is not None:
        return list(tolist())
    return [int(t) for t in tokens]


# Evidence e (matched tokens) -> probability that the next token continues correctly.
_Q = [1.0 - 1.0 / (e + 2) for e in range(257)]
# Evidence e -> weight of a candidate among others (e squared: a longer match is much likelier the
# place the answer is copying from).
_W = [float(min(e, 64)) ** 2 for e in range(300)]


def _q(e: int) -> float:
    return _Q[e] if e < 256 else _Q[256]


class DraftProposer:
    """Proposals for one request from its drafts (see module docstring)."""

    def __init__(self, config: Optional[ProposerConfig] = None) -> None:
        self.config = config or ProposerConfig()
        cfg = self.config
        self._index = SuffixIndex(cfg.max_index_tokens, cfg.max_context)
        self._self_where: "defaultdict[int, List[int]]" = defaultdict(list)  # answer as a source: token -> positions
        self._self_indexed = 0
        self._drafts: Dict[int, _Draft] = {}
        self._newest_first: List[_Draft] = []  # every source, newest first
        self._draft_order: List[int] = []  # drafts (not references), oldest first
        self._answer: List[int] = []
        self._last: List[Proposal] = []
        self.stats = ProposerStats()

    # -- sources -------------------------------------------------------
    def add_draft(self, tokens: Sequence[int] = ()) -> int:
        """Register a draft answer (may be empty and grow later); return its id."""
        return self._add(tokens, priority=0, is_reference=False)

    def add_reference(self, tokens: Sequence[int], priority: int = -1) -> int:
        """Register a suffix-only source (prompt, reasoning, ...).

        With the default negative priority it loses ties against drafts, and
        its candidates weigh ``reference_weight``.
        """
        return self._add(tokens, priority=priority, is_reference=True)

    def _add(self, tokens, priority: int, is_reference: bool) -> int:
        sid = len(self._drafts)
        self._index.add_source(sid, priority)
        d = _Draft(sid, is_reference, self.config.reference_weight if priority < 0 else 1.0)
        d.used_at = len(self._answer)
        d.restart(self.config.use_prefix)
        self._drafts[sid] = d
        self._newest_first.insert(0, d)
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
        d.taken += self._index.extend(draft_id, tokens)
        if d.off is not None:
            self._check(d)

    def _check(self, d: _Draft) -> None:
        """Compare the answer with the draft at the cursor, as far as both go."""
        ans = self._answer
        off = d.off
        upto = min(len(ans), len(d.tokens) - off)
        lo = d.checked
        if upto <= lo:
            return
        toks = d.tokens
        if toks[lo + off:upto + off] == ans[lo:upto]:
            d.checked = upto
            d.run += upto - lo
            return
        j = lo
        while toks[j + off] == ans[j]:
            j += 1
        if d.run + j - lo >= self.config.strong_run or d.home < 0:
            d.home, d.lost_at = j + off, j  # remember where the draft stopped agreeing
        d.off = None
        d.aligned = False
        d.run = 0

    @property
    def num_drafts(self) -> int:
        return len(self._draft_order)

    def draft_tokens(self, draft_id: int) -> List[int]:
        return self._drafts[draft_id].tokens

    def aligned_drafts(self) -> List[int]:
        """Ids of drafts still aligned with the answer, newest first."""
        return [sid for sid in reversed(self._draft_order) if self._drafts[sid].aligned]

    def cursor_drafts(self) -> List[int]:
        """Ids of drafts whose cursor currently agrees with the answer (aligned or resumed), newest
        first."""
        return [sid for sid in reversed(self._draft_order) if self._drafts[sid].off is not None]

    def contributes(self, draft_id: int, horizon: int = 64) -> bool:
        """Whether a draft still running is worth its decoding: its cursor agrees with the answer and it
        has written past it (aligned or resumed: what it writes next is proposed next), or, having lost
        its cursor, something it proposed was accepted within the last ``horizon`` answer tokens (a
        diverged draft that still feeds suffix matches)."""
        d = self._drafts[draft_id]
        n = len(self._answer)
        if d.off is not None:
            return n + d.off < len(d.tokens)
        return n - d.used_at <= horizon

    # -- answer tracking ----------------------------------------------
    def sync_answer(self, answer: Sequence[int]) -> None:
        """Take the answer as it stands (as a proposal call would), e.g. before :meth:`contributes`."""
        self._sync_answer(answer)

    def _sync_answer(self, answer: Sequence[int]) -> None:
        mine = self._answer
        m = len(mine)
        n = len(answer)
        if m:
            if n < m:
                self._reset_answer(answer)
                return
            if m > _CHECK_WHOLE and type(answer) is list:  # _same_start, inlined for the per-step case
                t = m - _CHECK_ENDS
                same = answer[t:m] == mine[t:] and answer[:_CHECK_ENDS] == mine[:_CHECK_ENDS]
            else:
                same = _same_start(answer, mine)
            if not same:
                self._reset_answer(answer)
                return
        if n == m:
            return
        mine.extend(_as_ints(answer[m:]))
        for d in self._newest_first:
            off = d.off
            if off is not None:
                lo = d.checked
                toks = d.tokens
                upto = len(toks) - off
                if upto > n:
                    upto = n
                if upto > lo:
                    if toks[lo + off:upto + off] == mine[lo:upto]:  # _check's agreeing case, inlined
                        d.checked = upto
                        d.run += upto - lo
                    else:
                        self._check(d)

    def _reset_answer(self, answer: Sequence[int]) -> None:
        """The answer was not an extension of the last one: start over."""
        self._answer = []
        self._self_where = defaultdict(list)
        self._self_indexed = 0
        for d in self._drafts.values():
            d.restart(self.config.use_prefix)
        self._sync_answer(answer)

    # -- candidates ----------------------------------------------------
    def _candidates(self, k: int) -> list:
        """Candidate continuations, each ``[weight, q, tokens, kind, source id, evidence]``, in the
        order they break ties (cursor continuations first, newest draft first)."""
        cfg = self.config
        n = len(self._answer)
        out = []
        searching = None
        refs = None  # references: consulted only when no draft proposes with a strong cursor
        confident = False
        strong = cfg.strong_run
        for d in self._newest_first:
            if d.is_reference:
                if refs is None:
                    refs = [d]
                else:
                    refs.append(d)
                continue
            off = d.off
            if off is not None:
                start = n + off
                toks = d.tokens
                if start < len(toks):
                    if d.aligned:
                        run = n + strong
                        if cfg.use_prefix:
                            out.append([d.weight * cfg.local_weight * _W[run if run < 64 else 64],
                                        _Q[run] if run < 256 else _Q[256], toks[start:start + k], PREFIX, d.sid, n])
                    else:
                        run = d.run
                        if cfg.use_suffix:
                            out.append([d.weight * cfg.local_weight * _W[run if run < 64 else 64],
                                        _Q[run] if run < 256 else _Q[256], toks[start:start + k], SUFFIX, d.sid,
                                        run])
                    if run >= strong:
                        confident = True
                        continue
                elif d.aligned or d.run >= strong:
                    continue  # waiting for the draft to write what comes next
            if n and cfg.use_suffix:
                if searching is None:
                    searching = [d]
                else:
                    searching.append(d)
        if refs and not confident and n and cfg.use_suffix:
            for d in refs:
                off = d.off
                if off is not None:
                    start = n + off
                    toks = d.tokens
                    if start < len(toks):
                        run = d.run
                        out.append([d.weight * cfg.local_weight * _W[run if run < 64 else 64],
                                    _Q[run] if run < 256 else _Q[256], toks[start:start + k], SUFFIX, d.sid, run])
                        if run >= strong:
                            continue
                    elif d.run >= strong:
                        continue
                if searching is None:
                    searching = [d]
                else:
                    searching.append(d)
        if searching:
            self._search(searching, k, out)
        if n > 1 and cfg.answer_source and cfg.use_suffix and (searching or not out):
            self._search_answer(k, out)
        return out

    def _search(self, drafts: List[_Draft], k: int, out: list) -> None:
        """Suffix candidates of drafts without a strong cursor; the best becomes each one's cursor."""
        cfg = self.config
        ans = self._answer
        n = len(ans)
        cap = cfg.max_context
        # the longest match anywhere in each source, of the last _FAR_FEED answer tokens at most (one that
        # long is extended backwards below); sources without the answer's last min_match tokens cost nothing
        far = {sid: (e, pos) for sid, e, pos in self._index.occurrences(ans[-_FAR_FEED:], cfg.min_match)}
        last = ans[-1]
        lw = cfg.local_weight
        has_token = self._index.has_token
        for d in drafts:
            toks = d.tokens
            size = len(toks)
            best = None
            at = n + d.off if d.off is not None else -1  # a weak cursor's position: already a candidate
            seen = []
            if d.home >= 0 and cfg.local_candidates and has_token(d.sid, last):
                # occurrences of the answer's last token from a little before home on, nearest first
                home = d.home
                expect = home + (n - d.lost_at)
                stop = min(d.taken, expect + cfg.window + 1, size - 1)  # a continuation must follow
                p = home - cfg.back - 1 if home > cfg.back else -1
                w = d.weight * lw
                scale = cfg.distance_scale
                lim_an = cap if cap < n else n
                for _ in range(cfg.local_candidates):
                    try:
                        p = toks.index(last, p + 1, stop)
                    except ValueError:
                        break
                    if p + 1 == at:
                        continue
                    e = 1
                    lim = lim_an if lim_an <= p else p + 1  # e < cap, e < n, e <= p
                    while e < lim and toks[p - e] == ans[n - 1 - e]:
                        e += 1
                    seen.append(p + 1)
                    dist = p - expect if p > expect else (home - p if p < home else 0)
                    c = [w * _W[e] / (1.0 + dist / scale), _Q[e] if e < 256 else _Q[256], toks[p + 1:p + 1 + k],
                         SUFFIX, d.sid, e]
                    out.append(c)
                    if best is None or c[0] > best[0]:
                        best = c
                        best_pos = p + 1
            m = far.get(d.sid)
            if m is not None and m[1] != at and m[1] < size and m[1] not in seen:
                e, pos = m
                if e >= _FAR_FEED:
                    p = pos - 1
                    while e < cap and e < n and p >= e and toks[p - e] == ans[n - 1 - e]:
                        e += 1
                c = [d.weight * _W[e], _q(e), toks[pos:pos + k], SUFFIX, d.sid, e]
                out.append(c)
                if best is None or c[0] > best[0]:
                    best = c
                    best_pos = pos
            if best is not None and (d.off is None or best[5] > d.run):
                # the best candidate becomes the cursor: if the answer follows it, the next step continues it
                d.off, d.checked, d.run = best_pos - n, n, best[5]

    def _search_answer(self, k: int, out: list) -> None:
        """Candidates from the answer itself: the latest earlier occurrences of its last token (at most
        ``local_candidates``), scored by how many tokens match backwards from them."""
        cfg = self.config
        ans = self._answer
        n = len(ans)
        if self._self_indexed < n - 1:
            _index_positions(self._self_where, ans, self._self_indexed, n - 1)  # the last token: not a source yet
            self._self_indexed = n - 1
        lst = self._self_where.get(ans[-1])
        if not lst:
            return
        cap = cfg.max_context
        w = cfg.answer_weight
        two = cfg.min_match > 1
        prev = ans[n - 2]
        for p in reversed(lst[-max(1, cfg.local_candidates):]):
            if two and (p < 1 or ans[p - 1] != prev):
                continue  # evidence 1 < min_match: not a candidate
            e = 1
            lim = cap if cap <= p else p + 1  # e < cap, e <= p
            while e < lim and ans[p - e] == ans[n - 1 - e]:
                e += 1
            if e >= cfg.min_match:
                out.append([w * _W[e], _Q[e] if e < 256 else _Q[256], ans[p + 1:p + 1 + k], SUFFIX, ANSWER_ID, e])

    # -- proposals -----------------------------------------------------
    def propose(self, answer: Sequence[int], max_tokens: Optional[int] = None) -> Proposal:
        """A chain proposal continuing ``answer`` (at most ``max_tokens``): the best child at every
        depth of the scored trie (see module docstring)."""
        cfg = self.config
        self._sync_answer(answer)
        k = cfg.max_tokens if max_tokens is None else min(max_tokens, cfg.max_tokens)
        prop = None
        if k > 0:
            cands = self._candidates(k)
            if len(cands) == 1:
                c = cands[0]
                prop = Proposal(c[2], c[3], c[4], c[5])
            elif cands:
                toks, best = self._best_path(cands)
                c = cands[best]
                prop = Proposal(toks, c[3], c[4], c[5])
        if prop is None:
            prop = Proposal([])
        self._last = [prop]
        return prop

    @staticmethod
    def _best_path(cands: list):
        """The path that follows the best-scoring child at every depth of :meth:`_trie` of ``cands``,
        and the index of the best candidate through its last node, found level by level among the
        candidates still on the path (the same sums in the same order, without building the trie)."""
        alive = list(range(len(cands)))
        score = [c[0] for c in cands]
        toks: List[int] = []
        best = 0
        depth = 0
        while alive:
            if len(alive) == 1:  # one candidate left: the path is the rest of it, and it is the best there
                best = alive[0]
                toks.extend(cands[best][2][depth:])
                break
            agg: dict = {}  # token -> [summed score, best candidate, its score]
            for ci in alive:
                c = cands[ci]
                seq = c[2]
                if depth < len(seq):
                    sc = score[ci] = score[ci] * c[1]
                    t = seq[depth]
                    e = agg.get(t)
                    if e is None:
                        agg[t] = [sc, ci, sc]
                    else:
                        e[0] += sc
                        if sc > e[2]:
                            e[1], e[2] = ci, sc
            if not agg:
                break
            top = None
            for t, e in agg.items():  # the first of equal scores, as max() over the trie's children
                if top is None or e[0] > top[0]:
                    top, tok = e, t
            toks.append(tok)
            best = top[1]
            if len(agg) > 1:
                alive = [ci for ci in alive if depth < len(cands[ci][2]) and cands[ci][2][depth] == tok]
            depth += 1
        return toks, best

    @staticmethod
    def _trie(cands: list) -> dict:
        """token -> [score, children, index of the best candidate through it]."""
        root: dict = {}
        for ci, c in enumerate(cands):
            node = root
            s = c[0]
            q = c[1]
            for t in c[2]:
                s *= q
                e = node.get(t)
                if e is None:
                    node[t] = e = [s, {}, ci, s]
                else:
                    e[0] += s
                    if s > e[3]:
                        e[2], e[3] = ci, s
                node = e[1]
        return root

    def propose_tree(self, answer: Sequence[int], max_nodes: int) -> List[Branch]:
        """Branches whose merged trie is the ``max_nodes`` best-scoring nodes (at most ``max_tokens``
        deep), best branch first; each branch is a whole root-to-leaf path."""
        cfg = self.config
        self._sync_answer(answer)
        k = min(max_nodes, cfg.max_tokens) if max_nodes > 0 else 0
        out: List[Branch] = []
        if k > 0:
            cands = self._candidates(k)
            if len(cands) == 1:
                c = cands[0]
                out.append(Proposal(c[2][:k], c[3], c[4], c[5]))
            elif cands:
                out = self._select(cands, max_nodes)
        self._last = out
        return out

    def _select(self, cands: list, budget: int) -> List[Branch]:
        trie = self._trie(cands)
        heap = [(-e[0], i, t, e, ()) for i, (t, e) in enumerate(trie.items())]
        heapq.heapify(heap)
        tie = len(heap)
        leaves = []  # (path, entry) of kept nodes with no kept child
        order = []
        while heap and budget > 0:
            _, _, t, e, path = heapq.heappop(heap)
            path = path + (t,)
            budget -= 1
            order.append((path, e))
            for t2, e2 in e[1].items():
                tie += 1
                heapq.heappush(heap, (-e2[0], tie, t2, e2, path))
        kept = {path for path, _ in order}
        # leaves depth first, children best first (ties: candidate order), so the best branch leads
        stack = [((t,), e) for t, e in sorted(trie.items(), key=lambda te: -te[1][0]) if (t,) in kept]
        stack.reverse()
        while stack:
            path, e = stack.pop()
            kids = [(path + (t,), e2) for t, e2 in e[1].items() if path + (t,) in kept]
            if not kids:
                leaves.append((path, e))
            else:
                kids.sort(key=lambda pe: -pe[1][0])
                stack.extend(reversed(kids))
        out = []
        for path, e in leaves:
            c = cands[e[2]]
            out.append(Proposal(list(path), c[3], c[4], c[5]))
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
        else:
            st.steps_empty += 1
        if accepted and p.draft_id != -1:
            st.per_draft[p.draft_id] = st.per_draft.get(p.draft_id, 0) + accepted
            d = self._drafts.get(p.draft_id)
            if d is not None:
                d.used_at = len(self._answer) + accepted
