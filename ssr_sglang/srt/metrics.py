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
        d["draft_overhead_s"] = self.draft_overhead_s()
        return d

    def draft_overhead_s(self) -> Optional[float]:
        """Reasoning time the drafts cost this request: the extra time of reasoning steps that carried
        a draft, over the mean draft-free reasoning step, plus draft prefill and fork time. ``None``
        when no reasoning step ran without a draft (no baseline to compare with)."""
        free_steps = self.reasoning_steps - self.reasoning_draft_steps
        if not self.reasoning_draft_steps:
            extra = 0.0
        elif free_steps <= 0:
            return None
        else:
            base = (self.reasoning_time_s - self.reasoning_draft_time_s) / free_steps
            extra = max(0.0, self.reasoning_draft_time_s - self.reasoning_draft_steps * base)
        return round(extra + self.draft_prefill_time_s + self.fork_time_s, 6)



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
