"""Cost-aware verify width: verify only the tree nodes whose expected tokens pay for their rows.

A scheduler iteration that verifies ``B`` sequences at width ``w`` (the first ``w`` nodes of every
tree, the root included) and commits ``T`` tokens takes about ``t = f(B) + b * B * w + c * T`` seconds (``c``:
the output work per committed token, streaming and indexing it) and commits, for each sequence ``r`` of kind
``k`` (where its proposal came from: the n-gram corpus while reasoning or answering, or its drafts),
``1 + sum(p_k[j] for 1 <= j < w)`` tokens in expectation, ``p_k[j]`` being how often node ``j`` was on
the accepted path. Trees are laid out parent before child, so the first ``w`` nodes are a subtree
and a path node's ancestors all come before it: cutting a tree to ``w`` nodes loses exactly the path
nodes at ``w`` and beyond, never the output (verification stays the target model's). The step's
width maximises expected committed tokens per second.

Worked example (hypothetical figures, ``c = 0``): ``f(1) = 8 ms``, ``b = 0.5 ms`` per row, one reasoning request
whose n-gram nodes were on the path with ``p = [-, 0.30, 0.10, 0.05, 0.02, 0.01, ...]``:

* ``w = 1``: 1 token in 8.5 ms, 118 tokens/s (a plain decode step);
* ``w = 3``: 1.40 tokens in 9.5 ms, 147 tokens/s -- the best;
* ``w = 12``: at most 1.5 tokens in 14 ms, 107 tokens/s.

Where rows are nearly free (a GPU, a CPU with matrix units at a small batch: ``b`` near 0) every
node that is ever accepted pays and the width stays full.

What is measured: ``c`` from how the iteration time follows ``T`` among the steps of one (sequences,
width) seen lately (rows fixed there); ``b`` by least squares over the median iteration time at each
(sequences, width), less ``c`` times its mean ``T``, from the differences between widths at the same batch
size (wider steps commit more tokens: without ``c`` their output work would read as a row cost); and
``f(B)`` as what is left at each batch size seen (interpolated, or extrapolated linearly, for others);
a batch size's own ``b`` also from the time differences of consecutive steps of differing widths (same
requests, same contexts: ``dt = b * B * dw + c * dT``), the lower of the two kept
(:meth:`WidthPolicy.observe_step`; whole iterations, since the work outside the forward makes
every step dearer and so every accepted token worth more); ``p_k`` from each step's accepted paths, per node over
the steps that verified it, decayed so that it follows the traffic (:meth:`WidthPolicy.observe_paths`).
Until both are known the width is the widest proposal; one step in ``PROBE_EVERY`` (one in
``PROBE_EARLY`` until the cost is fitted) is a probe: at the widest where the best width is narrower
(so that the nodes beyond it keep being rated), at half the widest where the best is the widest (so
that costs are seen at more than one width; half loses fewer accepted tokens than width 1 would).

Where rows are nearly free at a batch size (``b_B * B * (n - 1) < MIN_GAIN * (f(B) + b_B * B) + k_B``,
``b_B`` fitted from that batch size's own widths, since matrix units make rows free at small batches and not
at large ones, and ``k_B`` the measured cost of choosing a width at that batch size, the per-request
bookkeeping of a chosen step (:meth:`WidthPolicy.observe_choice`): even width 1 could not beat the full width by ``MIN_GAIN`` once the
choice is paid for, whatever is accepted) the choice needs no
acceptance at all: :meth:`WidthPolicy.free_width` verifies every node, padding included (free, and
sometimes accepted), probes at half width one step in ``PROBE_FREE`` and asks for the accepted paths
one step in ``RATE_FREE``, so such a step costs almost no bookkeeping. The same holds where rows do
cost but choosing does not pay: each chosen step's expected saving against the full width (for the
same tokens, from the fit) is averaged per batch size, and once ``MIN_CHOICES`` of them save less than
``k_B`` (the trees there are full and deeply accepted, so the choice is the full width or nearly) the
steps verify every node, one in ``RECHECK_FREE`` still choosing so that the saving keeps being
measured (one that saves more starts the measurement over). Costs are kept per (batch size, width)
cell, so the rare probes' samples stay in the fit until newer ones replace them.
"""

from __future__ import annotations

import collections
from typing import Deque, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ssr_sglang import settings

