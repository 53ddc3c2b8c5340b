"""Soak test of an SSR server: many concurrent clients, a mix of requests, leaks and exactness.

Drives a real SGLang server started with ``--speculative-algorithm SSR`` (started here, or an
existing one with ``--url``) with up to ``--concurrency`` concurrent clients and ``--requests``
requests in ``--rounds`` rounds (loopback only, bounded in count and in ``--duration`` seconds).
The mix covers reasoning and non-reasoning prompts, streamed and not, greedy and sampled,
``/v1/chat/completions`` and ``/generate``, short and long.  Reported:

* requests served, errors, p50/p99 latency (per kind too);
* greedy exactness: every greedy output against a plain (no speculation) reference server run on
  the same prompts afterwards (``--no-reference`` to skip);
* KV token usage over time (``/v1/loads`` polled), and whether it returns to zero when idle;
* RSS of the server process tree (psutil, else ``/proc``) after each idle round: growth per round;
* SSR drafts started / skipped / cancelled over the run (``/server_info`` ``internal_states[0]["ssr"]``):
  graceful degradation shows as skipped drafts under load;
* whether SGLang's idle leak check printed anything (server log grepped for "leak").

Writes ``<out>.json`` and ``<out>.md``.  Example (CPU, the bundled tiny reasoning model)::

    python benchmarks/soak.py --requests 256 --concurrency 64 --rounds 2 --out benchmarks/results/soak-cpu
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime as _dt
import json
import os
import random
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SAMPLED = {"temperature": 0.8, "top_p": 0.95}
# A greedy mismatch whose first differing token was one of the plain server's top-2, with logprobs
# this close (a few bf16 ulps at |logprob| ~ 1-4), is counted as a near-tie, not as an SSR error.
TIE_TOL = 0.0625


# -- workload -------------------------------------------------------------------
@dataclasses.dataclass
class Item:
    """One request of the mix."""

    idx: int
    api: str  # "generate" or "chat"
    reasoning: bool
    stream: bool
    greedy: bool
    max_tokens: int
    prompt: str  # /generate: the full prompt text; chat: the user message
    custom_params: Optional[dict] = None

    @property
    def kind(self) -> str:
        return "/".join([self.api, "reason" if self.reasoning else "plain", "stream" if self.stream else "block",
                         "greedy" if self.greedy else "sampled", f"{self.max_tokens}"])


def make_workload(n: int, seed: int, reasoning_prompts: Sequence[str], chat_template: Callable[[str], str],
                  plain_texts: Sequence[str], short: int = 16, long: int = 256,
                  greedy_fraction: float = 0.6, custom_params: Optional[dict] = None) -> List[Item]:
    """``n`` requests cycling through every combination of api x reasoning x stream x greedy x length.

    ``reasoning_prompts`` are user messages (``chat_template(msg)`` gives the ``/generate`` text, which
    opens the think block); ``plain_texts`` are raw prompts without the template (non-reasoning).
    """
    rng = random.Random(seed)
    combos = [(api, r, s, g, m) for api in ("generate", "chat") for r in (True, False) for s in (False, True)
              for g in (True, False) for m in (short, long)]
    items = []
    for i in range(n):
        api, reasoning, stream, greedy, max_tokens = combos[i % len(combos)]
        if not greedy and rng.random() < greedy_fraction - 0.5:
            greedy = True  # weight towards greedy: those are the ones checked for exactness
        if reasoning:
            msg = rng.choice(reasoning_prompts)
            prompt = chat_template(msg) if api == "generate" else msg
        else:
            prompt = rng.choice(plain_texts) if api == "generate" else rng.choice(reasoning_prompts)
        items.append(Item(i, api, reasoning, stream, greedy, max_tokens, prompt, custom_params))
    rng.shuffle(items)
    return items


def closed_think_messages(user: str) -> list:
    """A chat whose assistant turn already closed its think block: the model answers directly."""
    return [{"role": "user", "content": user}, {"role": "assistant", "content": "<think>\n\n</think>\n\n"}]


# -- one request --------------------------------------------------------------------
def _body(item: Item, model: str) -> tuple:
    if item.api == "generate":
        sp = {"max_new_tokens": item.max_tokens, "temperature": 0.0}
        if not item.greedy:
            sp.update(SAMPLED)
        if item.custom_params:
            sp["custom_params"] = item.custom_params
        return "/generate", {"text": item.prompt, "sampling_params": sp, "stream": item.stream}
    body = {"model": model, "max_tokens": item.max_tokens, "stream": item.stream, "temperature": 0.0}
    if not item.greedy:
        body.update(SAMPLED)
    if item.reasoning:
        body["messages"] = [{"role": "user", "content": item.prompt}]
    else:
        body["messages"] = closed_think_messages(item.prompt)
        body["continue_final_message"] = True
    if item.custom_params:
        body["custom_params"] = item.custom_params
    return "/v1/chat/completions", body


def _generate_fields(data: dict) -> dict:
    """What a record keeps of a ``/generate`` response (or its last streamed chunk)."""
    meta = data["meta_info"]
    return {"output": data["output_ids"], "ssr": meta.get("ssr"), "finish": meta["finish_reason"]["type"],
            "ntok": meta["completion_tokens"]}


async def _run_one(session, url: str, item: Item, model: str, timeout: float) -> dict:
    import aiohttp

    path, body = _body(item, model)
    t0 = time.perf_counter()
    rec = {"idx": item.idx, "kind": item.kind, "ok": False, "output": None, "ssr": None, "error": None}
    try:
        async with session.post(url + path, json=body, timeout=aiohttp.ClientTimeout(total=timeout)) as r:
            if r.status != 200:
                rec["error"] = f"HTTP {r.status}: {(await r.text())[:200]}"
            elif not item.stream:
                data = await r.json()
                if item.api == "generate":
                    rec.update(_generate_fields(data))
                else:
                    rec["output"] = data["choices"][0]["message"]["content"]
                    rec["finish"] = data["choices"][0]["finish_reason"]
                    rec["ntok"] = data["usage"]["completion_tokens"]
            else:
                last, text, finish = None, [], None
                async for raw in r.content:
                    line = raw.strip()
                    if not line.startswith(b"data:") or line == b"data: [DONE]":
                        continue
                    chunk = json.loads(line[5:])
                    if item.api == "generate":
                        last = chunk
                    else:
                        for ch in chunk.get("choices", []):
                            text.append(ch.get("delta", {}).get("content") or "")
                            finish = ch.get("finish_reason") or finish
                if item.api == "generate":
                    rec.update(_generate_fields(last))
                else:
                    rec["output"] = "".join(text)
                    rec["finish"] = finish
                    rec["ntok"] = None
            rec["ok"] = rec["error"] is None
    except Exception as e:  # noqa: BLE001 - every failure is a counted error
        rec["error"] = f"{type(e).__name__}: {e}"[:300]
    rec["latency_s"] = time.perf_counter() - t0
    return rec


async def _drive(url: str, items: List[Item], concurrency: int, model: str, deadline: float,
                 timeout: float) -> List[dict]:
    import aiohttp

    queue: asyncio.Queue = asyncio.Queue()
    for it in items:
        queue.put_nowait(it)
    results: List[dict] = []

    async def client(session):
        while time.time() < deadline:
            try:
                it = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            results.append(await _run_one(session, url, it, model, max(5.0, min(timeout, deadline - time.time()))))

    conn = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=conn) as session:
        await asyncio.gather(*(client(session) for _ in range(concurrency)))
    return results


def run_requests(url: str, items: List[Item], concurrency: int, model: str = "default",
                 deadline: Optional[float] = None, timeout: float = 600.0) -> List[dict]:
    deadline = deadline or time.time() + timeout
    return asyncio.run(_drive(url, items, concurrency, model, deadline, timeout))


# -- monitoring -----------------------------------------------------------------------
def tree_rss(pid: int) -> int:
    """RSS in bytes of ``pid`` and all its descendants (psutil if installed, else /proc)."""
    try:
        import psutil

        p = psutil.Process(pid)
        procs = [p, *p.children(recursive=True)]
        total = 0
        for q in procs:
            try:
                total += q.memory_info().rss
            except psutil.Error:
                pass
        return total
    except ImportError:
        pass
    children: Dict[int, List[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d))
    total, stack, page = 0, [pid], os.sysconf("SC_PAGE_SIZE")
    while stack:
        q = stack.pop()
        try:
            total += int(Path(f"/proc/{q}/statm").read_text().split()[1]) * page
        except (OSError, IndexError, ValueError):
            pass
        stack.extend(children.get(q, []))
    return total


class LoadPoller(threading.Thread):
    """Samples ``/v1/loads`` (and the server's tree RSS) every ``interval`` seconds."""

    def __init__(self, url: str, pid: Optional[int], interval: float = 0.5):
        super().__init__(daemon=True)
        self.url, self.pid, self.interval = url, pid, interval
        self.samples: List[dict] = []
        self._halt = threading.Event()
        self.t0 = time.time()

    def run(self) -> None:
        import requests

        while not self._halt.is_set():
            s = {"t": round(time.time() - self.t0, 2)}
            try:
                load = requests.get(self.url + "/v1/loads", timeout=5).json()["loads"][0]
                s.update(used=load["num_used_tokens"], usage=load["token_usage"], running=load["num_running_reqs"],
                         waiting=load["num_waiting_reqs"])
            except Exception as e:  # noqa: BLE001
                s["error"] = str(e)[:100]
            if self.pid:
                s["rss_mb"] = round(tree_rss(self.pid) / 2**20, 1)
            self.samples.append(s)
            self._halt.wait(self.interval)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=10)


