"""The main job: SSR side by side with plain decoding (and NGRAM) on real SGLang servers.

``python -m ssr_sglang.main_job`` runs held-out tasks of the bundled tiny reasoning model on CPU:
one server per method (plain, NGRAM, SSR with its default settings; otherwise identical), all up at
once. Each server first serves ``--warmup`` tasks of another seed (not recorded: a fresh SSR server
decides from fixed checkpoints until it has seen a few reasoning requests). Then every task goes to
every server in an order rotated per task, each from an empty cache, greedy, batch 1, streamed so
the answer phase (after ``</think>``) is timed on its own. It ends with a table: mean latency each
way, the per-task speedups' spread and a bootstrap confidence interval of the latency ratio,
answer-phase speedup, acceptance length, and whether every output was identical.

The bundled hybrid reasoner works the same way (the same task family; on CPU the main job adds the flags SGLang
needs for hybrid Gated DeltaNet models): ``--model-path ssr_sglang/models/tiny-hybrid-reasoner``.
``--model smollm2-reasoner`` runs it on the SmolLM2 reasoner (SmolLM2-135M-Instruct fine-tuned to reason inside
``<think>`` … ``</think>``, built once by ``python -m ssr_sglang.models.smollm2_reasoner build``) with held-out
HumanEval problems and word problems, alternating (scored by pass@1 and exact match). Any other model works too:
``--model-path /models/Qwen3-8B --device cuda --prompts prompts.jsonl``
(one ``{"prompt": ...}`` or ``{"messages": [...]}`` per line).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import statistics
import sys
import time
from pathlib import Path


from ssr_sglang.models.tasks import ANSWER_GRAMMARS
from ssr_sglang.testing.http import run_one
from ssr_sglang.testing.server import Server

METHODS = ("plain", "ngram", "ssr")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny", choices=["tiny", "smollm2-reasoner"],
                   help="tiny: the bundled tiny reasoner (or --model-path); smollm2-reasoner: the SmolLM2 reasoner "
                        "built from the committed adapter, on its held-out code and word-problem prompts")
    p.add_argument("--model-path", default=None,
                   help="default: the bundled tiny reasoning model (ssr_sglang/models/tiny-reasoner; the bundled "
                        "hybrid one, ssr_sglang/models/tiny-hybrid-reasoner, takes the same tasks)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda", "xpu"])
    p.add_argument("--n", type=int, default=24, help="number of timed tasks")
    p.add_argument("--warmup", type=int, default=8, help="tasks of another seed each server serves first (not timed)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="default: 512 (768 for smollm2-reasoner)")
    p.add_argument("--prompts", default=None, help="JSONL file of prompts (for models other than the bundled one)")
    p.add_argument("--methods", default=",".join(METHODS), help="comma list of plain,ngram,ssr")
    p.add_argument("--num-draft-tokens", type=int, default=12, help="--speculative-num-draft-tokens (NGRAM and SSR)")
    p.add_argument("--server-args", default="", help="extra arguments for every server, one string")
    p.add_argument("--ssr-env", default=None, help='SSR_* settings as JSON, e.g. \'{"SSR_POLICY": "fixed"}\' '
                                                      "(default: none, the server's defaults)")
    p.add_argument("--exact", action="store_true",
                   help="the CPU engine's exact mode (SSR_CPU_EXACT_VERIFY=1) on every server, plain included: greedy "
                        "speculative output then equals plain's token for token (slower; cpu only)")
    p.add_argument("--grammar", default=None, choices=sorted(ANSWER_GRAMMARS),
                   help="also serve every task with its answer constrained by this grammar (the bundled models' "
                        "answer format; SGLang's reasoning parser starts it after </think>), reported beside the "
                        "unconstrained runs as METHOD+GRAMMAR")
    p.add_argument("--out", default="results/main_job", help="folder for results.json, results.md, latency.png")
    p.add_argument("--seed", type=int, default=777, help="held-out task seed (training used other seeds)")
    args = p.parse_args(argv)
    if "SSR_CPU_EXACT_VERIFY" in (args.ssr_env or ""):
        # exact mode changes how the engine computes every row, plain's included: on the SSR server alone it
        # compares an exact SSR with a non-exact plain, whose prefills round differently
        p.error("--ssr-env: SSR_CPU_EXACT_VERIFY applies to every server; use --exact")
    if args.exact and args.device != "cpu":
        p.error("--exact: exact mode is the CPU engine's (--device cpu)")
    return args


# -- tasks ----------------------------------------------------------------------
def load_tasks(args, tokenizer, n: int, seed: int, skip: int = 0) -> list:
    """``[{"input_ids": [...], "expected": ... or None}]``: ``n`` tasks (from ``--prompts``: after
    the first ``skip`` lines; else the bundled model's task generator with ``seed``)."""
    if args.model == "smollm2-reasoner":
        return reasoner_tasks(tokenizer, n, skip)
    if args.prompts:
        lines = [l for l in Path(args.prompts).read_text().splitlines() if l.strip()]
        rows = [json.loads(l) for l in lines[skip: skip + n]]
        msgs = [r.get("messages") or [{"role": "user", "content": r["prompt"]}] for r in rows]
        expected = [None] * len(rows)
    else:
        from ssr_sglang.models import tasks

        rng = random.Random(seed)
        examples = [tasks.make_example(rng) for _ in range(n)]
        msgs = [[{"role": "user", "content": ex["prompt"]}] for ex in examples]
        expected = [ex["final"] for ex in examples]
    out = []
    for m, exp in zip(msgs, expected):
        text = tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False)
        out.append({"input_ids": tokenizer(text, add_special_tokens=False).input_ids, "expected": exp})
    return out


