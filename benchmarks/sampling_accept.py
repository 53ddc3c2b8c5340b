"""Answer accept length of SSR under sampling vs greedy (#13 item 5), on one SSR server.

Since the CPU verify samples (``ssr_sglang.cpu.eagle_sampling``), a sampled request accepts a proposed
token with the target's probability of that token instead of only when it is the argmax, so the tokens
per verify step drop under sampling. Each held-out task of the bundled model runs once per setting
(greedy; temperature 0.6; temperature 0.6 with top-k 20 and top-p 0.95; temperature 1.0), the order of
the settings rotated per task, each request from an empty cache, after ``--warmup`` greedy tasks of
another seed (SSR's drafting policy learns from served requests). Drafts are hidden requests with their
parent's sampling parameters, so under sampling they are samples too.

Columns: answer accept length (answer tokens per answer verify step, summed over tasks), tokens accepted
from drafts per task (prefix / suffix), drafts per task, answer tokens per task, answer time per task,
the share of answers that parse and equal the expected dict, how many outputs (reasoning and answer) equal
the same task's greedy output, and SGLang's spec_accept_length (whole request, reasoning included).

    python benchmarks/sampling_accept.py --n 24
    python benchmarks/sampling_accept.py --n 24 --ssr-env '{"SSR_POLICY": "fixed", "SSR_EVERY": "16", "SSR_MAX_DRAFTS": "8"}'
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_utils as bu  # noqa: E402

SETTINGS = {
    "greedy": {"temperature": 0.0},
    "t0.6": {"temperature": 0.6},
    "t0.6 k20 p0.95": {"temperature": 0.6, "top_k": 20, "top_p": 0.95},
    "t1.0": {"temperature": 1.0},
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=16, help="held-out tasks (each runs once per setting)")
    p.add_argument("--warmup", type=int, default=8, help="greedy tasks of another seed served first (not recorded)")
    p.add_argument("--max-new-tokens", type=int, default=512)
    p.add_argument("--num-draft-tokens", type=int, default=12)
    p.add_argument("--settings", default=",".join(SETTINGS), help="comma list of " + ", ".join(SETTINGS))
    p.add_argument("--ssr-env", default=None, help='SSR_* settings as JSON, e.g. \'{"SSR_POLICY": "fixed", '
                   '"SSR_EVERY": "16", "SSR_MAX_DRAFTS": "8"}\' (default: the server\'s defaults)')
    p.add_argument("--seed", type=int, default=777)
    p.add_argument("--out", default="results/benchmarks/sampling-accept")
    return p.parse_args(argv)


def run(url: str, input_ids, setting: dict, max_new_tokens: int) -> dict:
    bu.flush_cache(url)
    sp = {"max_new_tokens": max_new_tokens, "skip_special_tokens": False, **setting}
    t0 = time.perf_counter()
    r = requests.post(url + "/generate", json={"input_ids": list(input_ids), "sampling_params": sp}, timeout=1800)
    r.raise_for_status()
    out = r.json()
    return {"latency": time.perf_counter() - t0, "text": out["text"], "ssr": out["meta_info"].get("ssr"),
            "spec_accept_length": out["meta_info"].get("spec_accept_length")}


def summarize(rows: list, greedy_rows: list = None) -> dict:
    from ssr_sglang.models.tasks import parse_answer

    tot = bu.sum_ssr(rows) or {}
    n = len(rows)

    def per_task(key):
        return tot.get(key, 0) / n if n else None

    correct = 0
    for r in rows:
        try:
            correct += parse_answer(r["text"].split("</think>")[-1]) == r["expected"]
        except Exception:  # noqa: BLE001 - an unparsable sampled answer is simply wrong
            pass
    return {
        "tasks": n,
        "answer_accept_length": tot.get("answer_accept_length"),
        "accepted_prefix_per_task": per_task("accepted_prefix"),
        "accepted_suffix_per_task": per_task("accepted_suffix"),
        "drafts_per_task": per_task("drafts_started"),
        "answer_tokens_per_task": per_task("answer_tokens"),
        "answer_verify_steps_per_task": per_task("answer_verify_steps"),
        "verify_time_per_task_s": per_task("verify_time_s"),
        "correct": correct,
        "identical_to_greedy": (sum(r["text"] == g["text"] for r, g in zip(rows, greedy_rows))
                                if greedy_rows else None),
        "spec_accept_length": bu.mean(r["spec_accept_length"] for r in rows),
        "latency_s": bu.mean(r["latency"] for r in rows),
    }


def main(argv=None) -> None:
    args = parse_args(argv)
    from transformers import AutoTokenizer

    from ssr_sglang.main_job import load_tasks
    from ssr_sglang.models import bundled_model_path
    from ssr_sglang.testing.server import cpu_server_args

    names = [s.strip() for s in args.settings.split(",") if s.strip()]
    for s in names:
        if s not in SETTINGS:
            raise SystemExit(f"unknown setting {s!r}: {', '.join(SETTINGS)}")
    model = str(bundled_model_path())
    tok = AutoTokenizer.from_pretrained(model)
    task_args = argparse.Namespace(prompts=None)
    warm = load_tasks(task_args, tok, args.warmup, args.seed + 1000)
    tasks = load_tasks(task_args, tok, args.n, args.seed)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%d %H:%M")
    server_args = cpu_server_args(model, "--speculative-algorithm", "SSR", "--speculative-num-draft-tokens",
                                  str(args.num_draft_tokens), "--random-seed", "0", max_total_tokens=32768)
    rows = {s: [] for s in names}
    with contextlib.ExitStack() as stack:
        server = bu.start_servers(stack, {"ssr": (server_args, bu.ssr_env(args, model))}, out_dir, "cpu")["ssr"]
        for t in warm:
            run(server.url, t["input_ids"], SETTINGS["greedy"], args.max_new_tokens)
        for i, t in enumerate(tasks):
            order = names[i % len(names):] + names[: i % len(names)]
            for s in order:
                r = run(server.url, t["input_ids"], SETTINGS[s], args.max_new_tokens)
                rows[s].append({**r, "expected": t["expected"]})
            bu.log(f"   task {i + 1}/{len(tasks)}: " + ", ".join(
                f"{s} {bu.fmt((rows[s][-1]['ssr'] or {}).get('answer_accept_length'), '{:.2f}')}" for s in names))
    summary = {s: summarize(rows[s], rows.get("greedy")) for s in names}
    header = ["setting", "answer accept length", "accepted prefix / suffix per task", "drafts per task",
              "answer tokens per task", "answer verify time per task (s)", "correct", "output identical to greedy",
              "spec_accept_length"]
    table = [[s, bu.fmt(v["answer_accept_length"], "{:.2f}"),
              f"{bu.fmt(v['accepted_prefix_per_task'], '{:.1f}')} / {bu.fmt(v['accepted_suffix_per_task'], '{:.1f}')}",
              bu.fmt(v["drafts_per_task"], "{:.2f}"), bu.fmt(v["answer_tokens_per_task"], "{:.1f}"),
              bu.fmt(v["verify_time_per_task_s"], "{:.3f}"), f"{v['correct']}/{v['tasks']}",
              f"{bu.fmt(v['identical_to_greedy'], '{}')}/{v['tasks']}",
              bu.fmt(v["spec_accept_length"], "{:.2f}")] for s, v in summary.items()]
    md = (f"# SSR answer accept length: sampling vs greedy\n\n{started}, {bu.machine()}, bundled model, "
          f"{args.n} tasks after {args.warmup} greedy warm-up tasks, SSR settings {args.ssr_env or 'default'}, "
          f"--speculative-num-draft-tokens {args.num_draft_tokens}\n\n`{bu.command_line('sampling_accept.py', argv)}`"
          f"\n\n" + bu.md_table(header, table))
    payload = {"started": started, "args": vars(args), "summary": summary,
               "rows": {s: [{k: v for k, v in r.items() if k != "text"} for r in rs] for s, rs in rows.items()}}
    bu.write_outputs(out_dir, payload, md)
    print(md)


if __name__ == "__main__":
    main()