def wait_idle(url: str, timeout: float = 60.0) -> dict:
    import requests

    deadline = time.time() + timeout
    while True:
        load = requests.get(url + "/v1/loads", timeout=10).json()["loads"][0]
        idle = load["num_running_reqs"] == 0 and load["num_waiting_reqs"] == 0 and load["num_used_tokens"] == 0
        if idle or time.time() > deadline:
            load["idle"] = idle
            return load
        time.sleep(0.25)


def ssr_state(url: str) -> dict:
    import requests

    try:
        return requests.get(url + "/server_info", timeout=10).json()["internal_states"][0].get("ssr") or {}
    except Exception:  # noqa: BLE001
        return {}


def model_id(url: str) -> str:
    import requests

    return requests.get(url + "/v1/models", timeout=10).json()["data"][0]["id"]


# -- exactness ------------------------------------------------------------------------
def check_greedy(items: List[Item], results: List[dict], reference_url: str, concurrency: int = 8) -> dict:
    """Re-run every served greedy request on the plain reference server; count mismatches."""
    by_idx = {it.idx: it for it in items}
    greedy = [r for r in results if r["ok"] and by_idx[r["idx"]].greedy]
    todo = [dataclasses.replace(by_idx[r["idx"]], stream=False, custom_params=None) for r in greedy]
    ref = {r["idx"]: r for r in run_requests(reference_url, todo, concurrency, model_id(reference_url))}
    mismatches = []
    for r in greedy:
        want = ref.get(r["idx"])
        if want is None or not want["ok"]:
            mismatches.append({"idx": r["idx"], "kind": r["kind"], "why": f"reference failed: {want and want['error']}"})
        elif want["output"] != r["output"]:
            m = {"idx": r["idx"], "kind": r["kind"], "why": "output differs",
                 "got": str(r["output"])[:200], "want": str(want["output"])[:200]}
            if r.get("ssr"):
                m["phase"] = r["ssr"].get("phase")
            if by_idx[r["idx"]].api == "generate":
                m.update(_tie_at_divergence(reference_url, by_idx[r["idx"]], r["output"], want["output"]))
            else:
                m.update(_chat_tie_at_divergence(reference_url, by_idx[r["idx"]], r["output"]))
            mismatches.append(m)
    ties = [m for m in mismatches if m.get("tie")]
    return {"greedy_checked": len(greedy), "greedy_mismatches": len(mismatches),
            "greedy_mismatches_at_near_ties": len(ties), "greedy_mismatches_not_ties": len(mismatches) - len(ties),
            "mismatch_examples": mismatches[:8]}


