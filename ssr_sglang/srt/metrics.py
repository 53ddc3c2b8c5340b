"""SSR metrics: per request in ``meta_info["ssr"]``, server-wide in ``/server_info`` and Prometheus."""

from __future__ import annotations

import dataclasses
import threading
from typing import Optional

META_KEY = "ssr"


@dataclasses.dataclass
class SSRCounters:
    """One request's counts and stage times (``meta_info["ssr"]``); :class:`ServerTotals` sums them."""

    drafts_started: int = 0
    drafts_finished: int = 0  # drafts that ended on their own (EOS or their length cap)
    drafts_cancelled: int = 0  # drafts aborted because their parent finished first
    drafts_skipped: int = 0
    draft_tokens: int = 0
    draft_prompt_tokens: int = 0  # prompt + reasoning + forced end, summed over drafts
    draft_cached_tokens: int = 0  # of which served from the radix cache (the reused reasoning KV)
    reasoning_tokens: int = 0
    answer_tokens: int = 0
    answer_verify_steps: int = 0
    draft_answer_steps: int = 0  # answer verify steps with a draft proposal, and the answer tokens
    draft_answer_tokens: int = 0  # they committed (the rest were n-gram or plain steps)
    accepted_prefix: int = 0  # answer tokens accepted from aligned drafts' continuations
    accepted_suffix: int = 0  # ... from suffix matches, of which:
    accepted_suffix_live: int = 0  # in a draft still decoding
    accepted_suffix_done: int = 0  # in a draft that ended (finished, cancelled) or was supplied by the client
    accepted_suffix_answer: int = 0  # in the answer itself (an earlier part of it)
    accepted_suffix_context: int = 0  # in the prompt or the reasoning (ssr_context)
    context_tokens: int = 0  # prompt and reasoning tokens indexed as sources (ssr_context)
    # Server-side stage times (scheduler wall time, seconds). A step's time runs from the start of
    # the worker's forward (proposal building included) to the verified tokens being ready.
    reasoning_steps: int = 0
    reasoning_time_s: float = 0.0
    reasoning_draft_steps: int = 0  # reasoning steps whose batch also decoded a draft of this request
    reasoning_draft_time_s: float = 0.0
    # SSR's own host work in its reasoning steps: the worker's proposals and verify width, the hooks'
    # bookkeeping and drafting decisions (forks excluded: fork_time_s); all of it delays the request
    reasoning_host_time_s: float = 0.0
    # Whole scheduler iterations (from one batch's results to the next's: result processing, streaming and
    # batch building count too) of its reasoning decode steps, of which those with a draft of it, with SSR's
    # host work in the latter; the server's measured draft-free reasoning step at each step's batch size
    # (a step before one was measured is its own baseline); its share of whole prefill iterations that
    # started its drafts (forks included). reasoning_split() divides the reasoning phase with them.
    reasoning_loop_time_s: float = 0.0
    reasoning_draft_loop_time_s: float = 0.0
    reasoning_draft_host_time_s: float = 0.0
    reasoning_base_time_s: float = 0.0
    reasoning_draft_base_time_s: float = 0.0
    reasoning_unpriced_draft_steps: int = 0  # draft steps with no measured draft-free step to price them
    draft_prefill_loop_time_s: float = 0.0
    draft_prefill_time_s: float = 0.0  # this request's share of prefill batches that started its drafts
    fork_time_s: float = 0.0  # scheduler time spent forking its drafts
    verify_time_s: float = 0.0  # answer-phase steps (each one target verification)
    verify_steps: int = 0  # decode steps in all phases, and the tree nodes they verified: with an
    verify_nodes: int = 0  # adaptive width (SSR_VERIFY_WIDTH) fewer than steps x num-draft-tokens
    propose_time_s: float = 0.0  # of which: building the proposals from the drafts (host side)

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        steps = self.answer_verify_steps
        d["answer_accept_length"] = round(self.answer_tokens / steps, 4) if steps else None
        for k, v in d.items():
            if isinstance(v, float):
                d[k] = round(v, 6)
        split = self.reasoning_split()
        d["reasoning_split_s"] = {k: round(v, 6) for k, v in split.items()} if split else None
        d["draft_overhead_s"] = round(split["draft_rows"] + split["draft_prefill"], 6) if split else None
        return d

    def reasoning_split(self) -> Optional[dict]:
        """The server-side time of the reasoning phase (``total``: its decode iterations plus its share of
        the prefill iterations that started its drafts), split into parts that add up to it exactly:

        * ``plain_equivalent``: its steps priced at the server's draft-free reasoning step, less SSR's host
          work of such a step (``h``: the mean over the request's draft-free steps, else over all of them);
        * ``host``: SSR's own host work in its steps (:class:`~ssr_sglang.srt.stage_clock.StageClock`);
        * ``draft_rows``: what the steps that carried a draft of it took beyond that price, host work aside
          (the drafts' decode rows, and SGLang's processing of their results);
        * ``draft_prefill``: its share of the prefill iterations that started its drafts, forks included;
        * ``other``: what its draft-free steps took beyond that price (noise, the first step's prefill tail).

        Worked example: 10 steps, 4 with a draft; whole iterations 10 ms draft-free and 14 ms with a draft,
        the server's draft-free step 10 ms; host work 1 ms a draft-free step, 2 ms a draft step; one 8 ms
        prefill: ``h`` = 1 ms, plain-equivalent 10 x 9 = 90, host 6 x 1 + 4 x 2 = 14, draft rows
        4 x (14 - 2) - 4 x 9 = 12, other 6 x (10 - 1) - 6 x 9 = 0, draft prefill 8: total 124 ms.

        A draft-free step taken before the server had measured one is its own price; ``None`` when a step
        with a draft was (tensor parallelism, where the drafting policy measures no step): its drafts'
        cost is unknown.
        """
        if self.reasoning_unpriced_draft_steps:
            return None
        n, nd = self.reasoning_steps, self.reasoning_draft_steps
        nf = n - nd
        host_d = self.reasoning_draft_host_time_s
        host_f = self.reasoning_host_time_s - host_d
        h = host_f / nf if nf else (self.reasoning_host_time_s / n if n else 0.0)
        loop_d, base_d = self.reasoning_draft_loop_time_s, self.reasoning_draft_base_time_s
        loop_f, base_f = self.reasoning_loop_time_s - loop_d, self.reasoning_base_time_s - base_d
        return {"total": self.reasoning_loop_time_s + self.draft_prefill_loop_time_s,
                "plain_equivalent": self.reasoning_base_time_s - n * h,
                "host": self.reasoning_host_time_s,
                "draft_rows": (loop_d - host_d) - (base_d - nd * h),
                "draft_prefill": self.draft_prefill_loop_time_s,
                "other": (loop_f - host_f) - (base_f - nf * h)}