__all__ = ["WidthPolicy", "accepted_path", "PROBE_EVERY", "PROBE_FREE", "RATE_FREE"]

PAIRS = settings.get("SSR_WIDTH_PAIRS")
MIN_PAIRS = settings.get("SSR_WIDTH_MIN_PAIRS")
CELL_SAMPLES = settings.get("SSR_WIDTH_CELL_SAMPLES")
STALE = settings.get("SSR_WIDTH_STALE")
MIN_FIT = settings.get("SSR_WIDTH_MIN_FIT")
PROBE_EVERY = settings.get("SSR_WIDTH_PROBE_EVERY")
PROBE_EARLY = settings.get("SSR_WIDTH_PROBE_EARLY")
PROBE_FREE = settings.get("SSR_WIDTH_PROBE_FREE")
RATE_FREE = settings.get("SSR_WIDTH_RATE_FREE")
DECAY_NODES = settings.get("SSR_WIDTH_DECAY_NODES")
DECAY = 1.0 - 1.0 / DECAY_NODES  # per observed node: older paths weigh less
PRIOR = settings.get("SSR_WIDTH_PRIOR")
PRIOR_P = settings.get("SSR_WIDTH_PRIOR_P")
MIN_GAIN = settings.get("SSR_WIDTH_MIN_GAIN")
CHOICE_WINDOW = settings.get("SSR_WIDTH_CHOICE_WINDOW")
CHOICE_DECAY = 1.0 / CHOICE_WINDOW  # weight of the newest chosen step in the mean cost of choosing (and its saving)
MIN_CHOICES = settings.get("SSR_WIDTH_MIN_CHOICES")
RECHECK_FREE = settings.get("SSR_WIDTH_RECHECK_FREE")


def accepted_path(tokens: Sequence[int], parents: Sequence[int], out: Sequence[int], accepted: int,
                  width: int) -> List[int]:
    """Nodes (root excluded) of the path a verify step accepted: ``out`` are the step's committed
    tokens (``accepted`` of them, the last one the bonus token), each accepted node's token being the
    next committed token; only nodes below ``width`` were verified.

    >>> # root 0 -> 1 (token 5) -> 3 (token 7); root -> 2 (token 6)
    >>> accepted_path([9, 5, 6, 7], [-1, 0, 0, 1], [5, 7, 8], 3, 4)
    [1, 3]
    >>> accepted_path([9, 5, 6, 7], [-1, 0, 0, 1], [6, 4], 2, 4)
    [2]
    """
    path: List[int] = []
    node = 0
    for k in range(accepted - 1):
        want = out[k]
        nxt = -1
        for j in range(node + 1, width):
            if parents[j] == node and tokens[j] == want:
                nxt = j
                break
        if nxt < 0:
            break
        path.append(nxt)
        node = nxt
    return path


class _Acceptance:
    """Per node of one kind of tree: decayed counts of steps that verified it and of those that
    accepted it."""

    __slots__ = ("seen", "hits", "steps", "_cumulative")

    def __init__(self, n: int) -> None:
        self.seen = np.zeros(n)
        self.hits = np.zeros(n)
        self.steps = 0
        self._cumulative: Optional[np.ndarray] = None  # until the next add

    def add(self, paths: Sequence[Sequence[int]], verified: int) -> None:
        m = len(paths)
        keep = DECAY ** m
        self.seen *= keep
        self.hits *= keep
        self.seen[1:verified] += m
        for path in paths:
            self.hits[list(path)] += 1.0
        self.steps += m
        self._cumulative = None

    def cumulative(self) -> np.ndarray:
        """``c[w - 1]``: expected tokens committed at width ``w`` (1 + the nodes below ``w``); read-only,
        kept until the next :meth:`add`."""
        if self._cumulative is None:
            p = (self.hits + PRIOR * PRIOR_P) / (self.seen + PRIOR)
            p[0] = 1.0
            self._cumulative = np.cumsum(p)
            self._cumulative.flags.writeable = False
        return self._cumulative