def _chat_tie_at_divergence(reference_url: str, item: "Item", got: str) -> dict:
    """The chat form of :func:`_tie_at_divergence`, walking the reference's token strings."""
    import requests

    _, body = _body(dataclasses.replace(item, stream=False, custom_params=None), model_id(reference_url))
    body.update(logprobs=True, top_logprobs=2)
    try:
        content = requests.post(reference_url + "/v1/chat/completions", json=body, timeout=120).json()[
            "choices"][0]["logprobs"]["content"]
    except Exception:  # noqa: BLE001
        return {"tie": False}
    pos = 0
    for k, e in enumerate(content):
        tok = e["token"]
        if got[pos:pos + len(tok)] != tok:
            tops = e.get("top_logprobs") or []
            tie = len(tops) >= 2 and abs(tops[0]["logprob"] - tops[1]["logprob"]) <= TIE_TOL and any(
                t["token"] != tok and got[pos:].startswith(t["token"]) for t in tops[:2])
            return {"diverge_at": k, "tie": tie, "top2": tops[:2]}
        pos += len(tok)
    return {"diverge_at": len(content), "tie": False}


def _tie_at_divergence(reference_url: str, item: "Item", got: list, want: list) -> dict:
    """Is the first differing token a near-tie of the plain server's top-2 logprobs (gap <= ``TIE_TOL``)?

    bf16 logits tie, or come within a few bf16 ulps, now and then; speculative verification (an extend
    pass over a token tree, in any SGLang speculative algorithm) rounds differently than plain decode
    and may then pick the other token.
    """
    import requests

    k = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), None)
    if k is None:
        return {"diverge_at": min(len(got), len(want)), "tie": False}
    body = {"text": item.prompt, "sampling_params": {"max_new_tokens": item.max_tokens, "temperature": 0.0},
            "return_logprob": True, "top_logprobs_num": 2}
    try:
        top = requests.post(reference_url + "/generate", json=body, timeout=120).json()["meta_info"][
            "output_top_logprobs"][k]
    except Exception:  # noqa: BLE001
        return {"diverge_at": k, "tie": False}
    (lp0, t0, _), (lp1, t1, _) = top[0], top[1]
    return {"diverge_at": k, "tie": abs(lp0 - lp1) <= TIE_TOL and {got[k], want[k]} == {t0, t1}, "top2": top}


