"""Drafting overhead and behaviour under load: plain, NGRAM and SSR servers.

1. **Overhead** (batch 1): reasoning-phase throughput (tokens/s up to the think end) on the SSR
   server with drafting on (``ssr``) and off (per request ``{"ssr": false}``), the two alternating
   per prompt, and on the plain server. The drafting cost is ``1 - on / off``. The SSR server also
   proposes tokens while reasoning (NGRAM-style, helped by the drafts' text), so the same is
   measured on a second SSR server with ``SSR_REASONING_FALLBACK=none``: there the reasoning is
   plain decoding and ``1 - on / off`` is the pure cost of running drafts next to it.
2. **Concurrency sweep**: at each level (default 1, 4, 16, 64 requests in flight) a bounded number
   of requests (``max(level, --min-requests)``, at most ``--max-requests``), greedy, streamed;
   output throughput (all completion tokens / wall time), request latency (mean, p50, p90) and
   drafts started/skipped per method. ``--max-batch 32`` (the default) adds an SSR server with
   ``SSR_MAX_BATCH=32`` (drafts until 32 requests run, the GPU default) beside the default SSR
   server (on CPU: no new drafts from 4 running requests) to show what that back-off buys.

Servers run one at a time (about 5 GB each on CPU), so compare ratios, not absolute numbers,
on a shared machine.

Examples::

    python benchmarks/load.py                                   # bundled model, CPU, a few minutes
    python benchmarks/load.py --concurrency 1,4 --methods plain,ssr --max-batch ""  # quick
    python benchmarks/load.py --methods ssr --dp-sizes 1,2 --concurrency 16,64 --overhead-n 0 --max-batch ""
    python benchmarks/load.py --model-path Qwen/Qwen3-4B --device cuda --reasoning-parser qwen3 \\
        --dataset classeval --max-new-tokens 4096 --concurrency 1,4,16,64
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_utils as bu  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    bu.add_dataset_args(p)
    p.add_argument("--seed", type=int, default=1234, help="bundled task seed (held out from training)")
    p.add_argument("--model-path", default=None, help="default: the bundled tiny reasoning model")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda", "xpu"])
    p.add_argument("--max-new-tokens", type=int, default=512)
    p.add_argument("--max-prompt-tokens", type=int, default=None)
    p.add_argument("--methods", default="plain,ngram,ssr", help="comma list of plain,ngram,ssr")
    p.add_argument("--max-batch", default="32",
                   help="comma list: an extra SSR server per value with SSR_MAX_BATCH=value ('' for none); the "
                        "default 32 (the GPU default) shows what drafting at every batch size costs on CPU, where "
                        "the default is 4")
    p.add_argument("--dp-sizes", default="1",
                   help="comma list: each method is also served with --dp-size N for every N > 1 (data-parallel "
                        "replicas behind SGLang's DP controller, named <method>_dp<N>), to compare 1 vs N replicas")
    p.add_argument("--side-by-side", action="store_true",
                   help="all servers up at once, each level run on every server in an order rotated per level "
                        "and round (about 5 GB per CPU server); default: one server at a time")
    p.add_argument("--rounds", type=int, default=1, help="repeat the sweep this many times (figures pooled)")
    p.add_argument("--restart-servers", action="store_true",
                   help="start fresh servers for every round (a slow server process then weighs on one round only)")
    p.add_argument("--warmup", type=int, default=8,
                   help="requests every server serves one after the other before it is measured, not recorded "
                        "(prompts after the measured ones): a long-lived SSR server's drafting policy has learned "
                        "from its traffic, a fresh one has not (at least one)")
    p.add_argument("--concurrency", default="1,4,16,64")
    p.add_argument("--min-requests", type=int, default=4, help="requests per level at least")
    p.add_argument("--max-requests", type=int, default=64, help="requests per level at most")
    p.add_argument("--overhead-n", type=int, default=6, help="prompts for the batch-1 overhead measurement (0: skip)")
    p.add_argument("--fallback-none-overhead", action=argparse.BooleanOptionalAction, default=True,
                   help="also measure the overhead on an SSR server with SSR_REASONING_FALLBACK=none (no "
                        "proposals while reasoning: the pure cost of drafting on chain-of-thought throughput)")
    p.add_argument("--num-draft-tokens", type=int, default=12)
    p.add_argument("--server-args", default="", help="extra arguments for every server, one string")
    p.add_argument("--reasoning-parser", default=None)
    p.add_argument("--ssr-env", default=None, help="SSR_* settings as JSON (default as in latency.py)")
    p.add_argument("--think-end", default=bu.THINK_END)
    p.add_argument("--urls", default=None, help="servers already running, by name (plain, ngram, ssr, "
                   "ssr_nofallback, ssr_maxbatch<N>), e.g. plain=http://127.0.0.1:30000,ssr=http://127.0.0.1:30001")
    p.add_argument("--out", default="results/benchmarks/load")
    return p.parse_args(argv)


def level_counts(args) -> list:
    return [(c, min(max(c, args.min_requests), args.max_requests))
            for c in (int(x) for x in args.concurrency.split(",") if x.strip())]


def run_level(url, prompts, conc, count, args, desc) -> dict:
    bar = bu.tqdm(total=count, desc=desc, unit="req", leave=False)

    def one(i):
        r = bu.stream_generate(url, prompts[i % len(prompts)]["input_ids"], args.max_new_tokens,
                               think_end=args.think_end)
        bar.update(1)
        return r

    bu.flush_cache(url)  # each level starts cold: no outputs of the previous level in the cache or corpus
    t0 = time.perf_counter()
    with ThreadPoolExecutor(conc) as ex:
        rows = list(ex.map(one, range(count)))
    wall = time.perf_counter() - t0
    bar.close()
    return {"wall_s": wall, "rows": rows}


def level_stats(level: dict) -> dict:
    rows, wall = level["rows"], level["wall_s"]
    lat = [r["latency"] for r in rows]
    tot = bu.sum_ssr(rows) or {}
    rt = [(r["reasoning_tokens"], r["reasoning_time"]) for r in rows if r["reasoning_time"]]
    return {
        "requests": len(rows),
        "wall_s": wall,
        "output_tokens_per_s": sum(r["completion_tokens"] for r in rows) / wall,
        "requests_per_s": len(rows) / wall,
        "mean_latency_s": bu.mean(lat),
        "p50_latency_s": bu.percentile(lat, 0.5),
        "p90_latency_s": bu.percentile(lat, 0.9),
        "mean_ttft_s": bu.mean(r["ttft"] for r in rows),
        "reasoning_tokens_per_s_per_request": sum(a for a, _ in rt) / sum(b for _, b in rt) if rt else None,
        "mean_answer_time_s": bu.mean(r["answer_time"] for r in rows),
        "mean_spec_accept_length": bu.mean(r.get("spec_accept_length") for r in rows),
        "drafts_started": tot.get("drafts_started"),
        "drafts_skipped": tot.get("drafts_skipped"),
        "fork_reasons": fork_reasons(rows),
        "answer_accept_length": tot.get("answer_accept_length"),
        "verified_nodes_per_step": (tot["verify_nodes"] / tot["verify_steps"] if tot.get("verify_steps") else None),
        "output_ids": [r["output_ids"] for r in rows],
    }


def fork_reasons(rows: list) -> Optional[dict]:
    """How many drafts the SSR policy forked for each reason (the reason's text up to its first colon),
    over the level's requests; None for a server that does not report ``meta_info["ssr"]``."""
    metas = [r["ssr"] for r in rows if r.get("ssr")]
    if not metas:
        return None
    counts: dict = {}
    for m in metas:
        for d in m.get("decisions") or ():
            if d.get("fork"):
                key = d["reason"].split(":")[0]
                counts[key] = counts.get(key, 0) + 1
    return counts


def overhead(url, prompts, args, with_off: bool) -> dict:
    """Batch 1: reasoning tokens/s with drafting on (and off, alternating) on one server."""
    modes = [("on", None), ("off", {"ssr": False})] if with_off else [("on", None)]
    rows = {m: [] for m, _ in modes}
    for i, p in enumerate(bu.tqdm(prompts, desc="overhead", unit="prompt", leave=False)):
        for m, cp in (modes if i % 2 == 0 else modes[::-1]):
            rows[m].append(bu.stream_generate(url, p["input_ids"], args.max_new_tokens, custom_params=cp,
                                              think_end=args.think_end, flush=True))
    out = {}
    for m, rs in rows.items():
        rt = [(r["reasoning_tokens"], r["reasoning_time"]) for r in rs if r["reasoning_time"]]
        tot = bu.sum_ssr(rs) or {}
        out[m] = {
            "reasoning_tokens_per_s": sum(a for a, _ in rt) / sum(b for _, b in rt) if rt else None,
            "mean_reasoning_time_s": bu.mean(r["reasoning_time"] for r in rs),
            "mean_latency_s": bu.mean(r["latency"] for r in rs),
            "tokens_per_s": sum(r["completion_tokens"] for r in rs) / sum(r["latency"] for r in rs),
            "draft_tokens": tot.get("draft_tokens"),
            "reasoning_tokens": tot.get("reasoning_tokens"),
        }
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.device == "cpu":
        os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
    from transformers import AutoTokenizer

    from ssr_sglang.main_job import server_args
    from ssr_sglang.models import bundled_model_path

    model = args.model_path or bundled_model_path()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    levels = level_counts(args)
    n_prompts = max(max(n for _, n in levels), args.overhead_n)
    tokenizer = AutoTokenizer.from_pretrained(model)
    max_prompt = args.max_prompt_tokens
    if max_prompt is None:
        ctx = bu.context_length(model)
        # keep room for speculative verify tokens too: a request that reaches the context limit
        # mid-verify crashes a CPU NGRAM/SSR server (assign_req_to_token_pool size mismatch)
        room = args.max_new_tokens + 2 * args.num_draft_tokens + 16
        max_prompt = ctx - room if ctx and ctx > room else None
    loaded = bu.tokenize(bu.load_dataset(args.dataset, n_prompts + args.warmup, args.data_root, args.seed,
                                         args.prompts, args.answer_prefix), tokenizer, max_prompt)
    prompts, warmup = loaded[:n_prompts], loaded[n_prompts:] or loaded[:1]
    max_c = max(c for c, _ in levels)
    extra = f" --max-running-requests {2 * max_c + 8}"
    if args.device == "cpu":
        extra += " --max-total-tokens 65536"
    sargs = argparse.Namespace(device=args.device, num_draft_tokens=args.num_draft_tokens,
                               server_args=extra + " " + args.server_args + (
                                   f" --reasoning-parser {args.reasoning_parser}" if args.reasoning_parser else ""))
    servers = {}  # name -> (kind, env)
    for m in args.methods.split(","):
        m = m.strip()
        if m not in ("plain", "ngram", "ssr"):
            raise SystemExit(f"unknown method {m!r}")
        servers[m] = (m, bu.ssr_env(args, model) if m == "ssr" else {}, True)
    if args.overhead_n and args.fallback_none_overhead and "ssr" in servers:
        servers["ssr_nofallback"] = ("ssr", {**bu.ssr_env(args, model), "SSR_REASONING_FALLBACK": "none"}, False)
    for mb in (x.strip() for x in args.max_batch.split(",") if x.strip()):
        servers[f"ssr_maxbatch{int(mb)}"] = ("ssr", {**bu.ssr_env(args, model), "SSR_MAX_BATCH": str(int(mb))}, True)
    replicas = {}  # server name -> --dp-size
    for dp in (int(x) for x in args.dp_sizes.split(",") if x.strip()):
        for m in [m.strip() for m in args.methods.split(",")] if dp > 1 else []:
            servers[f"{m}_dp{dp}"] = (m, bu.ssr_env(args, model) if m == "ssr" else {}, True)
            replicas[f"{m}_dp{dp}"] = dp
    stamp = time.strftime("%Y-%m-%d %H:%M")
    cmd = bu.command_line("load.py", argv)
    bu.log(f"== load: {', '.join(servers)} on {model} ({args.device}); levels {levels}; {bu.machine()}")
    t_start = time.time()
    sweep, over = {}, {}
    runs = {name: {c: [] for c, _ in levels} for name, (_, _, do_sweep) in servers.items() if do_sweep}
    groups = [list(servers)] if args.side_by_side else [[name] for name in servers]
    # --restart-servers: fresh server processes for every round, so that one slow or fast process (a
    # machine effect that lasts as long as the process) cannot bias every round the same way
    blocks = [[r] for r in range(args.rounds)] if args.restart_servers else [list(range(args.rounds))]
    for group, block in ((g, b) for g in groups for b in blocks):
        bu.log(f"== {', '.join(group)}" + (f", round {block[0] + 1}" if args.restart_servers else ""))
        with contextlib.ExitStack() as stack:
            srvs = bu.start_servers(stack, {n: (server_args(sargs, model, servers[n][0])
                                                + (["--dp-size", str(replicas[n])] if n in replicas else []),
                                                servers[n][1]) for n in group},
                                    out_dir, args.device, running=bu.parse_urls(args.urls))
            for name, srv in srvs.items():
                for w in warmup:  # not recorded; every level then starts from an empty cache
                    bu.stream_generate(srv.url, w["input_ids"], args.max_new_tokens, think_end=args.think_end)
                if args.overhead_n and name in ("plain", "ssr", "ssr_nofallback") and block[0] == 0:
                    over[name] = overhead(srv.url, prompts[: args.overhead_n], args, with_off=(name != "plain"))
            names = [n for n in group if n in runs]
            for rnd in block:
                for li, (c, count) in enumerate(levels):
                    k = (rnd + li) % len(names) if names else 0
                    for name in names[k:] + names[:k]:  # side by side: the order rotates per level and round
                        runs[name][c].append(run_level(srvs[name].url, prompts, c, count, args, f"{name} c={c}"))
                        s = level_stats(runs[name][c][-1])
                        bu.log(f"   {name} c={c:>3} n={count:>3}: {s['output_tokens_per_s']:.1f} tok/s, mean latency "
                               f"{s['mean_latency_s']:.2f} s, drafts {s['drafts_started']} "
                               f"(skipped {s['drafts_skipped']})")
    for name, lv in runs.items():
        sweep[name] = {c: level_stats({"wall_s": sum(r["wall_s"] for r in rs), "rows": [x for r in rs for x in r["rows"]]})
                       for c, rs in lv.items()}
    # relative to plain, at the same level
    verdict = []
    if "plain" in sweep:
        for name, lv in sweep.items():
            for c, s in lv.items():
                b = sweep["plain"][c]
                s["throughput_vs_plain"] = s["output_tokens_per_s"] / b["output_tokens_per_s"]
                s["latency_vs_plain"] = s["mean_latency_s"] / b["mean_latency_s"]
                s["identical_to_plain"] = sum(x == y for x, y in zip(s["output_ids"], b["output_ids"]))
                if name != "plain" and s["throughput_vs_plain"] < 1:
                    verdict.append(f"{name} is slower than plain at concurrency {c}: "
                                   f"{s['throughput_vs_plain']:.2f}x the throughput, "
                                   f"{s['latency_vs_plain']:.2f}x the mean latency")
    for name, dp in replicas.items():  # N replicas against one, same method and level
        base = sweep.get(servers[name][0])
        for c, s in sweep[name].items() if base else ():
            s["throughput_vs_1_replica"] = s["output_tokens_per_s"] / base[c]["output_tokens_per_s"]
            s["latency_vs_1_replica"] = s["mean_latency_s"] / base[c]["mean_latency_s"]
            s["identical_to_1_replica"] = sum(x == y for x, y in zip(s["output_ids"], base[c]["output_ids"]))
    if "ngram" in sweep:  # SSR against its nearest peer
        for name, lv in sweep.items():
            for c, s in lv.items():
                if name.startswith("ssr") and c in sweep["ngram"]:
                    r = s["output_tokens_per_s"] / sweep["ngram"][c]["output_tokens_per_s"]
                    s["throughput_vs_ngram"] = r
                    spread = round_spread(runs["ngram"][c], runs[name][c])
                    s["throughput_vs_ngram_rounds"] = spread
                    if r < 1:
                        verdict.append(f"{name} is slower than NGRAM at concurrency {c}: {r:.2f}x the throughput"
                                       + noise_note(spread))
    for lv in sweep.values():
        for s in lv.values():
            s.pop("output_ids")
    for name, key in (("ssr", ""), ("ssr_nofallback", "_no_fallback")):
        if name in over and over[name].get("off", {}).get("reasoning_tokens_per_s"):
            on, off = over[name]["on"], over[name]["off"]
            over["drafting_cost_pct" + key] = 100 * (1 - on["reasoning_tokens_per_s"] / off["reasoning_tokens_per_s"])
            over["draft_tokens_per_reasoning_token" + key] = (on["draft_tokens"] / on["reasoning_tokens"]
                                                              if on.get("reasoning_tokens") else None)
    md = markdown(stamp, cmd, args, model, over, sweep, verdict, time.time() - t_start)
    bu.write_outputs(out_dir, {"date": stamp, "command": cmd, "model": model, "dataset": args.dataset,
                               "device": args.device, "levels": levels,
                               "servers": {k: {"kind": v[0], "env": v[1], "sweep": v[2]} for k, v in servers.items()},
                               "overhead": over, "sweep": sweep, "verdict": verdict}, md)
    made = plots(sweep, over, out_dir)
    print("\n" + md)
    print(f"results in {out_dir}/ (results.json, results.md, {', '.join(made)})")
    return 0


# two-sided 95% Student t quantiles, by degrees of freedom (1..10); 1.96 beyond
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)


