"""End-to-end latency of SSR against plain decoding, greedy, batch 1, on a dataset.

Servers (same settings otherwise, built by ``ssr_sglang.main_job.server_args``):

* ``plain``  - no speculation;
* ``ssr``    - ``--speculative-algorithm SSR``; it serves the method ``ssr`` and, per request through
  ``custom_params``, ``ssr_off`` (``{"ssr": false}``: NGRAM-style proposals only, no drafts) and
  every ablation (``--ablations``: prefix-only, suffix-only, single draft at a checkpoint, iterative
  drafts with a draft budget sweep);
* ``ngram``  - SGLang's own NGRAM speculative decoding, as a peer.

By default one server runs at a time (a CPU server takes about 5 GB): plain, then SSR, then NGRAM.
On the SSR server, each prompt goes to every SSR variant one after the other (batch 1), in an
order rotated per prompt, so ``ssr`` against ``ssr_off`` and the ablations are side by side.
``--side-by-side`` keeps all servers up at once and rotates over every method per prompt, so
drift of a noisy machine spreads evenly over plain and SSR too. ``--restart-every N`` starts fresh
server processes for every N prompts, so one slow process cannot decide a dataset's verdict.
Requests are streamed so the reasoning phase (up to the think end, ``</think>``) and the answer
phase are timed apart. Each
request starts from an empty radix cache and n-gram corpus (``/flush_cache``; ``--keep-cache`` to
keep them): otherwise a prompt's second run on the SSR server would reuse the first run's output.

Examples::

    python benchmarks/latency.py                                  # bundled model, CPU, a few minutes
    python benchmarks/latency.py --ablations
    python benchmarks/latency.py --dataset classeval --n 2 --max-new-tokens 128   # CPU smoke check
    python benchmarks/latency.py --dataset classeval --model-path Qwen/Qwen3-4B --device cuda \\
        --reasoning-parser qwen3 --max-new-tokens 8192 --n 80 --ablations
    python benchmarks/latency.py --dataset jsonl --prompts my.jsonl --answer-prefix '<think>\\n' \\
        --model-path MODEL --device cuda      # your prompts; the answer opens a think block
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_utils as bu  # noqa: E402

SERVER_OF = {"plain": "plain", "ngram": "ngram"}  # every other variant runs on the SSR server


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    bu.add_dataset_args(p)
    p.add_argument("--n", type=int, default=8, help="number of prompts (the first n of the dataset)")
    p.add_argument("--warmup", type=int, default=8,
                   help="prompts after the first n that every server serves first, not timed (an SSR server's "
                        "drafting policy learns from the requests it has served)")
    p.add_argument("--seed", type=int, default=777, help="bundled task seed (held out from training)")
    p.add_argument("--model-path", default=None, help="default: the bundled tiny reasoning model")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda", "xpu"])
    p.add_argument("--max-new-tokens", type=int, default=512)
    p.add_argument("--max-prompt-tokens", type=int, default=None,
                   help="keep only the last this many prompt tokens (default: context length - max new tokens - "
                        "2 x draft tokens - 16)")
    p.add_argument("--methods", default="plain,ssr_off,ssr,ngram", help="comma list of plain,ssr_off,ssr,ngram")
    p.add_argument("--num-draft-tokens", type=int, default=12, help="--speculative-num-draft-tokens (NGRAM, SSR)")
    p.add_argument("--server-args", default="", help="extra arguments for every server, one string")
    p.add_argument("--reasoning-parser", default=None, help="passed to the servers (e.g. qwen3)")
    p.add_argument("--ssr-env", default=None, help="SSR_* settings of the SSR server as JSON "
                   "(default: the server defaults)")
    p.add_argument("--think-end", default=bu.THINK_END, help="text that ends the reasoning phase")
    p.add_argument("--ablations", action="store_true",
                   help="also prefix-only, suffix-only, single drafts, and a draft-budget sweep")
    p.add_argument("--single-checkpoints", default=None,
                   help="ablation: one draft at each of these reasoning-token counts (bundled: 32,64; else 500,1000,2000)")
    p.add_argument("--iter-every", type=int, default=None, help="ablation: iterative drafts every N tokens "
                   "(bundled: 16; else 500)")
    p.add_argument("--max-drafts-sweep", default=None,
                   help="ablation: draft budgets (max drafts) for iterative SSR (bundled: 1,2,4,8; else 1,2,4,8)")
    p.add_argument("--side-by-side", action="store_true",
                   help="all servers up at once, each prompt sent to every method in rotated order (needs "
                        "memory for every server: about 5 GB each on CPU); default: one server at a time")
    p.add_argument("--restart-every", type=int, default=None, metavar="N",
                   help="fresh server processes (and their warm-up) for every N prompts, so that one slow or fast "
                        "process cannot decide a dataset's verdict (default: one set of servers for all prompts)")
    p.add_argument("--urls", default=None, help="servers already running, e.g. plain=http://127.0.0.1:30000,"
                   "ssr=http://127.0.0.1:30001 (started with the same settings as this script would use)")
    p.add_argument("--keep-cache", action="store_true",
                   help="do not flush the radix cache and n-gram corpus before each request (by default every "
                        "request starts cold, so SSR on and off on one server cannot help each other)")
    p.add_argument("--out", default=None, help="default results/benchmarks/latency-<dataset>")
    return p.parse_args(argv)


def variants(args, bundled: bool) -> list:
    """``[(name, server, custom_params)]`` in the order of the report."""
    out = []
    for m in args.methods.split(","):
        m = m.strip()
        if m in ("plain", "ngram", "ssr"):
            out.append((m, SERVER_OF.get(m, "ssr"), None))
        elif m == "ssr_off":
            out.append((m, "ssr", {"ssr": False}))
        elif m:
            raise SystemExit(f"unknown method {m!r}")
    if args.ablations:
        singles = args.single_checkpoints or ("32,64" if bundled else "500,1000,2000")
        every = args.iter_every or (16 if bundled else 500)
        sweep = args.max_drafts_sweep or "1,2,4,8"
        out.append(("prefix_only", "ssr", {"ssr_suffix": False}))
        out.append(("suffix_only", "ssr", {"ssr_prefix": False}))
        for c in singles.split(","):
            out.append((f"single@{int(c)}", "ssr", {"ssr_checkpoints": [int(c)], "ssr_every": None,
                                                     "ssr_max_drafts": None}))
        for k in sweep.split(","):
            out.append((f"every{every}x{int(k)}", "ssr", {"ssr_every": every, "ssr_max_drafts": int(k),
                                                            "ssr_checkpoints": None}))
    return out


def run_all(args, model, prompts, vs, out_dir: Path, warmup: list) -> tuple:
    """``({variant: [row per prompt]}, {server: [ssr totals per set of server processes]})``."""
    from ssr_sglang.main_job import server_args

    sargs = argparse.Namespace(device=args.device, num_draft_tokens=args.num_draft_tokens,
                               server_args=args.server_args + (f" --reasoning-parser {args.reasoning_parser}"
                                                               if args.reasoning_parser else ""))
    needed = list(dict.fromkeys(s for _, s, _ in vs))
    specs = {s: (server_args(sargs, model, s), bu.ssr_env(args, model) if s == "ssr" else {}) for s in needed}
    results = {name: [None] * len(prompts) for name, _, _ in vs}
    totals = {}
    groups = [needed] if args.side_by_side else [[s] for s in needed]
    every = args.restart_every or len(prompts)
    blocks = [list(range(i, min(i + every, len(prompts)))) for i in range(0, len(prompts), every)]
    for block in blocks:
        for group in groups:
            bu.log(f"== starting server(s): {', '.join(group)}"
                   + (f" for prompts {block[0] + 1}-{block[-1] + 1}" if len(blocks) > 1 else ""))
            with contextlib.ExitStack() as stack:
                servers = bu.start_servers(stack, {s: specs[s] for s in group}, out_dir, args.device,
                                           running=bu.parse_urls(args.urls))
                run_block(args, servers, prompts, block, [v for v in vs if v[1] in group], warmup, results)
                if "ssr" in servers:
                    totals.setdefault("ssr", []).append(bu.server_totals(servers["ssr"].url))
    return results, totals


def run_block(args, servers: dict, prompts: list, block: list, mine: list, warmup: list, results: dict) -> None:
    """Warm every server up (not recorded), then send each prompt of ``block`` to every variant in
    ``mine``, in an order rotated per prompt; rows go to ``results``."""
    for w in warmup:
        for s in servers.values():
            bu.stream_generate(s.url, w["input_ids"], args.max_new_tokens, think_end=args.think_end,
                               flush=not args.keep_cache)
    jobs = []
    for i in block:
        k = i % len(mine)
        jobs += [(i, v) for v in mine[k:] + mine[:k]]
    for i, (name, server, cp) in bu.tqdm(jobs, desc="requests", unit="req"):
        r = bu.stream_generate(servers[server].url, prompts[i]["input_ids"], args.max_new_tokens,
                               custom_params=cp, think_end=args.think_end, flush=not args.keep_cache)
        r["id"] = prompts[i]["id"]
        results[name][i] = r


def summarize(results: dict, prompts: list) -> dict:
    """``ssr_sglang.main_job.summarize`` plus stage times, reasoning throughput, improvement both
    ways, identical-output rate, acceptance per source and draft counters."""
    from ssr_sglang.main_job import summarize as base_summarize

    base_name = "plain" if "plain" in results else next(iter(results))
    ordered = {base_name: results[base_name], **{k: v for k, v in results.items() if k != base_name}}
    if base_name != "plain":  # main_job.summarize compares with a method named plain
        ordered = {"plain": ordered.pop(base_name), **ordered}
    summary = base_summarize(ordered, prompts)
    if base_name != "plain":
        summary = {(base_name if k == "plain" else k): v for k, v in summary.items()}
    base = results[base_name]
    n = len(prompts)
    for name, rows in results.items():
        s = summary[name]
        s["baseline"] = base_name
        s["n"] = n
        s["median_latency_s"] = statistics.median(r["latency"] for r in rows)
        s["mean_ttft_s"] = bu.mean(r["ttft"] for r in rows)
        s["mean_reasoning_time_s"] = bu.mean(r["reasoning_time"] for r in rows)
        s["mean_completion_tokens"] = bu.mean(r["completion_tokens"] for r in rows)
        s["mean_reasoning_tokens"] = bu.mean(r["reasoning_tokens"] for r in rows)
        rt = [(r["reasoning_tokens"], r["reasoning_time"]) for r in rows if r["reasoning_time"]]
        s["reasoning_tokens_per_s"] = sum(a for a, _ in rt) / sum(b for _, b in rt) if rt else None
        s["tokens_per_s"] = sum(r["completion_tokens"] for r in rows) / sum(r["latency"] for r in rows)
        s["speedup_of_means"] = s.pop("e2e_speedup", None)
        s["improvement_pct_per_sample"] = s.pop("per_sample_improvement_pct", None)
        sp = s["speedup_of_means"]
        s["improvement_pct_of_means"] = 100 * (1 - 1 / sp) if sp else None
        s["per_sample_speedup"] = [b["latency"] / r["latency"] for r, b in zip(rows, base)]
        pairs = [(b["reasoning_time"], r["reasoning_time"]) for r, b in zip(rows, base)
                 if b["reasoning_time"] and r["reasoning_time"]]
        s["reasoning_time_ratio"] = sum(q for _, q in pairs) / sum(p for p, _ in pairs) if pairs else None
        s["identical_to_baseline"] = s.pop("identical_to_plain", None)
        s["identical_rate"] = s["identical_to_baseline"] / n if s["identical_to_baseline"] is not None else None
        s["truncated_prompts"] = sum(p["truncated"] for p in prompts)
        tot = bu.sum_ssr(rows)
        s["ssr_counters"] = tot
        if tot:
            ans = tot.get("answer_tokens") or 0
            s["accepted_prefix_per_sample"] = tot["accepted_prefix"] / n
            s["accepted_suffix_per_sample"] = tot["accepted_suffix"] / n
            s["accepted_prefix_share_of_answer"] = tot["accepted_prefix"] / ans if ans else None
            s["accepted_suffix_share_of_answer"] = tot["accepted_suffix"] / ans if ans else None
            s["draft_tokens_per_reasoning_token"] = (tot["draft_tokens"] / tot["reasoning_tokens"]
                                                     if tot.get("reasoning_tokens") else None)
            s["draft_prompt_cache_hit"] = (tot["draft_cached_tokens"] / tot["draft_prompt_tokens"]
                                           if tot.get("draft_prompt_tokens") else None)
            s["server_stages"] = server_stages(tot, n)
    # Against ssr_off: same server, requests interleaved per prompt, so robust to machine drift.
    if "ssr_off" in results:
        off = results["ssr_off"]
        for name, rows in results.items():
            if name in ("plain", "ngram"):
                continue
            summary[name]["speedup_vs_ssr_off"] = bu.mean(r["latency"] for r in off) / summary[name]["mean_latency_s"]
            summary[name]["improvement_pct_vs_ssr_off_per_sample"] = 100 * (
                1 - 1 / statistics.mean(o["latency"] / r["latency"] for r, o in zip(rows, off)))
    if "ssr_off" in results:
        for name, rows in results.items():
            if name not in ("plain", "ngram", "ssr_off") and summary[name].get("server_stages"):
                summary[name]["server_stages"]["draft_cost_vs_ssr_off"] = draft_cost_vs_off(rows, results["ssr_off"])
    # Drafting cost seen from the client: SSR's reasoning phase against the same server without drafts.
    if "ssr" in results and "ssr_off" in results:
        pairs = [(o["reasoning_time"], r["reasoning_time"]) for r, o in zip(results["ssr"], results["ssr_off"])
                 if o["reasoning_time"] and r["reasoning_time"]]
        if pairs:
            summary["ssr"]["reasoning_time_vs_ssr_off"] = sum(q for _, q in pairs) / sum(p for p, _ in pairs)
    return summary


def server_stages(tot: dict, n: int) -> dict:
    """Mean per-sample stage times measured in the scheduler (``meta_info["ssr"]``), seconds.

    ``draft_overhead`` is the reasoning time the drafts cost (``meta_info["ssr"]["draft_overhead_s"]``: the
    whole scheduler iterations of the reasoning steps that carried a draft beyond the server's draft-free
    step, SSR's host work aside, plus the prefill iterations that started the drafts, forks included).
    """
    def per(k):
        return tot[k] / n if tot.get(k) is not None else None

    steps = tot.get("reasoning_steps") or 0
    dsteps = tot.get("reasoning_draft_steps") or 0
    free = steps - dsteps
    out = {
        "reasoning": per("reasoning_time_s"),
        "draft_overhead": per("draft_overhead_s"),
        "draft_prefill": per("draft_prefill_time_s"),
        "fork": per("fork_time_s"),
        "verify": per("verify_time_s"),
        "propose": per("propose_time_s"),
        "reasoning_step_ms_without_draft": (1e3 * (tot["reasoning_time_s"] - tot["reasoning_draft_time_s"]) / free
                                            if free > 0 else None),
        "reasoning_step_ms_with_draft": 1e3 * tot["reasoning_draft_time_s"] / dsteps if dsteps else None,
        "verify_step_ms": (1e3 * tot["verify_time_s"] / tot["answer_verify_steps"]
                           if tot.get("answer_verify_steps") else None),
    }
    r, d = out["reasoning"], out["draft_overhead"]
    out["draft_overhead_pct_of_reasoning"] = 100 * d / r if r and d is not None else None
    out["reasoning_step_ms"] = 1e3 * tot["reasoning_time_s"] / steps if steps else None
    return out


def draft_cost_vs_off(rows: list, off_rows: list) -> Optional[dict]:
    """Drafting cost against the same server with SSR off, from the scheduler's timers: per prompt,
    (reasoning steps + draft prefill + forks) with drafts minus reasoning steps without. Outputs are
    identical, so both runs reason over the same tokens; only the drafts differ."""
    pairs = [(r["ssr"], o["ssr"]) for r, o in zip(rows, off_rows) if r.get("ssr") and o.get("ssr")]
    if not pairs:
        return None
    on = sum(a["reasoning_time_s"] + a["draft_prefill_time_s"] + a["fork_time_s"] for a, _ in pairs)
    off = sum(b["reasoning_time_s"] for _, b in pairs)
    return {"per_sample_s": (on - off) / len(pairs), "pct_of_reasoning": 100 * (on - off) / off if off else None}


def stages_markdown(summary: dict) -> str:
    f = bu.fmt
    rows = []
    for name, s in summary.items():
        st = s.get("server_stages")
        if not st:
            continue
        ms = lambda v: f(None if v is None else 1e3 * v, "{:.1f}")  # noqa: E731
        vs_off = st.get("draft_cost_vs_ssr_off") or {}
        rows.append([
            name, f(s["mean_reasoning_time_s"]), f(st["reasoning"]), f(st["reasoning_step_ms"], "{:.2f}"),
            f"{f(st['reasoning_step_ms_without_draft'], '{:.2f}')} / {f(st['reasoning_step_ms_with_draft'], '{:.2f}')}",
            ms(st["draft_prefill"]), ms(st["fork"]),
            f"{f(st['draft_overhead'])} ({f(st['draft_overhead_pct_of_reasoning'], '{:.1f}%')})",
            f"{f(vs_off.get('per_sample_s'))} ({f(vs_off.get('pct_of_reasoning'), '{:+.1f}%')})",
            f(s["mean_answer_time_s"]), f(st["verify"]), ms(st["propose"]), f(st["verify_step_ms"], "{:.2f}"),
        ])
    if not rows:
        return ""
    return bu.md_table(
        ["method", "reasoning, client (s)", "reasoning, server (s)", "reasoning step (ms)",
         "step without / with a draft (ms)", "draft prefill (ms)", "fork (ms)", "draft overhead, in-request (s)",
         "draft cost vs ssr_off (s)", "answer, client (s)", "verify, server (s)", "propose (ms)", "verify step (ms)"],
        rows)


def markdown(summary: dict, results: dict, header: str) -> str:
    f = bu.fmt
    rows = []
    for name, s in summary.items():
        pre = s.get("accepted_prefix_per_sample")
        suf = s.get("accepted_suffix_per_sample")
        drafts = (s["ssr_counters"] or {}).get("drafts_started")
        corr = s.get("answers_correct")
        rows.append([
            name, f(s["mean_latency_s"]), f(s["speedup_of_means"], "{:.3f}x"),
            f(s["improvement_pct_per_sample"], "{:+.1f}%"), f(s["mean_reasoning_time_s"]),
            f(s["mean_answer_time_s"]), f(s.get("answer_speedup"), "{:.2f}x"),
            f(s["reasoning_tokens_per_s"], "{:.1f}"),
            f"{f(pre, '{:.1f}')} / {f(suf, '{:.1f}')}", f(s.get("answer_accept_length"), "{:.2f}"),
            "—" if drafts is None else f"{drafts / s['n']:.1f}",
            f"{f(s.get('speedup_vs_ssr_off'), '{:.3f}x')} / {f(s.get('improvement_pct_vs_ssr_off_per_sample'), '{:+.1f}%')}",
            f"{s['identical_to_baseline']}/{s['n']}", "—" if corr is None else f"{corr}/{s['n']}",
        ])
    table = bu.md_table(
        ["method", "mean latency (s)", "speedup (ratio of means)", "improvement (per-sample)",
         "reasoning (s)", "answer (s)", "answer-phase speedup", "reasoning tok/s",
         "accepted prefix / suffix per sample", "answer accept length", "drafts per sample",
         "vs ssr_off: speedup / improvement",
         f"identical to {next(iter(summary))}", "correct"], rows)
    names = list(results)
    per = bu.md_table(["prompt", *[f"{m} (s)" for m in names]],
                      [[results[names[0]][i]["id"], *[f"{results[m][i]['latency']:.3f}" for m in names]]
                       for i in range(len(results[names[0]]))])
    stages = stages_markdown(summary)
    if stages:
        stages = ("\n\nStages per sample, measured in the scheduler (`meta_info[\"ssr\"]`; client times for "
                  "comparison). Draft overhead, in-request: extra time of reasoning steps that carried a draft over "
                  "the request's draft-free steps, plus draft prefill and forks. Draft cost vs ssr_off: reasoning "
                  f"+ draft prefill + forks minus the same prompt's reasoning with SSR off:\n\n{stages}")
    from ssr_sglang.main_job import versus_line

    vs_ngram = versus_line(summary, unit="prompt")
    vs_ngram = f"\n\n{vs_ngram}" if vs_ngram else ""
    return f"{header}\n\n{table}{vs_ngram}{stages}\n\nPer-sample latency:\n\n{per}\n"


def plots(results: dict, summary: dict, out_dir: Path) -> list:
    from ssr_sglang.main_job import plot as stage_plot

    plt = bu.pyplot()
    made = []
    stage_plot(results, out_dir / "stages.png")  # mean reasoning + answer time per method
    made.append("stages.png")
    names = [m for m in results if m != next(iter(summary))]
    if names:
        fig, ax = plt.subplots(figsize=(7, 3.5))
        for m in names:
            ax.plot(range(len(results[m])), summary[m]["per_sample_speedup"], "o-", label=m, alpha=0.8)
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set_xlabel("prompt")
        ax.set_ylabel(f"speedup vs {next(iter(summary))}")
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        fig.savefig(out_dir / "per_sample_speedup.png", dpi=120)
        plt.close(fig)
        made.append("per_sample_speedup.png")
        fig, ax = plt.subplots(figsize=(7, 0.35 * len(names) + 1.2))
        vals = [summary[m]["improvement_pct_per_sample"] for m in names]
        ax.barh(names, vals, color=["tab:green" if v > 0 else "tab:red" for v in vals])
        ax.axvline(0, color="gray", lw=0.8)
        ax.invert_yaxis()
        ax.set_xlabel("end-to-end improvement, per-sample (%)")
        fig.tight_layout()
        fig.savefig(out_dir / "improvement.png", dpi=120)
        plt.close(fig)
        made.append("improvement.png")
    return made


def main(argv=None) -> int:
    args = parse_args(argv)
    import os

    if args.device == "cpu":
        os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
    from transformers import AutoTokenizer

    from ssr_sglang.models import bundled_model_path

    model = args.model_path or bundled_model_path()
    bundled = bu.is_bundled(model)
    out_dir = Path(args.out or f"results/benchmarks/latency-{args.dataset.replace(':', '-')}")
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(model)
    max_prompt = args.max_prompt_tokens
    if max_prompt is None:
        ctx = bu.context_length(model)
        # keep room for speculative verify tokens too: a request that reaches the context limit
        # mid-verify crashes a CPU NGRAM/SSR server (assign_req_to_token_pool size mismatch)
        room = args.max_new_tokens + 2 * args.num_draft_tokens + 16
        max_prompt = ctx - room if ctx and ctx > room else None
    loaded = bu.tokenize(bu.load_dataset(args.dataset, args.n + args.warmup, args.data_root, args.seed, args.prompts,
                                         args.answer_prefix),
                         tokenizer, max_prompt)
    prompts, warmup = loaded[:args.n], loaded[args.n:] or loaded[:1]
    vs = variants(args, bundled)
    stamp = time.strftime("%Y-%m-%d %H:%M")
    cmd = bu.command_line("latency.py", argv)
    bu.log(f"== {len(prompts)} prompts of {args.dataset} on {model} ({args.device}); "
           f"{', '.join(v[0] for v in vs)}; {bu.machine()}")
    if any(p["truncated"] for p in prompts):
        bu.log(f"   {sum(p['truncated'] for p in prompts)} prompt(s) longer than {max_prompt} tokens keep their last "
               f"{max_prompt} tokens")
    t0 = time.time()
    results, totals = run_all(args, model, prompts, vs, out_dir, warmup)
    bu.portable_logs(out_dir)  # the servers have stopped
    summary = summarize(results, prompts)
    mode = ("all servers up at once, order rotated per prompt" if args.side_by_side else
            "one server at a time (plain, then SSR with its per-request variants in rotated order, then NGRAM)")
    mode += ", caches kept between requests" if args.keep_cache else ", each request from an empty cache"
    if args.restart_every and args.restart_every < len(prompts):
        mode += f", fresh server processes every {args.restart_every} prompts"
    header = (f"{stamp}, {bu.machine()}; `{cmd}`\n\n{len(prompts)} prompts of `{args.dataset}`, model "
              f"`{Path(model).name}`, {args.device}, greedy, batch 1, {mode}; wall {time.time() - t0:.0f} s.")
    md = markdown(summary, results, header)
    for r in results.values():
        for x in r:
            x.pop("output_ids", None)
    bu.write_outputs(out_dir, {"date": stamp, "command": cmd, "model": model, "dataset": args.dataset,
                               "device": args.device, "mode": mode, "variants": [list(v) for v in vs],
                               "ssr_env": bu.ssr_env(args, model), "summary": summary,
                               "server_totals": totals, "results": results}, md)
    made = plots(results, summary, out_dir)
    print("\n" + md)
    print(f"results in {out_dir}/ (results.json, results.md, {', '.join(made)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