class _Cell:
    """Recent iterations at one (batch size, width): their seconds and committed tokens."""

    __slots__ = ("secs", "toks", "seen", "_stats")

    def __init__(self) -> None:
        self.secs: Deque[float] = collections.deque(maxlen=CELL_SAMPLES)
        self.toks: Deque[float] = collections.deque(maxlen=CELL_SAMPLES)
        self.seen = 0  # the policy's observation count when last observed
        self._stats: Optional[Tuple[float, float, float, float, float]] = None

    def add(self, seconds: float, tokens: float, seen: int) -> None:
        self.secs.append(seconds)
        self.toks.append(tokens)
        self.seen = seen
        self._stats = None

    def stats(self) -> Tuple[float, float, float, float, float]:
        """(median seconds, mean tokens, samples, and the co-variation of tokens with seconds within the
        cell: sum of ``(T - mean T) * (t - mean t)`` and of ``(T - mean T) ** 2``, times clipped at 3x the
        median so that a stray pause does not lean on it), kept until the next :meth:`add` (a refit
        works again only on the cells observed since the last one)."""
        if self._stats is None:
            t, tok = np.array(self.secs), np.array(self.toks)
            med = float(np.median(t))
            t = np.minimum(t, 3.0 * med)
            dz = tok - tok.mean()
            self._stats = (med, float(tok.mean()), float(len(t)), float(dz @ (t - t.mean())), float(dz @ dz))
        return self._stats