@dataclasses.dataclass
class ServerTotals:
    """Sums over finished client requests (drafts are counted through their parents)."""

    requests: int = 0
    requests_with_drafts: int = 0
    counters: SSRCounters = dataclasses.field(default_factory=SSRCounters)

    def add(self, st) -> None:
        self.requests += 1
        c = st.counters
        if c.drafts_started:
            self.requests_with_drafts += 1
        for f in dataclasses.fields(SSRCounters):
            setattr(self.counters, f.name, getattr(self.counters, f.name) + getattr(c, f.name))

    def as_dict(self) -> dict:
        d = self.counters.as_dict()
        d["requests"] = self.requests
        d["requests_with_drafts"] = self.requests_with_drafts
        return d


_PROM = None
_PROM_LOCK = threading.Lock()


def export_prometheus(totals: ServerTotals, labels: dict) -> None:
    """Mirror the totals into Prometheus gauges (only when SGLang's ``--enable-metrics`` is on)."""
    global _PROM
    try:
        from prometheus_client import Gauge
    except ImportError:  # pragma: no cover - prometheus_client ships with sglang
        return
    with _PROM_LOCK:
        if _PROM is None:
            names = [*labels]
            _PROM = {
                key: Gauge(f"sglang:ssr_{key}", f"SSR: {key.replace('_', ' ')} (sum over finished requests)",
                           labelnames=names, multiprocess_mode="mostrecent")
                for key in ("requests", "drafts_started", "drafts_finished", "drafts_skipped", "draft_tokens",
                            "answer_tokens", "answer_verify_steps", "accepted_prefix", "accepted_suffix")
            }
    values = totals.as_dict()
    for key, gauge in _PROM.items():
        gauge.labels(**labels).set(values[key])
