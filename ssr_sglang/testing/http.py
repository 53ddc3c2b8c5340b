"""Requests the main job, the benchmarks and the tests send to a running SGLang server (HTTP only; the
plugin never imports this)."""

from __future__ import annotations

import json
import time
from typing import Optional

import requests


def flush_cache(url: str, timeout: float = 60) -> None:
    """Empty the server's radix cache and n-gram corpus (``/flush_cache``, once the server is idle).

    Benchmarks flush before each timed request: a prompt sent twice to one server (SSR on and off)
    would otherwise find the first run's output in the cache and corpus, and the second run would win."""
    r = requests.post(url + "/flush_cache", params={"timeout": timeout}, timeout=timeout + 30)
    if r.status_code != 200:
        raise RuntimeError(f"{url}/flush_cache: {r.status_code} {r.text.strip()}")


def run_one(url: str, input_ids, max_new_tokens: int, custom_params=None, think_end: str = "</think>",
            timeout: float = 1800, flush: bool = False, grammar: Optional[dict] = None) -> dict:
    """One greedy request, streamed: latency, time to first token, reasoning and answer time
    (split at ``think_end``), tokens and decode steps up to the think end (steps: streamed chunks
    after the first, as SGLang streams each step's tokens at its default ``stream_interval`` of 1),
    output and SSR metrics. ``flush``: start from an empty cache (:func:`flush_cache`; not timed).
    ``grammar``: sampling parameters that constrain the answer (``{"regex": …}``, ``{"ebnf": …}``), applied
    after the reasoning (``require_reasoning``; the server needs ``--reasoning-parser``)."""
    if flush:
        flush_cache(url)
    sp = {"max_new_tokens": max_new_tokens, "temperature": 0, "skip_special_tokens": False}
    if custom_params:
        sp["custom_params"] = custom_params
    body = {"input_ids": list(input_ids), "stream": True, "sampling_params": sp}
    if grammar:
        sp.update(grammar)
        body["require_reasoning"] = True
    t0 = time.perf_counter()
    t_first = t_think_end = reasoning_tokens = reasoning_steps = last = None
    chunks = 0
    with requests.post(url + "/generate", json=body, stream=True, timeout=timeout) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith(b"data:") or line == b"data: [DONE]":
                continue
            last = json.loads(line[5:])
            chunks += 1
            if t_first is None:
                t_first = time.perf_counter()
            if t_think_end is None and think_end in last.get("text", ""):
                t_think_end = time.perf_counter()
                reasoning_tokens = last["meta_info"].get("completion_tokens")
                reasoning_steps = chunks - 1
    t1 = time.perf_counter()
    if last is None:
        raise RuntimeError(f"{url}: empty stream")
    meta = last["meta_info"]
    return {
        "latency": t1 - t0,
        "ttft": (t_first - t0) if t_first else None,
        "reasoning_time": (t_think_end - t0) if t_think_end else None,
        "answer_time": (t1 - t_think_end) if t_think_end else None,
        "reasoning_tokens": reasoning_tokens,
        "reasoning_steps": reasoning_steps,
        "steps": chunks - 1,
        "text": last["text"],
        "output_ids": last.get("output_ids"),
        "completion_tokens": meta["completion_tokens"],
        "spec_accept_length": meta.get("spec_accept_length"),
        "ssr": meta.get("ssr"),
    }
