"""SSR metrics: per request in ``meta_info["ssr"]``, server-wide in ``/server_info`` and Prometheus."""

from __future__ import annotations

import dataclasses
import threading

from ssr_sglang.srt.request_state import SSRCounters

META_KEY = "ssr"


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