def reasoner_tasks(tokenizer, n: int, skip: int) -> list:
    """Held-out tasks of the SmolLM2 reasoner, code and word problems alternating, after the first ``skip``
    of each kind; each with a ``score(answer_text) -> bool`` (pass@1 or exact match)."""
    from ssr_sglang.models.smollm2_reasoner import evaluate

    code = evaluate.held_out_tasks(55, 0)
    words = evaluate.held_out_tasks(0, skip + n)
    half = (n + 1) // 2
    if skip + half > len(code):
        raise SystemExit(f"the reasoner has {len(code)} held-out code problems; asked for {skip + half}")
    picked = [t for pair in zip(code[skip:skip + half], words[skip:skip + half]) for t in pair][:n]
    out = []
    for t in picked:
        text = tokenizer.apply_chat_template(t["messages"], add_generation_prompt=True, tokenize=False)
        out.append({"input_ids": tokenizer(text, add_special_tokens=False).input_ids, "expected": None,
                    "id": t["id"], "score": (lambda a, t=t: evaluate.score(t, a))})
    return out


def is_hybrid(model: str) -> bool:
    """Whether ``model`` (a local folder) has linear-attention (Gated DeltaNet) layers, as Qwen3.5 does."""
    cfg = Path(model) / "config.json"
    if not cfg.exists():
        return False
    c = json.loads(cfg.read_text())
    c = c.get("text_config", c)
    return "linear_attention" in (c.get("layer_types") or [])


def server_args(args, model: str, method: str) -> list:
    a = ["--model-path", model, "--device", args.device, "--max-running-requests", "16"]
    if args.device == "cpu":
        # --sleep-on-idle: an idle SGLang scheduler otherwise busy-polls a whole core, which on a small CPU
        # machine slows every other server and the client. --mem-fraction-static 0.8: SGLang budgets the KV pool
        # from free memory before and after loading; anything else starting in between ate a 0.3 budget.
        # --max-total-tokens caps the pool itself.
        a += ["--dtype", "bfloat16", "--max-total-tokens", "32768", "--mem-fraction-static", "0.8", "--sleep-on-idle"]
        if is_hybrid(model) and "--mamba-radix-cache-strategy" not in args.server_args:
            # SGLang's CPU engine serves hybrid models only with these (plain serving too; README, Guarantees)
            a += ["--mamba-radix-cache-strategy", "no_buffer", "--disable-overlap-schedule"]
    a += ["--skip-server-warmup", "--log-level", "warning", "--random-seed", "0"]
    if getattr(args, "grammar", None):  # (other benchmarks pass their own args) the grammar starts after </think>
        # (require_reasoning) only with a reasoning parser
        a += ["--reasoning-parser", "qwen3"]
    if method == "ngram":
        a += ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", str(args.num_draft_tokens)]
    elif method == "ssr":
        a += ["--speculative-algorithm", "SSR", "--speculative-num-draft-tokens", str(args.num_draft_tokens)]
    return a + shlex.split(args.server_args)