# -- the run ----------------------------------------------------------------------------
def _pct(xs: List[float], q: float) -> Optional[float]:
    if not xs:
        return None
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 3)


def soak(url: str, items: List[Item], concurrency: int, rounds: int = 2, duration: float = 600.0,
         reference_url: Optional[str] = None, pid: Optional[int] = None, log_path: Optional[str] = None,
         timeout: float = 300.0, poll_interval: float = 0.5) -> dict:
    """Run ``items`` ``rounds`` times; returns the report dict (see module docstring)."""
    model = model_id(url)
    deadline = time.time() + duration
    ssr_before = ssr_state(url)
    poller = LoadPoller(url, pid, poll_interval)
    poller.start()
    rss_idle_mb = [round(tree_rss(pid) / 2**20, 1)] if pid else []
    results: List[dict] = []
    idle_loads = []
    t0 = time.time()
    try:
        for _ in range(rounds):
            if time.time() >= deadline:
                break
            results += run_requests(url, items, concurrency, model, deadline, timeout)
            idle_loads.append(wait_idle(url))
            if pid:
                rss_idle_mb.append(round(tree_rss(pid) / 2**20, 1))
    finally:
        poller.stop()
    wall = time.time() - t0
    ssr_after = ssr_state(url)
    ok = [r for r in results if r["ok"]]
    lat = [r["latency_s"] for r in ok]
    per_kind: Dict[str, dict] = {}
    for r in results:
        k = per_kind.setdefault(r["kind"], {"n": 0, "errors": 0, "lat": []})
        k["n"] += 1
        k["errors"] += not r["ok"]
        if r["ok"]:
            k["lat"].append(r["latency_s"])
    for k in per_kind.values():
        lat_k = k.pop("lat")
        k["p50_s"], k["p99_s"] = _pct(lat_k, 0.5), _pct(lat_k, 0.99)
    used = [s["used"] for s in poller.samples if "used" in s]
    diff = {k: ssr_after.get(k, 0) - ssr_before.get(k, 0) for k in
            ("requests", "requests_with_drafts", "drafts_started", "drafts_skipped", "drafts_finished",
             "drafts_cancelled", "draft_tokens", "accepted_prefix", "accepted_suffix") if k in ssr_after}
    leak_lines = []
    if log_path and Path(log_path).exists():
        leak_lines = [ln for ln in Path(log_path).read_text(errors="replace").splitlines() if "leak" in ln.lower()]
    report = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "url": url,
        "rounds": len(idle_loads),
        "concurrency": concurrency,
        "requests_sent": len(results),
        "requests_served": len(ok),
        "errors": len(results) - len(ok),
        "error_examples": [r["error"] for r in results if not r["ok"]][:5],
        "wall_s": round(wall, 1),
        "throughput_rps": round(len(ok) / wall, 2) if wall else None,
        "output_tokens": sum(r.get("ntok") or 0 for r in ok),
        "latency_p50_s": _pct(lat, 0.5),
        "latency_p99_s": _pct(lat, 0.99),
        "latency_max_s": round(max(lat), 3) if lat else None,
        "per_kind": dict(sorted(per_kind.items())),
        "kv_used_tokens_max": max(used) if used else None,
        "kv_usage_max": max((s["usage"] for s in poller.samples if "usage" in s), default=None),
        "kv_used_tokens_idle": [ld["num_used_tokens"] for ld in idle_loads],
        "idle_reached": [ld["idle"] for ld in idle_loads],
        "max_waiting": max((s.get("waiting", 0) for s in poller.samples), default=None),
        "rss_idle_mb": rss_idle_mb,
        "rss_growth_mb_per_round": [round(b - a, 1) for a, b in zip(rss_idle_mb, rss_idle_mb[1:])],
        "rss_max_mb": max((s.get("rss_mb", 0) for s in poller.samples), default=None),
        "ssr": diff,
        "ssr_active_after": {k: ssr_after.get(k) for k in ("active_requests", "active_drafts")},
        "leak_lines": leak_lines[:5],
        "kv_timeline": poller.samples[:: max(1, len(poller.samples) // 120)],
    }
    if reference_url:
        report.update(check_greedy(items, results, reference_url))
    return report


def markdown(report: dict, command: str = "") -> str:
    r = report
    ssr = r.get("ssr", {})
    lines = [
        f"# SSR soak report ({r['date']})", "",
        f"Command: `{command}`" if command else "", "",
        "| metric | value |", "|---|---|",
        f"| requests served / sent | {r['requests_served']} / {r['requests_sent']} |",
        f"| errors | {r['errors']} |",
        f"| concurrency (clients) | {r['concurrency']} |",
        f"| rounds | {r['rounds']} |",
        f"| wall time | {r['wall_s']} s |",
        f"| throughput | {r['throughput_rps']} req/s |",
        f"| latency p50 / p99 / max | {r['latency_p50_s']} / {r['latency_p99_s']} / {r['latency_max_s']} s |",
        f"| greedy requests checked vs plain server | {r.get('greedy_checked', 'n/a')} |",
        f"| greedy mismatches (at top-2 near-ties, gap <= {TIE_TOL} / other) | {r.get('greedy_mismatches', 'n/a')}"
        f" ({r.get('greedy_mismatches_at_near_ties', 'n/a')} / {r.get('greedy_mismatches_not_ties', 'n/a')}) |",
        f"| KV used tokens: max under load | {r['kv_used_tokens_max']} (usage {r['kv_usage_max']}) |",
        f"| KV used tokens when idle (per round) | {r['kv_used_tokens_idle']} |",
        f"| max waiting requests | {r['max_waiting']} |",
        f"| server RSS when idle (start, after each round) | {r['rss_idle_mb']} MB |",
        f"| RSS growth per round | {r['rss_growth_mb_per_round']} MB |",
        f"| drafts started / skipped / finished / cancelled | {ssr.get('drafts_started')} / {ssr.get('drafts_skipped')}"
        f" / {ssr.get('drafts_finished')} / {ssr.get('drafts_cancelled')} |",
        f"| SSR requests / with drafts | {ssr.get('requests')} / {ssr.get('requests_with_drafts')} |",
        f"| leak-check lines in server log | {len(r['leak_lines'])} |",
        "", "## Per kind (api/reasoning/stream/decoding/max tokens)", "",
        "| kind | n | errors | p50 s | p99 s |", "|---|---|---|---|---|",
    ]
    for k, v in r["per_kind"].items():
        lines.append(f"| {k} | {v['n']} | {v['errors']} | {v['p50_s']} | {v['p99_s']} |")
    if r.get("error_examples"):
        lines += ["", "Errors:", *[f"- {e}" for e in r["error_examples"]]]
    if r.get("mismatch_examples"):
        lines += ["", "Mismatches:", *[f"- {m}" for m in r["mismatch_examples"]]]
    return "\n".join(lines) + "\n"


# -- CLI ---------------------------------------------------------------------------------
def bundled_workload_inputs(model_path: str, n_prompts: int = 32, seed: int = 0):
    """Reasoning prompts from the bundled model's task generator, plain texts without the template."""
    from transformers import AutoTokenizer

    from ssr_sglang.models import tasks

    rng = random.Random(seed)
    prompts = [str(tasks.make_example(rng)["prompt"]) for _ in range(n_prompts)]
    tok = AutoTokenizer.from_pretrained(model_path)

    def template(msg: str) -> str:
        return tok.apply_chat_template([{"role": "user", "content": msg}], add_generation_prompt=True, tokenize=False)

    plain = [p.split("\n", 2)[1] for p in prompts]  # e.g. "pear: 7, +3, -2": no template, no think block
    return prompts, template, plain


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="an already running SSR server (default: start one)")
    ap.add_argument("--pid", type=int, help="with --url: the server's pid, for RSS")
    ap.add_argument("--log", help="with --url: the server's log, for the leak check")
    ap.add_argument("--reference-url", help="a running plain server for the greedy check (default: start one)")
    ap.add_argument("--no-reference", action="store_true", help="skip the greedy exactness check")
    ap.add_argument("--model", help="model path (default: the bundled tiny reasoning model)")
    ap.add_argument("--server-arg", action="append", default=[], help="extra server argument (repeatable)")
    ap.add_argument("--env", action="append", default=[], help="K=V for the SSR server (repeatable)")
    ap.add_argument("--max-total-tokens", type=int, default=16384)
    ap.add_argument("--requests", type=int, default=128, help="requests per round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--duration", type=float, default=900.0, help="stop issuing requests after this many seconds")
    ap.add_argument("--short", type=int, default=16)
    ap.add_argument("--long", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="output path without extension (default benchmarks/results/soak-<date>)")
    a = ap.parse_args(argv)
    if a.concurrency > 64 or a.requests * a.rounds > 10_000:
        ap.error("bounded: --concurrency <= 64 and --requests x --rounds <= 10000")
    for u in filter(None, [a.url, a.reference_url]):
        if not u.startswith(("http://127.0.0.1", "http://localhost")):
            ap.error("loopback servers only")

    from ssr_sglang.models import bundled_model_path
    from ssr_sglang.testing.server import Server, cpu_server_args

    model = a.model or bundled_model_path()
    prompts, template, plain = bundled_workload_inputs(model, seed=a.seed)
    items = make_workload(a.requests, a.seed, prompts, template, plain, a.short, a.long)
    out = Path(a.out or ROOT / "benchmarks" / "results" / f"soak-{_dt.date.today().isoformat()}")
    out.parent.mkdir(parents=True, exist_ok=True)
    # Checkpoints inside the bundled model's ~100-200 reasoning tokens (the default, 500, is past them).
    env = {"SSR_CHECKPOINTS": "32,64,128", "SSR_MAX_DRAFT_TOKENS": "128", **dict(kv.split("=", 1) for kv in a.env)}
    started = []
    try:
        url, pid, log = a.url, a.pid, a.log
        if not url:
            log = str(out) + ".server.log"
            srv = Server(cpu_server_args(model, "--speculative-algorithm", "SSR", *a.server_arg,
                                         max_total_tokens=a.max_total_tokens), env=env, log_path=log)
            srv.start()
            started.append(srv)
            url, pid = srv.url, srv.proc.pid
        ref = None
        if not a.no_reference:
            ref = a.reference_url
            if not ref:
                rs = Server(cpu_server_args(model, max_total_tokens=a.max_total_tokens),
                            log_path=str(out) + ".plain.log")
                rs.start()
                started.append(rs)
                ref = rs.url
        report = soak(url, items, a.concurrency, a.rounds, a.duration, ref, pid, log)
    finally:
        for s in started:
            s.stop()
    command = "python benchmarks/soak.py " + " ".join(sys.argv[1:] if argv is None else argv)
    report["command"] = command
    Path(str(out) + ".json").write_text(json.dumps(report, indent=1))
    Path(str(out) + ".md").write_text(markdown(report, command))
    print(markdown(report, command))
    bad = report["errors"] or report.get("greedy_mismatches_not_ties") or not all(report["idle_reached"]) \
        or any(report["kv_used_tokens_idle"]) or report["leak_lines"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
