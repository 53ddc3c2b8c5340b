"""When to fork drafts: reasoning-length checkpoints.

A :class:`BudgetSchedule` turns one or more of these specifications into a
sorted list of checkpoints (reasoning token counts at which a draft is
forked):

* ``checkpoints=[500, 1200]`` -- absolute reasoning lengths;
* ``fractions=[0.25, 0.5], thinking_budget=2000`` -- fractions of a
  thinking budget (rounded to the nearest token);
* ``every=400, max_drafts=4, start=400`` -- iterative SSR: ``start``,
  ``start + every``, ... (``max_drafts`` of them; ``start`` defaults to
  ``every``).

Specifications combine (union).  ``max_drafts`` also caps the total.
``draft_len`` is the maximum number of answer tokens a draft may generate.

Iterative SSR can seed a new draft with an older one: the older draft's
answer is a good guess for the newer draft, so the engine feeds it to the
new draft request as a speculative proposal (:func:`seed_from_previous`),
verified like any other proposal, so it only changes speed.
"""

from __future__ import annotations

import bisect
from typing import List, Optional, Sequence

__all__ = ["BudgetSchedule", "seed_from_previous", "common_prefix_len", "MAX_REASONING_TOKENS"]

MAX_REASONING_TOKENS = 1 << 24  # anything larger is a configuration error
MAX_DRAFTS = 1024


def _distinct(values, point, duplicate: str) -> set:
    """The checkpoints ``point(i, value)`` gives for ``values``; raises ValueError(``duplicate`` formatted with
    ``i``, ``v``, ``c``) on the first value whose checkpoint an earlier one already gave."""
    seen: set = set()
    for i, v in enumerate(values):
        c = point(i, v)
        if c in seen:
            raise ValueError(duplicate.format(i=i, v=v, c=c))
        seen.add(c)
    return seen


def _check_int(name: str, value, lo: int = 1, hi: int = MAX_REASONING_TOKENS) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < lo:
        raise ValueError(f"{name} must be >= {lo}, got {value}")
    if value > hi:
        raise ValueError(f"{name} must be <= {hi}, got {value}")
    return value


class BudgetSchedule:
    """Draft checkpoints of a request (see module docstring).

    Immutable after construction; all validation happens in ``__init__``
    and raises ``ValueError`` naming the offending field.
    """

    def __init__(
        self,
        checkpoints: Optional[Sequence[int]] = None,
        *,
        fractions: Optional[Sequence[float]] = None,
        thinking_budget: Optional[int] = None,
        every: Optional[int] = None,
        max_drafts: Optional[int] = None,
        start: Optional[int] = None,
        draft_len: int = 512,
    ) -> None:
        self.checkpoints_abs = None if checkpoints is None else tuple(checkpoints)
        self.fractions = None if fractions is None else tuple(fractions)
        self.thinking_budget = thinking_budget
        self.every = every
        self.max_drafts = max_drafts
        self.start = start
        self.draft_len = draft_len
        self._points = self._compute()

    def __repr__(self) -> str:
        return f"BudgetSchedule(checkpoints={self._points}, draft_len={self.draft_len})"

    @staticmethod
    def _checkpoint(i: int, c) -> int:
        return _check_int(f"checkpoints[{i}]", c)

    def _fraction_point(self, i: int, f) -> int:
        if isinstance(f, bool) or not isinstance(f, (int, float)):
            raise ValueError(f"fractions[{i}] must be a number, got {f!r}")
        if not 0.0 < f <= 1.0:
            raise ValueError(f"fractions[{i}] must be in (0, 1], got {f}")
        c = int(round(f * self.thinking_budget))
        if c < 1:
            raise ValueError(f"fractions[{i}]={f} of thinking_budget={self.thinking_budget} is < 1 token")
        return c

    def _compute(self) -> List[int]:
        _check_int("draft_len", self.draft_len)
        if self.max_drafts is not None:
            _check_int("max_drafts", self.max_drafts, 1, MAX_DRAFTS)
        points: set = set()
        if self.checkpoints_abs is not None:
            points |= _distinct(self.checkpoints_abs, self._checkpoint, "checkpoints has duplicate value {c}")
        if self.thinking_budget is not None:
            _check_int("thinking_budget", self.thinking_budget)
        if self.fractions is not None:
            if self.thinking_budget is None:
                raise ValueError("fractions requires thinking_budget")
            points |= _distinct(self.fractions, self._fraction_point,
                                "fractions[{i}]={v} duplicates checkpoint {c} at thinking_budget=" + str(self.thinking_budget))
        if self.every is not None:
            _check_int("every", self.every)
            if self.max_drafts is None:
                raise ValueError("every requires max_drafts")
            start = self.every if self.start is None else _check_int("start", self.start)
            last = start + (self.max_drafts - 1) * self.every
            if last > MAX_REASONING_TOKENS:
                raise ValueError(f"every/start/max_drafts reach {last} > {MAX_REASONING_TOKENS} tokens")
            points |= {start + i * self.every for i in range(self.max_drafts)}
        elif self.start is not None:
            raise ValueError("start is only meaningful with every")
        pts = sorted(points)
        if self.thinking_budget is not None:
            # Reasoning stops at the budget: later checkpoints never fire.
            pts = [p for p in pts if p <= self.thinking_budget]
        if self.max_drafts is not None:
            pts = pts[: self.max_drafts]
        return pts

    def checkpoints(self) -> List[int]:
        """Sorted reasoning lengths at which drafts are forked."""
        return list(self._points)

    def due(self, reasoning_len: int, drafts_started: int) -> int:
        """How many drafts should be started now (0 if none).

        ``reasoning_len``: reasoning tokens generated so far;
        ``drafts_started``: drafts already forked for this request.  The
        result is truthy iff a checkpoint has been passed without its draft;
        engines that fork one draft per step just test it.
        """
        passed = bisect.bisect_right(self._points, reasoning_len)
        return max(0, passed - drafts_started)

    def next_checkpoint(self, drafts_started: int) -> Optional[int]:
        """Reasoning length of the next draft to fork, or None when done."""
        if drafts_started < len(self._points):
            return self._points[drafts_started]
        return None

    def __len__(self) -> int:
        return len(self._points)


def seed_from_previous(prev_draft_tokens: Sequence[int], max_len: int, stop_ids: Sequence[int] = ()) -> List[int]:
    """Tokens of an earlier draft to propose for a newer draft's answer.

    Truncated at ``max_len`` and just before the first stop id (EOS): the
    stop token of an older draft must not be proposed as the continuation
    (verification would catch it, but it is wasted work).
    """
    _check_int("max_len", max_len, 0)
    out = list(prev_draft_tokens[:max_len])
    if stop_ids:
        stops = set(stop_ids)
        for i, t in enumerate(out):
            if t in stops:
                return out[:i]
    return out


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix (how long two drafts agree)."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