def run_side_by_side(args, model, tasks_, warmup, out_dir: Path) -> dict:
    """``{method: [row per task]}``: all servers up at once, each task sent to every server in an
    order rotated per task, each request from an empty cache (:func:`~ssr_sglang.testing.http.flush_cache`).
    With ``--grammar G`` every server also serves each task constrained by G, right after the unconstrained
    request, under the key ``METHOD+G``."""
    from contextlib import ExitStack

    from tqdm import tqdm

    methods = args.methods.split(",")
    env = json.loads(args.ssr_env) if args.ssr_env else {}
    with ExitStack() as stack:
        servers = {}
        for m in methods:  # one after the other: SGLang sizes its KV pool from the memory free at load
            e = {**getattr(args, "ssr_markers", {}), **env} if m == "ssr" else {}
            if args.exact:
                e["SSR_CPU_EXACT_VERIFY"] = "1"
            if args.device != "cpu":
                e["SGLANG_USE_CPU_ENGINE"] = "0"
            servers[m] = stack.enter_context(
                Server(server_args(args, model, m), env=e, log_path=str(out_dir / f"server-{m}.log"), timeout=600))
        grammars = {"": None, **({f"+{args.grammar}": {args.grammar: ANSWER_GRAMMARS[args.grammar]}}
                                 if args.grammar else {})}
        for t in tqdm(warmup, desc="warm-up", unit="task", file=sys.stdout):
            for s in servers.values():
                for g in grammars.values():
                    run_one(s.url, t["input_ids"], args.max_new_tokens, flush=True, grammar=g)
        results = {m + suffix: [None] * len(tasks_) for suffix in grammars for m in methods}
        for i in tqdm(range(len(tasks_)), desc="tasks", unit="task", file=sys.stdout):
            k = i % len(methods)
            for m in methods[k:] + methods[:k]:
                for suffix, g in grammars.items():
                    results[m + suffix][i] = run_one(servers[m].url, tasks_[i]["input_ids"], args.max_new_tokens,
                                                     flush=True, grammar=g)
            # kept as it goes: a server lost late in a long run (e.g. to the OOM killer) leaves the tasks before it
            (out_dir / "results-partial.json").write_text(json.dumps(results))
    return results


def ratio_interval(base: list, other: list, reps: int = 2000, seed: int = 0) -> tuple:
    """95% bootstrap interval (over tasks) of ``mean(base) / mean(other)``, the e2e speedup."""
    rng = random.Random(seed)
    n = len(base)
    stats = []
    for _ in range(reps):
        idx = [rng.randrange(n) for _ in range(n)]
        stats.append(sum(base[i] for i in idx) / sum(other[i] for i in idx))
    stats.sort()
    return stats[int(0.025 * reps)], stats[int(0.975 * reps) - 1]