def round_spread(base_rounds: list, other_rounds: list) -> Optional[dict]:
    """Throughput of ``other`` against ``base`` round by round (the two ran side by side, the same
    requests, so the ratio of a round is ``base wall / other wall``): per-round ratios and a 95%
    Student t interval of their geometric mean (over the rounds' log ratios: with a handful of rounds
    a bootstrap interval is too narrow). None with fewer than 3 rounds (no spread).

    >>> s = round_spread([{"wall_s": 5.0}] * 3, [{"wall_s": w} for w in (5.0, 4.0, 6.25)])
    >>> [round(x, 2) for x in s["per_round"]], round(s["geomean"], 3), [round(x, 2) for x in s["ci95"]]
    ([1.0, 1.25, 0.8], 1.0, [0.57, 1.74])
    """
    walls = [(b["wall_s"], o["wall_s"]) for b, o in zip(base_rounds, other_rounds)]
    if len(walls) < 3:
        return None
    per_round = [b / o for b, o in walls]
    logs = [math.log(x) for x in per_round]
    n = len(logs)
    m = sum(logs) / n
    sd = math.sqrt(sum((x - m) ** 2 for x in logs) / (n - 1))
    half = (_T975[n - 2] if n - 1 <= len(_T975) else 1.96) * sd / math.sqrt(n)
    return {"per_round": per_round, "geomean": math.exp(m), "ci95": [math.exp(m - half), math.exp(m + half)]}