class WidthPolicy:
    """The verify width of each step (see module docstring). ``n``: the full width (tree nodes).

    Lifecycle per verify step: :meth:`free_width` with the batch size; where it returns None,
    :meth:`width` with the batch's kinds and nodes in use; then after the forward
    :meth:`observe_paths` per kind (where asked for) and, for a step :meth:`width` chose, :meth:`observe_choice`;
    once the iteration is over :meth:`observe_step`.
    Not thread-safe (one per scheduler process).
    """

    def __init__(self, n: int) -> None:
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        self.n = n
        self._cells: Dict[Tuple[int, int], _Cell] = {}  # (batch size, width) -> recent iterations
        self._observed = 0
        self._fit: Optional[Tuple[float, np.ndarray, np.ndarray]] = None  # b, batch sizes seen, f at each
        self._token_s = 0.0  # c: seconds an iteration spends per committed token (output work), fitted
        self._fixed_at: Dict[int, float] = {}  # batch size -> f of the current fit
        self._fit_due = 0
        self._local_b: Dict[int, float] = {}  # row cost from the widths seen at each batch size alone
        self._kinds: Dict[str, _Acceptance] = {}
        self._steps = 0
        self._probes = 0
        self._free_steps = 0
        self._choice_s: Dict[int, float] = {}  # batch size -> mean seconds a chosen step spends choosing
        self._choice_n: Dict[int, int] = {}  # ... -> steps behind that mean
        self._saving_s: Dict[int, float] = {}  # batch size -> mean seconds a chosen step's width saves (expected)
        self._saving_n: Dict[int, int] = {}  # ... -> steps behind that mean
        self._rechecks = 0  # steps left at the full width because choosing did not pay
        self._rechecking: Optional[int] = None  # batch size of a step chosen to measure that again
        self.chosen = collections.Counter()  # width -> steps (summary)
        self._prev: Optional[Tuple[int, int, int, float, float]] = None  # (index, B, w, seconds, tokens) last observed
        self._pairs: Dict[int, Deque[Tuple[float, float, float]]] = {}  # B -> (dx, dz, dy) of consecutive steps

    # -- measurements ---------------------------------------------------
    def observe_step(self, sequences: int, width: int, seconds: float, tokens: float = 0.0,
                     index: Optional[int] = None) -> None:
        """An iteration that verified ``sequences`` at ``width`` took ``seconds`` and committed ``tokens``;
        ``index``: the engine's count of forward passes (consecutive steps pair up)."""
        if sequences < 1 or width < 1 or seconds <= 0:
            return
        prev, self._prev = self._prev, None
        if index is not None:
            self._prev = (index, sequences, width, seconds, tokens)
            if prev is not None and prev[0] == index - 1 and prev[1] == sequences \
                    and max(seconds, prev[3]) < 2.0 * min(seconds, prev[3]):
                pairs = self._pairs.get(sequences)
                if pairs is None:
                    pairs = self._pairs[sequences] = collections.deque(maxlen=PAIRS)
                pairs.append((float(sequences * (width - prev[2])), float(tokens - prev[4]), float(seconds - prev[3])))
        key = (int(sequences), int(width))
        cell = self._cells.get(key)
        if cell is None:
            cell = self._cells[key] = _Cell()
        self._observed += 1
        cell.add(float(seconds), float(tokens), self._observed)
        self._fit_due -= 1
        if self._fit_due <= 0:
            self._fit = self._refit()
            self._fit_due = MIN_FIT

    def observe_choice(self, sequences: int, seconds: float) -> None:
        """A step of ``sequences`` whose width was chosen (:meth:`width`) spent ``seconds`` on the bookkeeping
        the choice needs (nodes in use, the rating, the narrowing), beyond what a step at the full width does."""
        if sequences < 1 or seconds < 0:
            return
        _running_mean(self._choice_s, self._choice_n, sequences, seconds)

    def observe_paths(self, kind: str, paths: Sequence[Sequence[int]], verified: int) -> None:
        """Sequences of ``kind`` had nodes ``1 .. verified - 1`` verified, and accepted ``paths``
        (one per sequence)."""
        if not paths:
            return
        acc = self._kinds.get(kind)
        if acc is None:
            acc = self._kinds[kind] = _Acceptance(self.n)
        acc.add(paths, min(verified, self.n))

    def _refit(self) -> Optional[Tuple[float, np.ndarray, np.ndarray]]:
        """``(b, sizes, f)`` of ``t = f(B) + b * B * w + c * T``: ``c`` (the output work per committed token:
        wider steps commit more tokens, which would otherwise read as a row cost) from how time follows the
        tokens ``T`` within each (size, width) cell; ``b`` from the differences between widths within each
        batch size once that is taken out (weighted least squares over each cell's median time), ``f`` at
        each size seen; None until some batch size was seen at two widths. Also refreshes ``c`` and each
        batch size's own row cost (``_local_b``) and drops the ``f(B)`` kept from the last fit, so nothing of
        an earlier fit outlives this one."""
        self._local_b = {}
        self._token_s = 0.0
        self._fixed_at = {}
        for key in [k for k, cell in self._cells.items() if self._observed - cell.seen > STALE]:
            del self._cells[key]
        if sum(len(cell.secs) for cell in self._cells.values()) < MIN_FIT:
            return None
        by_size: Dict[int, list] = collections.defaultdict(list)  # B -> (x = B * w, T, median t, weight)
        szt = szz = 0.0
        for (bs, w), cell in self._cells.items():
            y, tok, wt, zt, zz = cell.stats()
            by_size[bs].append((float(bs * w), tok, y, wt))
            szt, szz = szt + zt, szz + zz
        # c from how time follows tokens within each cell (same batch size, same width: rows fixed)
        self._token_s = c = max(0.0, szt / szz) if szz > 0 else 0.0
        sxy = sxx = 0.0
        for bs, rows in by_size.items():
            x, z, y, wt = (np.array(col) for col in zip(*rows))
            y = y - c * z  # what is left once the output work is taken out
            xm, ym = (wt @ x) / wt.sum(), (wt @ y) / wt.sum()
            bxy, bxx = float(wt @ ((x - xm) * (y - ym))), float(wt @ (x - xm) ** 2)
            if bxx > 0:
                self._local_b[bs] = max(0.0, bxy / bxx)
            sxy += bxy
            sxx += bxx
        if sxx <= 0:
            return None
        # A batch size's own row cost is also read from consecutive steps that differ in width: they share
        # their requests and contexts, which the cells do not (the widths follow what is verified: narrow
        # for reasoning, with shorter contexts, full for answers), so the cells can overstate it. Each
        # estimate errs high in its own way; the lower is kept (see _row_s).
        for bs, pairs in self._pairs.items():
            fit = _pair_fit(pairs)
            if fit is not None:
                self._local_b[bs] = min(self._local_b.get(bs, float("inf")), max(0.0, fit[0]))
        b = max(0.0, sxy / sxx)
        sizes = np.array(sorted(by_size), dtype=np.float64)
        fixed = np.array([sum(wt * (y - self._row_s(k, b) * x - c * z) for x, z, y, wt in by_size[k])
                          / sum(r[3] for r in by_size[k]) for k in sorted(by_size)])
        return b, sizes, fixed

    def _row_s(self, sequences: int, pooled: Optional[float] = None) -> float:
        """Seconds per verified row at this batch size: the lower of the pooled fit and the batch size's own.
        Narrowing on an overstated row cost loses accepted tokens (worse than the full width); on an
        understated one it merely verifies padding, as the full width does."""
        pooled = self._fit[0] if pooled is None else pooled
        return min(pooled, self._local_b.get(sequences, pooled))

    def _fixed(self, sequences: int) -> float:
        """``f(B)``: measured at ``B``, interpolated between sizes seen, extrapolated linearly beyond (kept
        per batch size until the next fit)."""
        f = self._fixed_at.get(sequences)
        if f is None:
            f = self._fixed_at[sequences] = self._fixed_of_fit(sequences)
        return f

    def _fixed_of_fit(self, sequences: int) -> float:
        _, sizes, fixed = self._fit
        if len(sizes) == 1:
            return float(fixed[0])
        if sequences > sizes[-1]:
            slope = (fixed[-1] - fixed[-2]) / (sizes[-1] - sizes[-2])
            return float(fixed[-1] + max(0.0, slope) * (sequences - sizes[-1]))
        return float(np.interp(sequences, sizes, fixed))

    # -- the choice -----------------------------------------------------
    def free_width(self, sequences: int) -> Optional[Tuple[int, bool]]:
        """Where rows are nearly free for a step of ``sequences``, or choosing saves less than it costs (see
        module docstring): the step's width
        (the full one; half of it on a probe step) and whether to rate its accepted paths
        (:meth:`observe_paths`); None where the width is to be chosen by :meth:`width`.

        >>> p = WidthPolicy(12)
        >>> for _ in range(20):
        ...     p.observe_step(1, 12, 0.0080); p.observe_step(1, 6, 0.0080)   # rows cost nothing
        >>> p.free_width(1)
        (12, False)
        """
        b = self._local_b.get(sequences) if self._fit is not None else None
        if b is None:  # rows may cost at one batch size and not at another: judged on its own widths only
            return None
        choosing = self._choice_s.get(sequences, 0.0)
        if b * sequences * (self.n - 1) >= MIN_GAIN * (self._fixed(sequences) + b * sequences) + choosing:
            if not self._choice_idle(sequences, choosing):
                return None
            self._rechecks += 1
            if self._rechecks % RECHECK_FREE == 0:
                self._rechecking = sequences
                return None
        self._steps += 1
        self._free_steps += 1
        if self._free_steps % PROBE_FREE == 0:
            return self._take(max(1, self.n // 2), "probe")[0], True
        return self._take(self.n, "rows nearly free")[0], self._free_steps % RATE_FREE == 0

    def _choice_idle(self, sequences: int, choosing: float) -> bool:
        """Choosing widths at this batch size was measured (``MIN_CHOICES`` chosen steps) to save less than
        the bookkeeping it costs: the trees there are full and deeply accepted, so the chosen width is the
        full one, or nearly."""
        return (self._saving_n.get(sequences, 0) >= MIN_CHOICES and sequences in self._choice_s
                and self._saving_s[sequences] < choosing)

    def width(self, kinds: Sequence[str], in_use: Sequence[int]) -> Tuple[int, str]:
        """The width of a step whose sequences are of ``kinds`` with ``in_use`` nodes (the tree's last
        real node + 1) each, and why.

        >>> p = WidthPolicy(4)
        >>> for _ in range(40):
        ...     p.observe_step(1, 1, 0.0085); p.observe_step(1, 4, 0.010)   # b = 0.5 ms, f(1) = 8 ms
        ...     p.observe_paths("reasoning", [[1], []], 4)           # node 1 accepted once in two, 2 and 3 never
        >>> p._probes = 1   # (not a probe step)
        >>> p.width(["reasoning"], [4])
        (2, 'best tokens per second')
        """
        widest = max(in_use, default=1)
        self._steps += 1
        if widest <= 1:
            if self._fit is not None:
                self._note_saving(len(in_use), self._row_s(len(in_use)) * len(in_use) * (self.n - 1))
            return self._take(1, "nothing proposed")
        best, why = self._best(kinds, in_use, widest)
        self._probes += 1
        if self._probes % (PROBE_EVERY if self._fit is not None else PROBE_EARLY) == 0:
            return self._take(widest if best < widest else max(1, widest // 2), "probe")
        return self._take(best, why)

    def _best(self, kinds: Sequence[str], in_use: Sequence[int], widest: int) -> Tuple[int, str]:
        if self._fit is None:
            return widest, "cost not fitted yet"
        rows = len(kinds)
        b = self._row_s(rows)
        fixed = max(self._fixed(rows), 1e-6)
        gain = np.zeros(widest)
        curves: Dict[str, np.ndarray] = {}
        for (kind, use), m in collections.Counter(zip(kinds, in_use)).items():
            c = curves.get(kind)
            if c is None:
                acc = self._kinds.get(kind)
                c = curves[kind] = (acc.cumulative()[:widest] if acc is not None
                                    else np.arange(1, widest + 1, dtype=np.float64))
            use = max(1, use)
            gain[:use] += m * c[:use]
            gain[use:] += m * c[use - 1]  # nodes past the tree's last real one add nothing
        seconds = fixed + b * rows * np.arange(1, widest + 1) + self._token_s * gain
        rate = gain / seconds
        best = int(np.argmax(rate)) + 1
        if best < widest and rate[best - 1] < rate[-1] * (1 + MIN_GAIN):
            best = widest
        # what the choice saves against the full width (padding verified too), for the same tokens
        full = seconds[-1] + b * rows * (self.n - widest)
        self._note_saving(rows, full * gain[best - 1] / gain[-1] - seconds[best - 1])
        return best, "best tokens per second"

    def _note_saving(self, sequences: int, seconds: float) -> None:
        recheck, self._rechecking = self._rechecking == sequences, None
        if recheck and seconds >= self._choice_s.get(sequences, 0.0):
            self._saving_n[sequences] = 0  # the traffic changed: measure what choosing saves over again
        _running_mean(self._saving_s, self._saving_n, sequences, seconds)

    def _take(self, w: int, why: str) -> Tuple[int, str]:
        self.chosen[w] += 1
        return w, why

    def summary(self) -> dict:
        """What the policy measured, for ``/server_info``."""
        out = {"steps": self._steps, "rows_nearly_free_steps": self._free_steps,
               "choice_not_paying_steps": self._rechecks,
               "choice_s": {k: round(v, 7) for k, v in sorted(self._choice_s.items())},
               "choice_saving_s": {k: round(v, 7) for k, v in sorted(self._saving_s.items())},
               "widths": dict(sorted(self.chosen.items()))}
        if self._fit is not None:
            b, sizes, fixed = self._fit
            out["row_s"] = round(b, 7)
            out["token_s"] = round(self._token_s, 7)
            out["row_s_by_size"] = {k: round(v, 7) for k, v in sorted(self._local_b.items())}
            out["fixed_s"] = {int(k): round(float(f), 6) for k, f in zip(sizes, fixed)}
        fits = {k: _pair_fit(ps) for k, ps in sorted(self._pairs.items())}  # (row s, token s, pairs) per batch size
        out["pairs"] = {k: [round(f[0], 7), round(f[1], 7), f[2]] for k, f in fits.items() if f is not None}
        out["accepted_per_node"] = {k: [round(float(x), 3) for x in
                                        np.diff(np.concatenate(([0.0], acc.cumulative())))[1:]]
                                    for k, acc in self._kinds.items()}
        return out


def _running_mean(means: Dict[int, float], counts: Dict[int, int], key: int, x: float) -> None:
    """Fold ``x`` into ``means[key]``: a plain mean over the first samples, then one decayed by ``CHOICE_DECAY``
    (a slow first sample weighs as one of many once they come)."""
    mean, count = means.get(key, 0.0), counts.get(key, 0) + 1
    counts[key] = count
    means[key] = mean + max(CHOICE_DECAY, 1.0 / count) * (x - mean)


def _pair_fit(pairs) -> Optional[Tuple[float, float, int]]:
    """(row seconds, token seconds, pairs) by least squares through the origin on consecutive steps'
    differences ``dy = b * dx + c * dz``; None where fewer than ``MIN_PAIRS`` of them differ in width.

    >>> pairs = [(4.0 * dw, dz, 4e-5 * 4 * dw + 3e-5 * dz) for dw, dz in [(6, 2), (-6, -1), (0, 3), (3, 0)] * 8]
    >>> [round(x, 7) for x in _pair_fit(pairs)]
    [4e-05, 3e-05, 32]
    """
    if len(pairs) < MIN_PAIRS:
        return None
    a = np.asarray(pairs, dtype=np.float64)
    if np.count_nonzero(a[:, 0]) < MIN_PAIRS:
        return None
    x = a[:, :2]
    m = x.T @ x
    if abs(np.linalg.det(m)) < 1e-12 * max(1.0, m[0, 0] * m[1, 1]):
        return None
    b, c = np.linalg.solve(m, x.T @ a[:, 2])
    return float(b), float(c), len(pairs)