# -- report -----------------------------------------------------------------------------
def summarize(results: dict, tasks_) -> dict:
    """Per method: latency, phases, acceptance, against plain under the same grammar (``ssr+regex`` against
    ``plain+regex``) and, for SSR, against NGRAM."""
    summary = {}
    for method, rows in results.items():
        suffix = method[method.index("+"):] if "+" in method else ""
        base = results.get("plain" + suffix)
        lat = [r["latency"] for r in rows]
        ans = [r["answer_time"] for r in rows if r["answer_time"] is not None]
        reas = [r["reasoning_time"] for r in rows if r["reasoning_time"] is not None]
        steps = [r["reasoning_steps"] for r in rows if r.get("reasoning_steps") is not None]
        s = {"mean_latency_s": statistics.mean(lat), "mean_answer_time_s": statistics.mean(ans) if ans else None,
             "mean_reasoning_time_s": statistics.mean(reas) if reas else None,
             # decode steps up to the think end: does a method reason in fewer steps, or in cheaper ones?
             "mean_reasoning_steps": statistics.mean(steps) if len(steps) == len(rows) else None}
        if base is not None:
            s["identical_to_plain"] = sum(r["output_ids"] == b["output_ids"] for r, b in zip(rows, base))
            s["e2e_speedup"] = statistics.mean(b["latency"] for b in base) / s["mean_latency_s"]
            s["per_task_speedup"] = per_task_spread(base, rows, "slower_than_plain")
            if rows is not base:
                s["e2e_speedup_ci95"] = ratio_interval([b["latency"] for b in base], lat)
            s["per_sample_improvement_pct"] = 100 * (1 - 1 / statistics.mean(
                b["latency"] / r["latency"] for r, b in zip(rows, base)))
            pairs = [(b["answer_time"], r["answer_time"]) for r, b in zip(rows, base)
                     if b["answer_time"] and r["answer_time"]]
            if pairs:
                s["answer_speedup"] = sum(p for p, _ in pairs) / sum(q for _, q in pairs)
        ssr = [r["ssr"] for r in rows if r.get("ssr")]
        if ssr:
            steps = sum(x["answer_verify_steps"] for x in ssr)
            s["answer_accept_length"] = sum(x["answer_tokens"] for x in ssr) / steps if steps else None
            s["accepted_prefix"] = sum(x["accepted_prefix"] for x in ssr)
            s["accepted_suffix"] = sum(x["accepted_suffix"] for x in ssr)
            s["drafts_started"] = sum(x["drafts_started"] for x in ssr)
            overhead = [x["draft_overhead_s"] for x in ssr if x.get("draft_overhead_s") is not None]
            s["draft_overhead_s"] = sum(overhead) / len(overhead) if overhead else None
            s["reasoning_host_s"] = statistics.mean(x.get("reasoning_host_time_s", 0.0) for x in ssr)
            splits = [x["reasoning_split_s"] for x in ssr if x.get("reasoning_split_s")]
            if len(splits) == len(ssr):
                s["reasoning_split_s"] = {k: statistics.mean(sp[k] for sp in splits) for k in splits[0]}
        acc = [r["spec_accept_length"] for r in rows if r.get("spec_accept_length")]
        if acc:
            s["mean_spec_accept_length"] = statistics.mean(acc)
        if tasks_[0].get("score") is not None:
            s["answers_correct"] = sum(bool(t["score"](r["text"].split("</think>")[-1]))
                                       for r, t in zip(rows, tasks_) if "</think>" in r["text"])
            s["think_closed"] = sum("</think>" in r["text"] for r in rows)
        elif tasks_[0]["expected"] is not None:
            from ssr_sglang.models.tasks import parse_answer

            s["answers_correct"] = sum(parse_answer(r["text"].split("</think>")[-1]) == t["expected"]
                                       for r, t in zip(rows, tasks_))
        summary[method] = s
    for method in results:
        if method.startswith("ssr") and "ngram" + method[3:] in results:
            summary[method]["vs_ngram"] = versus(results["ngram" + method[3:]], results[method])
    return summary


def per_task_spread(base: list, other: list, slower_key: str) -> dict:
    """Min / median / max of the per-task speedups ``base`` latency / ``other`` latency, and how many
    are below 1 (under ``slower_key``)."""
    ratios = sorted(b["latency"] / o["latency"] for b, o in zip(base, other))
    return {"min": ratios[0], "median": statistics.median(ratios), "max": ratios[-1],
            slower_key: sum(x < 1 for x in ratios)}