def noise_note(spread: Optional[dict]) -> str:
    """How a pooled ratio below 1 reads against the per-round spread."""
    if not spread:
        return " (one or two rounds: no spread to tell it from noise)"
    lo, hi = spread["ci95"]
    verdict = "beyond noise" if hi < 1 else "within noise"
    return f" (95% CI over rounds {lo:.2f}-{hi:.2f}: {verdict})"


def markdown(stamp, cmd, args, model, over, sweep, verdict, wall) -> str:
    f = bu.fmt
    parts = [f"{stamp}, {bu.machine()}; `{cmd}`\n\nModel `{Path(model).name}`, {args.device}, dataset "
             f"`{args.dataset}`, greedy; {'servers up at once, order rotated' if args.side_by_side else 'servers one at a time'}, "
             f"{args.rounds} round(s){' on fresh servers each' if args.restart_servers else ''}, "
             f"{max(1, args.warmup)} warm-up request(s) per server, each level from an empty cache; wall {wall:.0f} s."]
    if over:
        rows = []
        for name in ("plain", "ssr", "ssr_nofallback"):
            for mode, s in (over.get(name) or {}).items():
                label = name if name == "plain" else f"{name}, drafting {mode}"
                rows.append([label, f(s["reasoning_tokens_per_s"], "{:.1f}"), f(s["mean_reasoning_time_s"]),
                             f(s["mean_latency_s"]), f(s["tokens_per_s"], "{:.1f}"),
                             "—" if not s.get("draft_tokens") else str(s["draft_tokens"])])
        parts.append(f"Overhead at batch 1 ({args.overhead_n} prompts; SSR on/off alternating on one server):\n\n"
                     + bu.md_table(["server / mode", "reasoning tok/s", "mean reasoning time (s)",
                                    "mean latency (s)", "overall tok/s", "draft tokens"], rows))
        for key, what in (("", "default server (NGRAM-style proposals while reasoning)"),
                          ("_no_fallback", "SSR_REASONING_FALLBACK=none (plain decoding while reasoning)")):
            if "drafting_cost_pct" + key in over:
                parts.append(f"Drafting cost, {what}: 1 - reasoning tok/s with drafts / without = "
                             f"**{over['drafting_cost_pct' + key]:.1f}%**; draft tokens per reasoning token: "
                             f"{f(over.get('draft_tokens_per_reasoning_token' + key), '{:.2f}')}.")
    rows = []
    for name, lv in sweep.items():
        for c, s in lv.items():
            rows.append([name, c, s["requests"], f(s["output_tokens_per_s"], "{:.1f}"),
                         f(s.get("throughput_vs_plain"), "{:.2f}x"), f(s["mean_latency_s"]),
                         f(s["p50_latency_s"]), f(s["p90_latency_s"]), f(s.get("latency_vs_plain"), "{:.2f}x"),
                         f(s["reasoning_tokens_per_s_per_request"], "{:.1f}"),
                         "—" if s["drafts_started"] is None else f"{s['drafts_started']} / {s['drafts_skipped']}",
                         f(s.get("verified_nodes_per_step"), "{:.1f}"),
                         f"{s.get('identical_to_plain', '—')}/{s['requests']}"])
    parts.append("Concurrency sweep:\n\n" + bu.md_table(
        ["server", "concurrency", "requests", "output tok/s", "throughput vs plain", "mean latency (s)",
         "p50 (s)", "p90 (s)", "latency vs plain", "reasoning tok/s per request", "drafts started / skipped",
         "verified nodes per step", "identical to plain"], rows))
    rows = [[name, c, f(s["output_tokens_per_s"], "{:.1f}"), f(s["throughput_vs_1_replica"], "{:.2f}x"),
             f(s["mean_latency_s"]), f(s["latency_vs_1_replica"], "{:.2f}x"),
             f"{s['identical_to_1_replica']}/{s['requests']}"]
            for name, lv in sweep.items() for c, s in lv.items() if "throughput_vs_1_replica" in s]
    if rows:
        parts.append("Data-parallel replicas (`--dp-size N`) against one server of the same method:\n\n" + bu.md_table(
            ["server", "concurrency", "output tok/s", "throughput vs 1 replica", "mean latency (s)",
             "latency vs 1 replica", "identical to 1 replica"], rows))
    rows = []
    for name, lv in sweep.items():
        for c, s in lv.items():
            if "throughput_vs_ngram" in s:
                sp = s.get("throughput_vs_ngram_rounds")
                rows.append([name, c, f(s["throughput_vs_ngram"], "{:.3f}x"),
                             "—" if not sp else f"{sp['ci95'][0]:.3f}-{sp['ci95'][1]:.3f}",
                             "—" if not sp else " ".join(f"{x:.2f}" for x in sp["per_round"])])
    if rows:
        parts.append("SSR against NGRAM (throughput, same requests side by side; the interval is over rounds):\n\n"
                     + bu.md_table(["server", "concurrency", "throughput vs NGRAM", "95% CI", "per round"], rows))
    parts.append("Slower than plain (or SSR slower than NGRAM): " + ("; ".join(verdict) if verdict else
                                                                     "nowhere in this run") + ".")
    return "\n\n".join(parts) + "\n"


