"""Incremental suffix index over several growing token sources.

Each source (a draft answer, optionally the prompt or the reasoning) gets its
own online suffix automaton (SAM).  A SAM over ``n`` tokens has at most
``2n`` states, and appending one token costs amortized O(1) dict operations,
so drafts can be indexed while they are still being generated.

Matching answers "what is the longest suffix of the recent context that
occurs in some source, and which tokens follow it there?".  A
:class:`MatchCursor` keeps one automaton state per source and advances it by
one transition per new context token (amortized O(1) per token per source),
so a decode loop never re-scans its context.  :meth:`SuffixIndex.match` is the
stateless form: it feeds at most ``max_context`` trailing tokens to a fresh
cursor.

Ranking of candidates (best first): longer match, then higher source
``priority``, then the source added most recently.  Within a source the
earliest occurrence followed by at least one token is used: it has the
longest continuation available in that source.

States are stored in parallel lists (``_next`` dicts, ``_link``, ``_len``,
``_first``) instead of one object per state, which keeps the hot loops to
plain list/dict operations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

__all__ = ["Match", "SuffixIndex", "MatchCursor"]

DEFAULT_MAX_TOKENS = 1 << 20
DEFAULT_MAX_CONTEXT = 64


@dataclass(frozen=True)
class Match:
    """A suffix match: ``length`` context tokens matched in ``source_id``.

    ``position`` is the index in the source right after the matched
    occurrence and ``span`` the (up to ``max_span``) tokens from there on.
    """

    length: int
    source_id: int
    position: int
    span: List[int]
    priority: int = 0


class _Automaton:
    """Online suffix automaton over one token source (root is state 0)."""

    __slots__ = ("tokens", "priority", "order", "_next", "_link", "_len", "_first", "_last")

    def __init__(self, priority: int, order: int) -> None:
        self.tokens: List[int] = []
        self.priority = priority
        self.order = order
        self._next: List[Dict[int, int]] = [{}]
        self._link: List[int] = [-1]
        self._len: List[int] = [0]
        # _first[s]: end index of the first occurrence of the strings of s.
        self._first: List[int] = [-1]
        self._last = 0

    def extend(self, tokens: Sequence[int]) -> None:
        nxt, link, length, first = self._next, self._link, self._len, self._first
        src = self.tokens
        last = self._last
        for c in tokens:
            pos = len(src)
            src.append(c)
            cur = len(length)
            length.append(length[last] + 1)
            first.append(pos)
            nxt.append({})
            p = last
            while p != -1 and c not in nxt[p]:
                nxt[p][c] = cur
                p = link[p]
            if p == -1:
                link.append(0)
            else:
                q = nxt[p][c]
                if length[p] + 1 == length[q]:
                    link.append(q)
                else:
                    clone = cur + 1
                    # cur's own slot must exist before the clone's.
                    link.append(clone)
                    length.append(length[p] + 1)
                    first.append(first[q])
                    nxt.append(nxt[q].copy())
                    link.append(link[q])
                    while p != -1 and nxt[p].get(c) == q:
                        nxt[p][c] = clone
                        p = link[p]
                    link[q] = clone
            last = cur
        self._last = last

    def run(self, context: Sequence[int], state: int = 0, matched: int = 0, cap: int = 1 << 30):
        """Advance (state, matched) over ``context``; return the new pair.

        ``matched`` is the length of the longest suffix of the consumed
        context occurring in the source, clipped to ``cap``.
        """
        nxt, link, length = self._next, self._link, self._len
        for c in context:
            t = nxt[state].get(c)
            while t is None and state:
                state = link[state]
                matched = length[state]
                t = nxt[state].get(c)
            if t is None:
                continue  # at root with no transition: matched stays 0
            state = t
            matched += 1
            if matched > cap:
                matched = cap
                while length[link[state]] >= matched:
                    state = link[state]
        return state, matched

    def occurrence(self, state: int, matched: int):
        """Return (length, position) of the longest usable match at ``state``.

        Usable means at least one source token follows the occurrence; if
        the matched strings only occur at the very end, fall back to shorter
        suffixes via suffix links.
        """
        end = len(self.tokens) - 1
        first, link, length = self._first, self._link, self._len
        while state and first[state] >= end:
            state = link[state]
            matched = length[state]
        if not state:
            return 0, 0
        return matched, first[state] + 1

    @property
    def num_states(self) -> int:
        return len(self._len)


class SuffixIndex:
    """Suffix automata over several token sources, with a global token cap.

    ``max_tokens`` bounds the total number of indexed tokens (and hence
    memory); tokens beyond it are silently ignored (``extend`` returns how
    many were taken).  ``max_context`` bounds how many trailing context tokens
    a query looks at, and the reported match length.
    """

    def __init__(self, max_tokens: int = DEFAULT_MAX_TOKENS, max_context: int = DEFAULT_MAX_CONTEXT) -> None:
        if not isinstance(max_tokens, int) or max_tokens < 0:
            raise ValueError(f"max_tokens must be a non-negative int, got {max_tokens!r}")
        if not isinstance(max_context, int) or max_context < 1:
            raise ValueError(f"max_context must be a positive int, got {max_context!r}")
        self.max_tokens = max_tokens
        self.max_context = max_context
        self._sources: Dict[int, _Automaton] = {}
        self._order = 0
        self._total = 0

    # -- sources -------------------------------------------------------
    def add_source(self, source_id: int, priority: int = 0) -> None:
        """Register an empty source; later-added sources win ties."""
        if source_id in self._sources:
            raise ValueError(f"source_id {source_id} already exists")
        self._order += 1
        self._sources[source_id] = _Automaton(priority, self._order)

    def remove_source(self, source_id: int) -> None:
        """Forget a source (its tokens no longer count against the cap)."""
        sam = self._sources.pop(source_id)
        self._total -= len(sam.tokens)

    def extend(self, source_id: int, tokens: Sequence[int]) -> int:
        """Append ``tokens`` to a source; return how many fit under the cap."""
        sam = self._sources[source_id]
        room = self.max_tokens - self._total
        if room <= 0 or not len(tokens):
            return 0
        if len(tokens) > room:
            tokens = tokens[:room]
        sam.extend(tokens)
        self._total += len(tokens)
        return len(tokens)

    def has_token(self, source_id: int, token: int) -> bool:
        """Whether ``token`` occurs among a source's indexed tokens (one dict look-up: the root's
        transitions)."""
        return token in self._sources[source_id]._next[0]

    def tokens(self, source_id: int) -> List[int]:
        """The indexed tokens of a source (internal list: do not mutate)."""
        return self._sources[source_id].tokens

    @property
    def source_ids(self) -> List[int]:
        return list(self._sources)

    @property
    def total_tokens(self) -> int:
        return self._total

    def __contains__(self, source_id: int) -> bool:
        return source_id in self._sources

    # -- queries -------------------------------------------------------
    def occurrences(self, context: Sequence[int], min_match: int = 1) -> List[tuple]:
        """``(source_id, length, position)`` of every source's longest usable match of a suffix of
        ``context`` (at least ``min_match`` tokens, at most ``len(context)`` and ``max_context``), in
        no particular order; ``position`` as in :class:`Match`.  Stateless and cheap when nothing
        matches: a source in which the last ``min_match`` context tokens do not occur together costs
        at most ``min_match`` dict look-ups; the others one pass over ``context``."""
        min_match = max(1, min_match)
        if len(context) < min_match:
            return []
        tail = context[-min_match:]
        cap = self.max_context
        if len(context) > cap:
            context = context[-cap:]
        out = []
        for sid, sam in self._sources.items():
            nxt = sam._next
            state = 0
            for c in tail:
                state = nxt[state].get(c)
                if state is None:
                    break
            if state is None:
                continue
            state, matched = sam.run(context, 0, 0, cap)
            if matched >= min_match:
                length, pos = sam.occurrence(state, matched)
                if length >= min_match:
                    out.append((sid, length, pos))
        return out

    def cursor(self) -> "MatchCursor":
        """An incremental matcher for an append-only context."""
        return MatchCursor(self)

    def match(self, context: Sequence[int], max_span: int, min_match: int = 1) -> Optional[Match]:
        """Best match of a suffix of ``context`` (see module docstring)."""
        cur = MatchCursor(self)
        cur.feed(context)
        return cur.best(max_span, min_match)

    def matches(self, context: Sequence[int], max_span: int, min_match: int = 1) -> List[Match]:
        """The best match of every source, best first."""
        cur = MatchCursor(self)
        cur.feed(context)
        return cur.matches(max_span, min_match)


class MatchCursor:
    """Per-source automaton states tracking an append-only context.

    Sources that grew since the cursor last looked at them (or were added
    later) are re-synchronised from the retained window of the last
    ``max_context`` context tokens, so a cursor stays exact while drafts are
    still being generated; in the common case (sources static) each new
    context token costs one transition per source.
    """

    __slots__ = ("_index", "_window", "_states")

    def __init__(self, index: SuffixIndex) -> None:
        self._index = index
        self._window: List[int] = []
        # source_id -> [automaton, state, matched, source_len_when_synced]
        self._states: Dict[int, list] = {}

    def reset(self) -> None:
        self._window.clear()
        self._states.clear()

    def feed(self, tokens: Sequence[int]) -> None:
        """Append context tokens."""
        if not len(tokens):
            return
        w = self._index.max_context
        win = self._window
        win.extend(tokens)
        if len(win) > 2 * w:
            del win[:-w]
        if len(tokens) > w:
            tokens = tokens[-w:]
        for entry in self._states.values():
            sam = entry[0]
            if entry[3] == len(sam.tokens):
                entry[1], entry[2] = sam.run(tokens, entry[1], entry[2], w)
            # else: stale; resynchronised lazily in _sync()

    def _sync(self) -> None:
        w = self._index.max_context
        sources = self._index._sources
        states = self._states
        if len(states) > len(sources) or any(sid not in sources for sid in states):
            for sid in [sid for sid in states if sid not in sources]:
                del states[sid]
        window = None
        for sid, sam in sources.items():
            entry = states.get(sid)
            if entry is not None and entry[0] is sam and entry[3] == len(sam.tokens):
                continue
            if window is None:
                window = self._window[-w:]
            state, matched = sam.run(window, 0, 0, w)
            states[sid] = [sam, state, matched, len(sam.tokens)]

    def _usable(self, min_match: int):
        """``(key, sid, pos, sam)`` of every source whose match reaches ``min_match``; a higher key is better."""
        self._sync()
        min_match = max(1, min_match)
        for sid, (sam, state, matched, _) in self._states.items():
            if matched < min_match:
                continue
            length, pos = sam.occurrence(state, matched)
            if length >= min_match:
                yield (length, sam.priority, sam.order), sid, pos, sam

    @staticmethod
    def _match(key, sid, pos, sam, max_span: int) -> Match:
        return Match(key[0], sid, pos, sam.tokens[pos : pos + max_span], sam.priority)

    def matches(self, max_span: int, min_match: int = 1) -> List[Match]:
        """The best usable match of every source, best first."""
        found = sorted(self._usable(min_match), key=lambda t: t[0], reverse=True)
        return [self._match(*t, max_span) for t in found]

    def best(self, max_span: int, min_match: int = 1) -> Optional[Match]:
        """The single best match, or None if nothing reaches ``min_match``."""
        top = max(self._usable(min_match), key=lambda t: t[0], default=None)
        return None if top is None else self._match(*top, max_span)
