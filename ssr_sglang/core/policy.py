"""Cost-aware drafting: fork a draft only when its expected saving exceeds its expected cost.

One :class:`DraftPolicy` per server learns from what the server measures, and a request asks it, at
each reasoning step, whether to fork a draft now (:meth:`DraftPolicy.decide`). Everything is in
seconds and tokens; nothing depends on the model or the device except through the measurements.

Expected saving of a draft forked after ``r`` reasoning tokens::

    S = A * t_step * E[ done(R) * (1/a_plain - 1/a(R - r)) | R > r ]

* ``A``: expected answer length (mean over finished requests);
* ``t_step``: seconds of one answer-phase decode (verify) step at this batch size, without a draft;
* ``a_plain``: answer tokens per verify step without drafts, measured on the last ``CONTROL_WINDOW``
  *control requests*, each weighing half as much as the next newer one. A control request is any
  request answered without a draft: one the policy chose not to draft for (whether to fork depends on
  reasoning lengths and costs, never on the answer's text, so these are a fair sample), or one served
  without drafts on purpose (:meth:`DraftPolicy.start_request`) when no request has been for
  ``CONTROL_EVERY`` requests, or for ``CONTROL_SOON`` while first-draft decisions hinge on ``a_plain``
  (they would flip were it ``A_PLAIN_DOUBT`` higher or lower: the server's n-gram corpus grows with its
  traffic, and so does ``a_plain``). Where drafts are rare, every request refreshes ``a_plain``, so one
  unusual answer (a repetitive one n-grams serve at 4 tokens a step) cannot stop drafting for long.
  The draft-free steps of drafting requests are a
  biased sample (the text the drafts could not serve), and scoring the n-gram proposal a draft step
  replaced is no substitute either (SGLang's n-gram corpus holds the drafts' own text); they stand in
  only until the first control request has answered;
* ``a(d)``: answer tokens per verify step that a draft forked ``d`` reasoning tokens before the
  answer would give on its own: learned per log2 bucket of ``d`` by replaying each finished
  request's answer against each of its drafts (:func:`~ssr_sglang.core.simulator.simulate`, over
  the tokens the draft had written), so a draft that a newer one replaced still says how good it was;
* ``done(R)``: the part of the draft written by the time the answer starts (a late draft is cut short);
* the expectation runs over the server's recent reasoning lengths ``R`` longer than ``r``: the
  chance that the reasoning ends soon, and how far before the end this fork would be.

Expected cost::

    C = B * (t_prefill + c_draft * E[ min(D / a_self, (R - r) / v) | R > r ])

* ``D`` tokens the draft writes before it ends on its own: learned from the server's drafts, the
  tokens all of them wrote (those cut short -- replaced by a newer draft, pruned, their request ended
  -- included) per draft that ended on its own, with one pseudo draft of ``min(draft cap, A)`` tokens
  as the prior; at most the cap. ``a_self`` the draft's own tokens per step (a draft seeded with an
  earlier draft's answer accepts much of it per step);
* ``v`` the request's reasoning tokens per step: the draft is priced only for the reasoning steps it
  runs beside, at most until the reasoning ends (the saving counts only what it wrote by then, and in
  the answer phase a draft runs on only while it supplies accepted tokens);
* ``c_draft`` the measured extra seconds one draft adds to a reasoning step at this batch size
  (whole scheduler iterations), ``t_prefill`` the measured draft prefill time (its share of the
  pass, and what the step after it finishes of its work);
* both priced by the draft's context length ``L`` (a draft's decode re-reads its whole KV cache, a
  fork's prefill attends to all of it): ``c_draft`` at the draft's mean context over its life (the
  fork's ``L`` plus ``D / 2``), ``t_prefill`` at the fork's ``L``, each from a line fitted to the
  samples, which carry their drafts' context (:class:`_Costs`: the medians of the shorter- and
  longer-context halves); the plain median while the samples' contexts are too alike to tell;
* ``B`` the client requests in the running batch: every one of them waits for the draft's share of
  each step and for its prefill pass, while the saving goes to one request (``B = 1`` at batch 1;
  where ``c_draft`` and ``t_prefill`` are near zero, as on a GPU, ``B`` changes nothing).

With no draft yet the request forks iff ``S > C``, or if the draft pays together with the seeded
draft it enables (forked when it is done: faster, and closer to the answer), unless a first draft
forked ``WAIT_STEPS``, ``2 * WAIT_STEPS``, ... tokens later is expected to be worth more, counting the
chance that the reasoning ends first (judged from replayed fork distances only: an unreplayed one is
tried, not waited for). A first draft is slow (it writes from nothing) and holds the request's one
draft slot for most of the reasoning, so where it is forked matters; a newer draft, seeded, is done
in a few steps and leaves the slot free, so it is not delayed. One draft runs at a time; once it is
done, a newer one must pay by what it adds over it, ``E[max(v_new, v_old) - v_old]`` in the terms
above.

Worked example (hypothetical figures of a small model on a CPU, batch 1): ``A = 90``,
``t_step = 8 ms``, ``a_plain = 1.8``; drafts forked less than 32 tokens before the answer replay at
``a = 7``, earlier ones at ``a = 2``. A draft at distance 16 saves ``90 * 0.008 * (1/1.8 - 1/7) =
0.30 s`` if it is complete, one at distance 80 saves ``0.04 s``. At ``r = 40`` with reasoning
lengths seen 60-110 a fork is mostly far from the end: ``S ~ 0.08 s``. An unseeded draft
(``D = 90``, ``a_self = 1.8``: 50 steps) beside steps that it makes ``c_draft = 3.4 ms`` slower, plus
a 20 ms prefill, costs ``C = 0.02 + 50 * 0.0034 = 0.19 s`` where the reasoning runs on for more
than 50 steps; with reasoning at ``v = 1.5`` tokens per step, the 20-70 tokens left take 13-47
steps, ``C ~ 0.02 + 30 * 0.0034 = 0.12 s`` -> no draft. At ``r = 80``, ``S ~ 0.21 s > C`` -> fork. On a GPU, where ``c_draft`` is near zero, ``S > C`` almost always holds and the
policy drafts as the paper does.

Until the server has seen ``MIN_HISTORY`` reasoning requests (and while a request reasons longer
than all but ``MIN_HISTORY`` of them) decisions fall back to the request's fixed schedule
(``Decision.fork is None``). A draft cost not measured at a batch size in the last ``STALE_STEPS``
reasoning steps is explored: one draft measures it (while it does, within ``EXPLORE_GAP`` steps of
the grant, other requests at that batch size are not granted another exploring draft), if the draft
would pay at ``EXPLORE_DISCOUNT`` times the cost measured lately at the nearest other batch size (a
draft adds its rows to any batch), or, where no batch size was measured lately, if it could save
anything. While fewer than ``CONTROL_WINDOW`` control requests have measured ``a_plain``, a draft
that would not pay were ``a_plain`` ``A_PLAIN_DOUBT`` higher is not forked (in doubt, serve as NGRAM
does; the control requests then come sooner). A request stops drafting once two consecutive
finished drafts agree (the answer has settled).
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Deque, Dict, List, Optional, Tuple

import numpy as np

from ssr_sglang import settings

__all__ = ["Decision", "DraftPolicy", "RequestView", "MIN_HISTORY", "CONTROL_EVERY", "CONTROL_SOON", "bucket"]

MIN_HISTORY = settings.get("SSR_POLICY_MIN_HISTORY")
HISTORY = settings.get("SSR_POLICY_HISTORY")
WINDOW = settings.get("SSR_POLICY_WINDOW")
MIN_COST_SAMPLES = settings.get("SSR_POLICY_MIN_COST_SAMPLES")
STALE_STEPS = settings.get("SSR_POLICY_STALE_STEPS")
EXPLORE_GAP = settings.get("SSR_POLICY_EXPLORE_GAP")
CONTROL_EVERY = settings.get("SSR_POLICY_CONTROL_EVERY")
CONTROL_SOON = settings.get("SSR_POLICY_CONTROL_SOON")
CONTROL_WINDOW = settings.get("SSR_POLICY_CONTROL_WINDOW")
A_PLAIN_DOUBT = settings.get("SSR_POLICY_A_PLAIN_DOUBT")
EXPLORE_DISCOUNT = settings.get("SSR_POLICY_EXPLORE_DISCOUNT")
PRIOR_TOKENS = settings.get("SSR_POLICY_PRIOR_TOKENS")
WAIT_STEPS = settings.get("SSR_POLICY_WAIT_STEPS")
CONTEXT_SPREAD = settings.get("SSR_POLICY_CONTEXT_SPREAD")
BUCKETS = 64
_CENTRES = np.arange(1, BUCKETS) - 1 + np.log2(1.5)  # log2 of the middle of buckets 1.. (2**(b-1) to 2**b - 1)


def _net(d: Decision) -> float:
    """Expected seconds a fork decision gains (saving or gain less cost; with a seeded successor, if
    that pays more): what forking now is worth."""
    x = d.inputs
    if "gain_s" in x:
        return x["gain_s"] - x["cost_s"]
    return max(x["saving_s"] - x["cost_s"], x.get("with_successor_saving_s", 0.0) - x.get("with_successor_cost_s", 0.0))


def bucket(n: int) -> int:
    """Log2 bucket of a non-negative count: 0 -> 0, 1 -> 1, 2..3 -> 2, 4..7 -> 3, ...

    >>> [bucket(n) for n in (0, 1, 2, 3, 4, 100)]
    [0, 1, 2, 2, 3, 7]
    """
    return max(0, int(n)).bit_length()


@dataclasses.dataclass
class Decision:
    """Whether to fork now, why, and the inputs the decision used (for ``meta_info``)."""

    fork: Optional[bool]  # None: no basis for a decision yet; the request's fixed schedule decides
    reason: str
    inputs: Dict[str, float] = dataclasses.field(default_factory=dict)

    def as_dict(self, reasoning_tokens: int) -> dict:
        return {"at": reasoning_tokens, "fork": self.fork, "reason": self.reason,
                **{k: round(v, 6) if isinstance(v, float) else v for k, v in self.inputs.items()}}


@dataclasses.dataclass
class RequestView:
    """What the policy needs to know of one request at a decision point."""

    reasoning_tokens: int
    reasoning_tokens_per_step: float  # measured on this request so far
    batch_size: int  # real (client) requests in the running batch
    seeded: bool  # the newest draft so far was itself seeded
    draft_cap: int  # the request's cap on a draft's length
    settled: bool  # two consecutive drafts agreed
    # The newest draft, if any: (reasoning tokens at its fork, tokens it wrote, still running).
    latest: Optional[Tuple[int, int, bool]] = None
    context_tokens: int = 0  # a draft forked now: its input (prompt + reasoning so far); 0: unknown


class _Window:
    """Median of the last ``WINDOW`` samples: step times on a shared machine have outliers (another
    process, a page fault) that would sway a mean, and a stale estimate must wash out."""

    __slots__ = ("samples", "n", "_median")

    def __init__(self) -> None:
        self.samples: Deque[float] = collections.deque(maxlen=WINDOW)
        self.n = 0
        self._median: Optional[float] = None

    def add(self, x: float) -> None:
        self.samples.append(x)
        self.n += 1
        self._median = None

    def replace_last(self, k: int, x: float) -> None:
        """The last ``k`` samples (or as many as are kept) become ``x``."""
        for _ in range(min(k, len(self.samples))):
            self.samples.pop()
        for _ in range(k):
            self.samples.append(x)
        self._median = None

    @property
    def value(self) -> float:
        if self._median is None:
            self._median = float(np.median(self.samples)) if self.samples else 0.0
        return self._median


class _Costs(_Window):
    """A :class:`_Window` of costs whose samples carry the context length (tokens) of the drafts they
    measured. :meth:`at` prices a context: the line through the medians (cost and context) of the
    shorter-context and the longer-context half of the samples, its slope at least 0; the plain median
    where the halves' contexts differ by less than ``CONTEXT_SPREAD`` of the longer one, or fewer than
    ``2 * MIN_COST_SAMPLES`` samples are kept. Medians: one stray step does not tilt the line.

    >>> c = _Costs()
    >>> for _ in range(4):
    ...     c.add(0.001, 2000); c.add(0.004, 32000)   # +0.1 ms per 1000 tokens of context
    >>> round(c.at(8000) * 1e3, 3), round(c.value * 1e3, 3), round(c.per_token() * 1e7, 3)
    (1.6, 2.5, 1.0)
    """

    __slots__ = ("contexts", "_line")

    def __init__(self) -> None:
        super().__init__()
        self.contexts: Deque[float] = collections.deque(maxlen=WINDOW)
        self._line: Optional[Tuple[float, float, float]] = None

    def add(self, x: float, context: float = 0.0) -> None:
        super().add(x)
        self.contexts.append(float(context))
        self._line = None

    def replace_last(self, k: int, x: float) -> None:
        super().replace_last(k, x)  # the samples keep their contexts
        self._line = None

    def _fit(self) -> Tuple[float, float, float]:
        """(cost, context, slope) of the line's anchor, the shorter half's medians; slope 0 where the
        contexts are too alike (the anchor is then the plain median)."""
        if self._line is None:
            self._line = (self.value, 0.0, 0.0)
            n = len(self.samples)
            if n >= 2 * MIN_COST_SAMPLES and len(self.contexts) == n:
                order = np.argsort(np.asarray(self.contexts), kind="stable")
                x, ctx = np.asarray(self.samples)[order], np.asarray(self.contexts)[order]
                lo, hi = slice(0, n // 2), slice(n - n // 2, n)
                l_lo, l_hi = float(np.median(ctx[lo])), float(np.median(ctx[hi]))
                if l_hi > 0 and l_hi - l_lo >= CONTEXT_SPREAD * l_hi:
                    x_lo, x_hi = float(np.median(x[lo])), float(np.median(x[hi]))
                    self._line = (x_lo, l_lo, max(0.0, (x_hi - x_lo) / (l_hi - l_lo)))
        return self._line

    def at(self, context: Optional[float]) -> float:
        """The cost at ``context`` tokens (None: unknown, the median)."""
        if context is None:
            return self.value
        x0, l0, slope = self._fit()
        return x0 + slope * (context - l0)

    def per_token(self) -> float:
        """Seconds per token of context (0 until the samples' contexts differ enough to tell)."""
        return self._fit()[2]


class DraftPolicy:
    """Server-wide measurements and the fork decision (see module docstring).

    ``max_accept``: the most answer tokens one verify step can commit (the tree's nodes); an
    unmeasured fork distance is assumed that good, so that it gets tried.

    Lifecycle: the engine calls :meth:`observe_step` once per decode step, :meth:`observe_prefill`
    for each draft prefill, :meth:`observe_request` once per finished client request and
    :meth:`observe_draft` once per finished draft; :meth:`decide` reads the measurements and writes
    only the step of its last exploring grant. Not thread-safe (one per scheduler process).
    """

    def __init__(self, max_accept: float = 8.0) -> None:
        if max_accept < 1:
            raise ValueError(f"max_accept must be >= 1, got {max_accept}")
        self.max_accept = float(max_accept)
        # Per log2 bucket of the batch's client requests, seconds of: a reasoning step with no draft in
        # the batch, the extra a draft adds to such a step, and a step with answers in it (no draft).
        self._step: Dict[int, _Window] = collections.defaultdict(_Window)
        self._extra: Dict[int, _Costs] = collections.defaultdict(_Costs)  # ... priced by the drafts' context
        # Draft-free reasoning steps since the last draft-carrying one: a cost measured long ago (under
        # another load) is measured again by exploring, so one bad estimate cannot stop drafting for good.
        self._since_extra: Dict[int, int] = collections.defaultdict(int)
        self._answer_step: Dict[int, _Window] = collections.defaultdict(_Window)
        self._prefill = _Costs()  # a draft's prefill, priced by its context
        self._pending_prefill: Optional[Tuple[float, int]] = None  # (share, drafts) until the next step
        self._steps = 0  # decode steps observed
        self._explored: Dict[int, int] = {}  # batch bucket -> step of the last exploring draft granted
        # Recent reasoning lengths and whether an answer followed (False: the request ended inside
        # its reasoning, e.g. at max_new_tokens -- a draft forked for it was never used).
        self._lengths: Deque[Tuple[int, bool]] = collections.deque(maxlen=HISTORY)
        self._sorted_len = np.zeros(0, dtype=np.int64)  # the lengths, sorted ...
        self._sorted_answered = np.zeros(0, dtype=bool)  # ... and their flags, in the same order
        self._answers: Deque[int] = collections.deque(maxlen=HISTORY)
        self._plain = [0, 0]  # answer tokens, steps: verify steps without a draft proposal
        self._control: Deque[Tuple[int, int]] = collections.deque(maxlen=CONTROL_WINDOW)  # per control request
        self._control_steps = 0  # answer steps of all control requests so far
        self._started = 0  # client requests that reached a decision point (start_request)
        self._since_control: Optional[int] = None  # requests started since the last control request answered
        self._hinges = False  # the last first-draft decision would flip with a_plain A_PLAIN_DOUBT off
        self._ssr = [0, 0]  # the same with a draft proposal
        self._self = {True: [0, 0], False: [0, 0]}  # seeded -> draft tokens, draft steps
        self._drafts: Deque[Tuple[int, bool]] = collections.deque(maxlen=HISTORY)  # tokens written, ended on its own
        self._drafts_sum = [0, 0]  # over self._drafts: tokens written, drafts that ended on their own
        self._replay: Dict[int, List[float]] = collections.defaultdict(lambda: [0.0, 0.0])  # tokens, steps
        self._inv_accept = np.full(BUCKETS, 1.0 / self.max_accept)  # bucket of fork distance -> 1 / a(d)
        self._replayed = np.zeros(BUCKETS, dtype=bool)  # ... measured (not the prior alone)

    # -- measurements ---------------------------------------------------
    def observe_step(self, batch_size: int, drafts: int, seconds: float, reasoning: bool,
                     after_prefill: bool = False, after_draft: bool = False, draft_context: float = 0.0) -> None:
        """A decode step of ``batch_size`` client requests and ``drafts`` drafts took ``seconds``;
        ``reasoning``: every client request of the batch was reasoning. A draft's cost is measured
        on reasoning steps only (like against like: answer steps build proposals and verify fuller
        trees), with ``draft_context``, the drafts' mean context length (tokens in their KV cache).

        ``after_prefill``: the step directly follows a prefill pass. Such a step also finishes the
        prefill's work (its outputs, the new requests' first decode setup), so it is no sample of a
        step; its excess over the expected step is added to the prefill of the drafts that pass
        started (:meth:`observe_prefill`), if it started any.

        ``after_draft``: the step follows one with more drafts in it. It also finishes the work of the
        drafts that left (their last outputs, their release), so it is no sample either: counted as a
        draft-free step it would raise the draft-free baseline and hide what the drafts beside the
        other steps cost.

        >>> p = DraftPolicy()
        >>> for _ in range(8):
        ...     p.observe_step(1, 0, 0.010, True)
        ...     p.observe_step(1, 1, 0.012, True)
        >>> p.observe_step(1, 0, 0.030, True, after_prefill=True)  # a client's first step: no sample
        >>> p.observe_prefill(0.005, drafts=1)
        >>> p.observe_step(1, 1, 0.015, True, after_prefill=True)  # 3 ms over 12: the draft's prefill
        >>> round(p.summary()["reasoning_step_s"][1], 6), round(p.summary()["prefill_s"], 6)
        (0.01, 0.008)
        """
        if batch_size < 1 or seconds <= 0:
            return
        self._steps += 1
        b = bucket(batch_size)
        if after_prefill:
            self._settle_prefill(b, drafts, seconds)
            return
        if after_draft:
            return
        if not reasoning:
            if drafts == 0:
                self._answer_step[b].add(seconds)
        elif drafts == 0:
            self._step[b].add(seconds)
            self._since_extra[b] += 1
        elif self._step[b].n:
            self._since_extra[b] = 0
            # may be < 0: noise, kept unclipped
            self._extra[b].add((seconds - self._step[b].value) / drafts, draft_context)

    def free_step_s(self, batch_size: int) -> Optional[float]:
        """The measured draft-free reasoning step (whole scheduler iteration) at ``batch_size`` client
        requests; ``None`` before one was measured at that batch size's bucket."""
        w = self._step.get(bucket(batch_size))
        return w.value if w is not None and w.n else None

    def observe_prefill(self, seconds: float, drafts: int = 1, context: float = 0.0) -> None:
        """A prefill pass started ``drafts`` drafts of mean context ``context`` (their input tokens);
        ``seconds`` is each one's share of it. The next decode step's excess over a plain step is added
        to these samples (:meth:`observe_step`)."""
        for _ in range(drafts):
            self._prefill.add(seconds, context)
        self._pending_prefill = (seconds, drafts) if drafts > 0 else None

    def _settle_prefill(self, b: int, drafts: int, seconds: float) -> None:
        pending, self._pending_prefill = self._pending_prefill, None
        step = self._step.get(b)
        if pending is None or step is None or not step.n:
            return
        share, started = pending
        extra = self._extra.get(b)
        expected = step.value + drafts * max(0.0, extra.value if extra is not None and extra.n else 0.0)
        excess = max(0.0, seconds - expected) / started
        self._prefill.replace_last(started, share + excess)

    def start_request(self) -> bool:
        """A client request reached its first decision point. True: it is a control request, to be served
        without drafts (its answer measures ``a_plain``): the first after the ``MIN_HISTORY`` learning
        requests unless a request answered without drafts already, then one once ``CONTROL_EVERY``
        requests have started since a control request last answered (``CONTROL_SOON`` while the last
        first-draft decision hinged on ``a_plain``).

        >>> p = DraftPolicy()
        >>> [i for i in range(80) if p.start_request()] == [MIN_HISTORY, MIN_HISTORY + 32, MIN_HISTORY + 64]
        True
        >>> p._hinges = True
        >>> [i for i in range(80, 100) if p.start_request()]
        [80, 88, 96]
        >>> p.observe_request(80, 90, (90, 45), (0, 0), [], control=True)  # answered without drafts
        >>> [i for i in range(100, 110) if p.start_request()]  # 8 after it, not after the forced one at 96
        [107]
        """
        self._started += 1
        if self._started <= MIN_HISTORY:
            return False
        if self._since_control is not None:
            self._since_control += 1
            due = CONTROL_SOON if self._hinges else CONTROL_EVERY
            if self._since_control < due:
                return False
        self._since_control = 0
        return True

    def observe_request(self, reasoning_tokens: int, answer_tokens: int, plain: Tuple[int, int],
                        ssr: Tuple[int, int], replays: List[Tuple[int, int, int]], control: bool = False) -> None:
        """A client request finished.

        ``plain``/``ssr``: (answer tokens, verify steps) without / with a draft proposal;
        ``replays``: per draft replayed, (reasoning tokens at its fork, answer tokens replayed,
        verify steps the replay took); ``control``: it was answered without a draft (forced by
        :meth:`start_request` or not), so its ``plain`` rate is a fair sample of ``a_plain``.
        ``answer_tokens == 0``: the request ended inside its reasoning (its length is a lower bound).
        """
        if reasoning_tokens <= 0:
            return
        self._lengths.append((reasoning_tokens, answer_tokens > 0))
        order = sorted(self._lengths)
        self._sorted_len = np.array([x[0] for x in order], dtype=np.int64)
        self._sorted_answered = np.array([x[1] for x in order], dtype=bool)
        if answer_tokens <= 0:
            return
        self._answers.append(answer_tokens)
        for acc, x in ((self._plain, plain), (self._ssr, ssr)):
            acc[0] += x[0]
            acc[1] += x[1]
        if control and plain[1] > 0:
            self._control.append(plain)
            self._control_steps += plain[1]
            self._since_control = 0
        for at, tokens, steps in replays:
            if tokens <= 0 or steps <= 0:
                continue
            b = min(bucket(reasoning_tokens - at), BUCKETS - 1)
            acc = self._replay[b]
            acc[0] += tokens
            acc[1] += steps
            self._inv_accept[b] = 1.0 / self._replay_accept(b)
            self._replayed[b] = True

    def observe_draft(self, seeded: bool, tokens: int, steps: int) -> None:
        """A draft ended on its own (a stop token, its cap) after writing ``tokens`` in ``steps`` decode
        steps."""
        acc = self._self[seeded]
        acc[0] += tokens
        acc[1] += steps
        self._note_draft(tokens, True)

    def observe_draft_cut(self, tokens: int) -> None:
        """A draft was cut short (replaced, pruned, its request ended) after writing ``tokens``: it would
        have written at least that many."""
        self._note_draft(tokens, False)

    def _note_draft(self, tokens: int, ended: bool) -> None:
        """Keep a draft's length in the recent window and its running sums (read at every decision)."""
        if len(self._drafts) == self._drafts.maxlen:
            old_tokens, old_ended = self._drafts[0]
            self._drafts_sum[0] -= old_tokens
            self._drafts_sum[1] -= old_ended
        tokens = max(0, int(tokens))
        self._drafts.append((tokens, ended))
        self._drafts_sum[0] += tokens
        self._drafts_sum[1] += ended

    # -- derived --------------------------------------------------------
    @property
    def history(self) -> int:
        return len(self._lengths)

    def answer_length(self) -> float:
        return sum(self._answers) / len(self._answers) if self._answers else 0.0

    def draft_cap(self, cap: int) -> int:
        """A draft need not be longer than the answers this server writes: ``cap`` or less."""
        if len(self._answers) < MIN_HISTORY:
            return cap
        longest = sorted(self._answers)[int(0.9 * (len(self._answers) - 1))]
        return max(1, min(cap, int(1.25 * longest) + 8))

    def draft_length(self, cap: int) -> float:
        """Tokens a draft writes before it ends on its own, at most ``cap``: every recent draft's tokens
        (a cut draft's count as far as it got) per draft that ended on its own, one pseudo draft of
        ``min(cap, answer length)`` tokens included (the estimate for lengths seen only in part).

        >>> p = DraftPolicy()
        >>> for _ in range(4):
        ...     p.observe_request(80, 400, (400, 100), (0, 0), [])
        >>> p.draft_length(512)  # no draft yet: the answers' length
        400.0
        >>> for _ in range(3):
        ...     p.observe_draft(False, 140, 90)   # drafts stop well before the answer's length
        >>> p.observe_draft_cut(60)               # one replaced after 60 tokens
        >>> (400 + 3 * 140 + 60) / 4
        220.0
        >>> p.draft_length(512), p.draft_length(128)
        (220.0, 128.0)
        """
        answer = self.answer_length()
        prior = min(cap, answer) if answer > 0 else cap
        written, ended = self._drafts_sum
        return float(min(cap, (written + prior) / (ended + 1)))

    def a_plain(self) -> float:
        """Answer tokens per verify step without drafts: from the last ``CONTROL_WINDOW`` control requests
        once one has answered, the newer ones weighing more.

        >>> p = DraftPolicy()
        >>> p.observe_request(80, 90, (90, 45), (0, 0), [], control=True)  # 2 tokens per step
        >>> p.observe_request(80, 90, (90, 30), (0, 0), [], control=True)  # then 3
        >>> round(p.a_plain(), 3)  # (0.5 * 90 + 90) / (0.5 * 45 + 30)
        2.571
        """
        if self._control:  # each older control request weighs half as much as the next newer one
            w = 0.5 ** np.arange(len(self._control) - 1, -1, -1)
            tokens, steps = np.asarray(self._control, dtype=np.float64).T
            return float(w @ tokens / (w @ steps))
        return self._rate(self._plain, 1.0)

    @staticmethod
    def _rate(acc, default: float) -> float:
        return acc[0] / acc[1] if acc[1] else default

    def _replay_accept(self, b: int) -> float:
        """``a(d)`` for log2 bucket ``b`` of the fork distance, pulled towards ``max_accept`` by a
        prior of ``PRIOR_TOKENS`` tokens."""
        tokens, steps = self._replay.get(b, (0.0, 0.0))
        return (tokens + PRIOR_TOKENS) / (steps + PRIOR_TOKENS / self.max_accept)

    def longer_than(self, r: int) -> int:
        return len(self._sorted_len) - int(np.searchsorted(self._sorted_len, r, side="right"))

    def _values(self, r: int, tokens_per_step: float, draft_len: float, a_self: float, a_plain: float,
                at: int, written: int, measured: bool = False) -> np.ndarray:
        """Per recent reasoning length ``R > r``: answer steps saved per answer token by a draft
        forked after ``at`` tokens that has ``written`` of ``draft_len`` tokens and writes ``a_self``
        per step while the reasoning goes on at ``tokens_per_step`` (0 for requests never answered).
        ``measured``: from replays alone (:meth:`_measured_inv_accept`), not the optimistic prior."""
        i = int(np.searchsorted(self._sorted_len, r, side="right"))
        longer = self._sorted_len[i:]
        # 1 / a(d), interpolated in log2(d) between the buckets' centres: a fork moved by a few
        # tokens changes its expected worth a little, not by a bucket's jump.
        x = np.log2(np.maximum(longer - at, 1).astype(np.float64))
        table = self._measured_inv_accept(a_plain) if measured else self._inv_accept
        inv = np.interp(x, _CENTRES, table[1:])
        done = np.minimum(1.0, (written + a_self * (longer - r) / max(tokens_per_step, 1e-6)) / max(draft_len, 1.0))
        return np.maximum(0.0, 1.0 / a_plain - inv) * done * self._sorted_answered[i:]

    def _measured_inv_accept(self, a_plain: float) -> np.ndarray:
        """``1 / a(d)`` per bucket from replays alone: an unreplayed fork distance is taken to be as good
        as the nearest replayed longer one (a draft forked closer to the answer is no worse), and with
        none, no better than no draft.

        >>> p = DraftPolicy(max_accept=12)
        >>> p.observe_request(100, 90, (90, 50), (0, 0), [(80, 60, 10)])   # d = 20: bucket 5, a = 6
        >>> [round(float(1 / x), 1) for x in p._measured_inv_accept(1.8)[3:7]]   # buckets 3-6
        [6.0, 6.0, 6.0, 1.8]
        """
        idx = np.where(self._replayed, np.arange(BUCKETS), BUCKETS)
        nearest = np.minimum.accumulate(idx[::-1])[::-1]  # the nearest replayed bucket at or above each
        return np.where(nearest < BUCKETS, self._inv_accept[np.minimum(nearest, BUCKETS - 1)], 1.0 / a_plain)

    def _draft_steps(self, r: int, tokens_per_step: float, draft_len: float, a_self: float, start: int) -> float:
        """Expected reasoning steps a draft forked after ``start`` reasoning tokens runs beside, over the
        recent reasoning lengths ``R > r`` (0 where ``R <= start``): its ``draft_len / a_self`` steps, or
        fewer where the reasoning ends sooner (``(R - start) / tokens_per_step`` steps)."""
        longer = self._sorted_len[int(np.searchsorted(self._sorted_len, r, side="right")):]
        if not len(longer):
            return 0.0
        left = np.maximum(longer - start, 0) / max(tokens_per_step, 1e-6)
        return float(np.minimum(draft_len / max(a_self, 1e-6), left).mean())

    def summary(self) -> dict:
        """What the policy has measured, for ``/server_info`` (times in seconds, per batch bucket
        ``b``: batches of ``2**(b-1)`` to ``2**b - 1`` client requests)."""
        r6 = lambda x: round(x, 6)  # noqa: E731
        return {
            "history": self.history,
            "answer_tokens": r6(self.answer_length()),
            "a_plain": r6(self.a_plain()), "a_plain_control_steps": self._control_steps,
            "a_draft": r6(self._rate(self._ssr, 0.0)),
            "a_self": {"seeded": r6(self._rate(self._self[True], 0.0)),
                       "unseeded": r6(self._rate(self._self[False], 0.0))},
            "reasoning_step_s": {b: r6(w.value) for b, w in sorted(self._step.items())},
            "answer_step_s": {b: r6(w.value) for b, w in sorted(self._answer_step.items())},
            "draft_step_s": {b: r6(w.value) for b, w in sorted(self._extra.items())},
            "draft_step_s_per_1k_context": {b: r6(1e3 * w.per_token()) for b, w in sorted(self._extra.items())},
            "prefill_s": r6(self._prefill.value),
            "prefill_s_per_1k_context": r6(1e3 * self._prefill.per_token()),
            "replayed_accept_by_fork_distance": {f"<{2 ** b}": r6(self._replay_accept(b)) for b in sorted(self._replay)},
        }

    # -- the decision ---------------------------------------------------
    def decide(self, v: RequestView) -> Decision:
        if v.settled:
            return Decision(False, "settled: the last two drafts agree")
        if self.history < MIN_HISTORY:
            return Decision(None, f"learning: {self.history} of {MIN_HISTORY} reasoning requests seen")
        b = bucket(v.batch_size)
        step = self._step.get(b)
        if step is None or not step.n:
            return Decision(None, f"no draft-free step measured at batch size {v.batch_size} yet")
        longer = self.longer_than(v.reasoning_tokens)
        if longer < MIN_HISTORY:
            return Decision(None, f"reasoning longer than {self.history - longer} of the last {self.history} requests")
        if v.latest is not None and v.latest[2]:
            return Decision(False, "a draft is running")
        a_plain = self.a_plain()
        per_step, source = self._draft_step_cost(b, self._draft_context(v))
        if source is None or not source.startswith("measured"):
            return self._explore(v, b, a_plain, per_step, source)
        d = self._weigh(v, b, a_plain, per_step)
        doubt = [self._weigh(v, b, a_plain * (1 + A_PLAIN_DOUBT), per_step).fork]
        if v.latest is None:  # does the first draft hinge on a_plain? (start_request then measures it soon)
            doubt.append(self._weigh(v, b, a_plain * (1 - A_PLAIN_DOUBT), per_step).fork)
            self._hinges = any(f != d.fork for f in doubt)
        if d.fork and not doubt[0] and len(self._control) < CONTROL_WINDOW:
            return Decision(False, f"in doubt: no gain were a_plain {A_PLAIN_DOUBT:.0%} higher, and only "
                                   f"{len(self._control)} of {CONTROL_WINDOW} control requests measured it", d.inputs)
        if d.fork and v.latest is None:
            later = self._later(v, b, a_plain, per_step)
            if later is not None and later[1] > _net(d):
                d.inputs.update(wait_until=later[0], later_net_s=later[1])
                return Decision(False, "waiting: a later fork is expected to be worth more", d.inputs)
        return d

    def _later(self, v: RequestView, b: int, a_plain: float, per_step: float) -> Optional[Tuple[int, float]]:
        """For a first draft: the best later fork point and its expected net worth now, over forks
        ``WAIT_STEPS`` tokens later (doubling): its net worth were the reasoning to reach it, times the
        chance it does, from
        measured fork distances only (the optimistic prior of an unmeasured one is a reason to try it,
        which forking now does, not to wait for it). None where no later point has ``MIN_HISTORY``
        recent reasoning lengths beyond it."""
        r, n = v.reasoning_tokens, self.longer_than(v.reasoning_tokens)
        best, gap = None, WAIT_STEPS
        while True:
            later = r + gap
            m = self.longer_than(later)
            if m < MIN_HISTORY:
                return best
            ctx = v.context_tokens + gap if v.context_tokens > 0 else 0
            worth = m / n * _net(self._weigh(dataclasses.replace(v, reasoning_tokens=later, context_tokens=ctx),
                                             b, a_plain, per_step, measured=True))
            if best is None or worth > best[1]:
                best = (later, worth)
            gap *= 2

    def _draft_context(self, v: RequestView) -> Optional[float]:
        """The mean context length over the life of a draft forked now (None: unknown): its input, plus
        half of what it will write."""
        if v.context_tokens <= 0:
            return None
        return v.context_tokens + 0.5 * self.draft_length(v.draft_cap)

    def _draft_step_cost(self, b: int, context: Optional[float] = None) -> Tuple[Optional[float], Optional[str]]:
        """The extra seconds a draft of mean context ``context`` adds to a reasoning step at batch bucket
        ``b``, and where the figure comes from: ``"measured"`` (at ``b``, lately), ``"estimated from ..."``
        (the nearest bucket measured lately: a draft adds its rows to any batch), or (None, None) where no
        bucket was measured lately."""
        def fresh(k: int) -> bool:
            w = self._extra.get(k)
            return w is not None and w.n >= MIN_COST_SAMPLES and self._since_extra[k] <= STALE_STEPS

        if fresh(b):
            return max(0.0, self._extra[b].at(context)), "measured"
        near = sorted((abs(k - b), k) for k in self._extra if fresh(k))
        if not near:
            return None, None
        k = near[0][1]
        return max(0.0, self._extra[k].at(context)), f"estimated from batch size {2 ** (k - 1)}-{2 ** k - 1}"

    def _weigh(self, v: RequestView, b: int, a_plain: float, per_step: float, measured: bool = False) -> Decision:
        """Saving against cost at a draft cost of ``per_step`` seconds per reasoning step (no side effects);
        ``measured``: as :meth:`_values`."""
        r = v.reasoning_tokens
        a_draft = self._rate(self._ssr, self.max_accept)
        # A seeded draft decodes against an earlier draft as the answer does: until seeded drafts are
        # measured, they are taken to accept as many tokens per step as the answer does.
        a_new = self._rate(self._self[True], a_draft) if v.latest else self._rate(self._self[False], a_plain)
        answer = self.answer_length()
        draft_len = self.draft_length(v.draft_cap)
        step, answer_step = self._step[b], self._answer_step.get(b)
        t_answer = answer_step.value if answer_step is not None and answer_step.n else step.value
        scale = answer * t_answer  # seconds per (answer steps saved per answer token)
        new = self._values(r, v.reasoning_tokens_per_step, draft_len, a_new, a_plain, r, 0, measured)
        saving = scale * float(new.mean())
        sharers = max(1, v.batch_size)
        prefill = max(0.0, self._prefill.at(v.context_tokens if v.context_tokens > 0 else None))
        steps = self._draft_steps(r, v.reasoning_tokens_per_step, draft_len, a_new, r)
        cost = sharers * (prefill + steps * per_step)
        inputs = {"answer_tokens": answer, "step_s": t_answer, "a_plain": a_plain, "a_self": a_new,
                  "saving_s": saving, "draft_tokens": draft_len, "draft_steps": steps, "draft_step_s": per_step,
                  "prefill_s": prefill, "sharers": sharers, "cost_s": cost, "context_tokens": v.context_tokens}
        if v.latest is None:
            return self._first(v, new, saving, cost, scale, a_plain, a_draft, draft_len, per_step, inputs, measured)
        at, written, _ = v.latest
        old = self._values(r, v.reasoning_tokens_per_step, draft_len, 0.0, a_plain, at, written, measured)
        gain = scale * float((np.maximum(new, old) - old).mean())
        inputs.update(gain_s=gain)
        if gain > cost:
            return Decision(True, "newer draft: gain over the last one > cost", inputs)
        return Decision(False, "newer draft: gain over the last one <= cost", inputs)

    def _explore(self, v: RequestView, b: int, a_plain: float, estimate: Optional[float],
                 source: Optional[str]) -> Decision:
        """Draft cost at this batch size unknown or stale: one draft measures it, if it could pay at
        ``EXPLORE_DISCOUNT`` times the cost estimated from another batch size (or, with no estimate,
        if it could save anything); other requests at the same batch size wait ``EXPLORE_GAP`` steps
        for its figures."""
        d = self._weigh(v, b, a_plain, EXPLORE_DISCOUNT * (estimate or 0.0))
        inputs = d.inputs if estimate is not None else {k: x for k, x in d.inputs.items()
                                                        if k not in ("draft_step_s", "cost_s")}
        if estimate is not None:
            inputs["draft_step_source"] = source
        granted = self._explored.get(b)
        if granted is not None and self._steps - granted < EXPLORE_GAP:
            return Decision(False, f"exploring: another draft is measuring the cost at batch size {v.batch_size}",
                            inputs)
        if estimate is not None and not d.fork:
            return Decision(False, f"exploring: draft cost at batch size {v.batch_size} not measured lately, and "
                                   f"no gain at {EXPLORE_DISCOUNT:g}x the cost {source}", inputs)
        if estimate is None and d.inputs["saving_s"] <= 0:
            return Decision(False, f"exploring: draft cost at batch size {v.batch_size} not measured lately, "
                                   "and no saving expected", inputs)
        self._explored[b] = self._steps
        return Decision(True, f"exploring: draft cost at batch size {v.batch_size} not measured lately", inputs)

    def _first(self, v, new, saving, cost, scale, a_plain, a_draft, draft_len, per_step, inputs,
               measured=False) -> Decision:
        """The first draft is also worth what it enables: a seeded draft forked when it is done,
        which writes faster and closer to the answer. Worth it if the pair pays, or the draft alone."""
        r, tps = v.reasoning_tokens, v.reasoning_tokens_per_step
        a_unseeded = self._rate(self._self[False], a_plain)
        a_seeded = self._rate(self._self[True], a_draft)
        r1 = r + int(draft_len / max(a_unseeded, 1e-6) * tps)  # when this draft will be done
        i = int(np.searchsorted(self._sorted_len, r, side="right"))
        longer = self._sorted_len[i:]
        later = longer > r1
        j = int(np.searchsorted(self._sorted_len, r1, side="right")) - i
        succ = np.zeros(len(longer))
        if later.any():
            succ[j:] = self._values(r1, tps, draft_len, a_seeded, a_plain, r1, 0, measured)
        pair = scale * float(np.maximum(new, succ).mean())
        pair_cost = cost + inputs["sharers"] * (float(later.mean()) * inputs["prefill_s"]
                                                + self._draft_steps(r, tps, draft_len, a_seeded, r1) * per_step)
        inputs.update(with_successor_saving_s=pair, with_successor_cost_s=pair_cost)
        if saving > cost:
            return Decision(True, "saving > cost", inputs)
        if pair > pair_cost:
            return Decision(True, "saving > cost with a seeded successor", inputs)
        return Decision(False, "cost >= saving", inputs)