def plots(sweep, over, out_dir: Path) -> list:
    plt = bu.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for name, lv in sweep.items():
        cs = list(lv)
        axes[0].plot(cs, [lv[c]["output_tokens_per_s"] for c in cs], "o-", label=name)
        axes[1].plot(cs, [lv[c]["mean_latency_s"] for c in cs], "o-", label=name)
    for ax, yl in zip(axes, ["output tokens/s", "mean request latency (s)"]):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrent requests")
        ax.set_ylabel(yl)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_dir / "concurrency.png", dpi=120)
    plt.close(fig)
    made = ["concurrency.png"]
    bars = [(("plain" if n == "plain" else f"{n}\ndrafts {m}"), s["reasoning_tokens_per_s"])
            for n in ("plain", "ssr", "ssr_nofallback") for m, s in (over.get(n) or {}).items()
            if s.get("reasoning_tokens_per_s")]
    if bars:
        fig, ax = plt.subplots(figsize=(7, 3))
        ax.bar([b[0] for b in bars], [b[1] for b in bars])
        ax.tick_params(axis="x", labelsize=7)
        ax.set_ylabel("reasoning tokens/s (batch 1)")
        fig.tight_layout()
        fig.savefig(out_dir / "overhead.png", dpi=120)
        plt.close(fig)
        made.append("overhead.png")
    return made


if __name__ == "__main__":
    raise SystemExit(main())