def versus(base: list, other: list) -> dict:
    """``other`` against ``base``, task by task in the same run: latency ratio with its bootstrap
    interval, the per-task spread, and the reasoning-phase ratio (how much longer ``other`` reasons)."""
    lat_b, lat_o = [r["latency"] for r in base], [r["latency"] for r in other]
    reas = [(b["reasoning_time"], o["reasoning_time"]) for b, o in zip(base, other)
            if b["reasoning_time"] and o["reasoning_time"]]
    return {"speedup": sum(lat_b) / sum(lat_o), "ci95": ratio_interval(lat_b, lat_o),
            "per_task": per_task_spread(base, other, "slower"),
            "reasoning_ratio": sum(o for _, o in reas) / sum(b for b, _ in reas) if reas else None,
            "reasoning_extra_s": sum(o - b for b, o in reas) / len(reas) if reas else None}


def versus_line(summary: dict, unit: str = "task") -> str:
    return "\n\n".join(_versus_line(m, s, unit) for m, s in summary.items() if s.get("vs_ngram"))


def _versus_line(method: str, s: dict, unit: str) -> str:
    v = s["vs_ngram"]
    pt, r, extra = v["per_task"], v["reasoning_ratio"], v.get("reasoning_extra_s")
    name = "SSR" + method[3:]
    reasoning = f"; SSR's reasoning phase {100 * (r - 1):+.1f}% against NGRAM's" if r else ""
    sp = s.get("reasoning_split_s")
    if extra is not None and sp:
        ms = lambda x: f"{1e3 * x:.0f} ms"  # noqa: E731
        rest = extra - sp["host"] - sp["draft_rows"] - sp["draft_prefill"] - sp["other"]
        reasoning += (f" ({1e3 * extra:+.0f} ms per {unit}: SSR's host work {ms(sp['host'])}, draft rows "
                      f"{ms(sp['draft_rows'])}, draft prefill and forks {ms(sp['draft_prefill'])}, draft-free steps "
                      f"beyond the server's measured step {ms(sp['other'])}; left {1e3 * rest:+.0f} ms: SSR's "
                      f"draft-free step, host work aside, against NGRAM's step and streaming, over "
                      f"{1e3 * sp['plain_equivalent']:.0f} ms of plain-equivalent steps)")
    return (f"{name} against NGRAM{method[3:]}, {unit} by {unit}: {v['speedup']:.2f}x (95% CI {v['ci95'][0]:.2f}-{v['ci95'][1]:.2f}), "
            f"per {unit} min / median / max {pt['min']:.2f} / {pt['median']:.2f} / {pt['max']:.2f}, "
            f"{pt['slower']} {unit}s slower{reasoning}")


def markdown(summary: dict, n: int) -> str:
    def f(v, fmt="{:.3f}"):
        return "—" if v is None else fmt.format(v)

    lines = ["| method | mean latency (s) | e2e speedup | mean answer phase (s) | answer-phase speedup "
             "| answer accept length | identical to plain | correct answers |",
             "|---|---|---|---|---|---|---|---|"]
    for m, s in summary.items():
        lines.append(
            f"| {m} | {f(s['mean_latency_s'])} | {f(s.get('e2e_speedup'), '{:.2f}x')} | {f(s['mean_answer_time_s'])} "
            f"| {f(s.get('answer_speedup'), '{:.2f}x')} | {f(s.get('answer_accept_length'), '{:.2f}')} "
            f"| {s.get('identical_to_plain', '—')}/{n} | {s.get('answers_correct', '—')}/{n} |")
    return "\n".join(lines)


def spread_markdown(summary: dict) -> str:
    lines = ["| method | e2e speedup (95% CI) | per-task speedup min / median / max | tasks slower than plain "
             "| reasoning (s) | reasoning steps | answer (s) | drafting overhead per task (s) |",
             "|---|---|---|---|---|---|---|---|"]
    for m, s in summary.items():
        ci, pt = s.get("e2e_speedup_ci95"), s.get("per_task_speedup")
        ci_s = f"{s['e2e_speedup']:.2f}x ({ci[0]:.2f}-{ci[1]:.2f})" if ci else "—"
        pt_s = f"{pt['min']:.2f} / {pt['median']:.2f} / {pt['max']:.2f}" if pt else "—"
        slower = pt["slower_than_plain"] if pt else "—"
        f = lambda v: "—" if v is None else f"{v:.3f}"  # noqa: E731
        steps = s.get("mean_reasoning_steps")
        lines.append(f"| {m} | {ci_s} | {pt_s} | {slower} | {f(s.get('mean_reasoning_time_s'))} "
                     f"| {'—' if steps is None else f'{steps:.1f}'} | {f(s.get('mean_answer_time_s'))} "
                     f"| {f(s.get('draft_overhead_s'))} |")
    return "\n".join(lines)


def plot(results: dict, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(7, 3.5))
    methods = list(results)
    reasoning = [statistics.mean(r["reasoning_time"] or 0 for r in results[m]) for m in methods]
    answer = [statistics.mean(r["answer_time"] or 0 for r in results[m]) for m in methods]
    ax.barh(methods, reasoning, label="reasoning")
    ax.barh(methods, answer, left=reasoning, label="answer")
    ax.set_xlabel("mean latency per task (s)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _portable(path: str) -> str:
    """``path`` relative to the checkout when it lies inside it, so results name no machine's folders."""
    root = Path(__file__).resolve().parents[1]
    try:
        return str(Path(path).resolve().relative_to(root))
    except ValueError:
        return path


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.device == "cpu":
        os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
    from transformers import AutoTokenizer

    from ssr_sglang.models import BUNDLED_MODELS_ROOT, bundled_model_path

    if args.max_new_tokens is None:
        args.max_new_tokens = 768 if args.model == "smollm2-reasoner" else 512
    if args.model == "smollm2-reasoner":
        from ssr_sglang.models.smollm2_reasoner.build import SSR_ENV, BuildError, cached_reasoner

        try:
            model = str(cached_reasoner())
        except BuildError as e:
            sys.exit(f"error: {e}")
        args.ssr_markers = dict(SSR_ENV)  # its think markers are text, not tokens of the vocab
    else:
        model = args.model_path or bundled_model_path()
    if args.grammar and (args.model != "tiny" or args.prompts):
        sys.exit("--grammar constrains the bundled models' answer format: it needs --model tiny and no --prompts")
    if args.model == "tiny" and Path(model).resolve().parent != BUNDLED_MODELS_ROOT and not args.prompts:
        sys.exit("--model-path other than the bundled models needs --prompts (a JSONL file of prompts)")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(model)
    tasks_ = load_tasks(args, tokenizer, args.n, args.seed, skip=args.warmup)
    warmup = load_tasks(args, tokenizer, args.warmup, args.seed + 1)
    print(f"== {len(tasks_)} tasks (+{len(warmup)} warm-up) on {model} ({args.device}); methods: {args.methods}, "
          "all servers up at once, order rotated per task")
    results = run_side_by_side(args, model, tasks_, warmup, out_dir)
    summary = summarize(results, tasks_)
    table = markdown(summary, len(tasks_))
    stamp = time.strftime("%Y-%m-%d")
    cmd = "python -m ssr_sglang.main_job " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    from ssr_sglang.models.smollm2_reasoner.build import adapter_of

    (out_dir / "results.json").write_text(json.dumps({"date": stamp, "command": cmd, "model": _portable(model),
                                                      "reasoner_adapter_sha256": adapter_of(model),
                                                      "task_ids": [t.get("id") for t in tasks_],
                                                      "summary": summary, "results": results}, indent=1))
    vs = versus_line(summary)
    (out_dir / "results.md").write_text(f"{stamp}, `{cmd}`\n\n{table}\n\n{spread_markdown(summary)}\n\n{vs}\n")
    plot(results, out_dir / "latency.png")
    print("\n" + table + "\n\n" + spread_markdown(summary) + "\n\n" + vs)
    ssr = summary.get("ssr", {})
    if "ssr" in summary and "plain" in summary:
        print(f"\nSSR: {ssr.get('drafts_started')} drafts, answer-phase tokens accepted via prefix "
              f"{ssr.get('accepted_prefix')} / suffix {ssr.get('accepted_suffix')}; "
              f"every output identical to plain: {ssr.get('identical_to_plain') == len(tasks_)}")
    print(f"results in {out_dir}/ (results.json, results.md, latency.png)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
