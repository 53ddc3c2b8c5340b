"""The verify width side by side: one SSR server per ``SSR_VERIFY_WIDTH`` setting (``--widths``).

All servers are up at once; for each round and concurrency level the same requests go to each in
turn (the order rotates per round), each burst from an empty cache. Reported: output tokens/s per
server and level, each setting's ratio to ``full``, tree nodes verified per step, and whether the
outputs are identical. Greedy, bundled model by default.

Examples::

    python benchmarks/verify_width.py                       # bundled model, CPU, about 5 minutes
    python benchmarks/verify_width.py --widths auto,full --rounds 1 --concurrency 1,4
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_utils as bu  # noqa: E402

WIDTHS = ("auto", "adaptive", "full")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-path", default=None, help="default: the bundled tiny reasoning model")
    p.add_argument("--dataset", default="bundled")
    p.add_argument("--n", type=int, default=16, help="prompts")
    p.add_argument("--max-new-tokens", type=int, default=512)
    p.add_argument("--num-draft-tokens", type=int, default=12)
    p.add_argument("--concurrency", default="1,4,16")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--widths", default=",".join(WIDTHS), help="SSR_VERIFY_WIDTH settings; 'full' is the reference")
    p.add_argument("--ssr-env", default=None, help="SSR_* settings as JSON (default: the main job's)")
    p.add_argument("--urls", default=None, help="running servers: auto=URL,full=URL")
    p.add_argument("--out", default="results/benchmarks/verify-width")
    return p.parse_args(argv)


def burst(url: str, prompts: list, conc: int, max_new: int) -> dict:
    bu.flush_cache(url)
    n = max(conc, 4)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(conc) as ex:
        rows = list(ex.map(lambda i: bu.stream_generate(url, prompts[i % len(prompts)]["input_ids"], max_new),
                           range(n)))
    wall = time.perf_counter() - t0
    tot = bu.sum_ssr(rows) or {}
    return {"tokens_per_s": sum(r["completion_tokens"] for r in rows) / wall,
            "verify_nodes": tot.get("verify_nodes", 0), "verify_steps": tot.get("verify_steps", 0),
            "outputs": [r["output_ids"] for r in rows]}


def main(argv=None) -> int:
    from transformers import AutoTokenizer

    from ssr_sglang.main_job import server_args
    from ssr_sglang.models import bundled_model_path

    args = parse_args(argv)
    widths = tuple(w.strip() for w in args.widths.split(",") if w.strip())
    if "full" not in widths or len(widths) < 2:
        raise SystemExit("--widths must name 'full' and at least one other setting")
    model = args.model_path or bundled_model_path()
    levels = [int(c) for c in args.concurrency.split(",") if c.strip()]
    prompts = bu.tokenize(bu.load_dataset(args.dataset, args.n), AutoTokenizer.from_pretrained(model), None)
    sargs = argparse.Namespace(device="cpu", num_draft_tokens=args.num_draft_tokens,
                               server_args=f" --max-running-requests {2 * max(levels) + 8}")
    env = bu.ssr_env(args, model)
    specs = {w: (server_args(sargs, model, "ssr"), {**env, "SSR_VERIFY_WIDTH": w}) for w in widths}
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp, cmd, t_start = time.strftime("%Y-%m-%d %H:%M"), bu.command_line("verify_width.py", argv), time.time()
    runs = {w: {c: [] for c in levels} for w in widths}
    identical = {c: True for c in levels}
    with contextlib.ExitStack() as stack:
        servers = bu.start_servers(stack, specs, out_dir, "cpu", running=bu.parse_urls(args.urls))
        for s in servers.values():  # warm-up, not recorded
            bu.stream_generate(s.url, prompts[0]["input_ids"], args.max_new_tokens)
        for rnd in bu.tqdm(range(args.rounds), desc="rounds", unit="round"):
            for c in levels:
                got = {}
                k = rnd % len(widths)
                for w in widths[k:] + widths[:k]:
                    got[w] = burst(servers[w].url, prompts, c, args.max_new_tokens)
                    runs[w][c].append(got[w])
                full = got["full"].pop("outputs")
                identical[c] &= all(got[w].pop("outputs") == full for w in widths if w != "full")
        # what each server's width policy measured and chose (None for a width it does not choose)
        policies = {w: (bu.server_totals(s.url) or {}).get("verify_width") for w, s in servers.items()}
    summary = {}
    for c in levels:
        row = {}
        for w in widths:
            rs = runs[w][c]
            steps = sum(r["verify_steps"] for r in rs)
            row[w] = {"tokens_per_s": statistics.mean(r["tokens_per_s"] for r in rs),
                      "nodes_per_step": sum(r["verify_nodes"] for r in rs) / steps if steps else None}
        for w in widths:
            if w != "full":
                row[w]["vs_full"] = row[w]["tokens_per_s"] / row["full"]["tokens_per_s"]
        row["identical"] = identical[c]
        summary[c] = row
    f = bu.fmt
    others = [w for w in widths if w != "full"]
    table = bu.md_table(
        ["concurrency"] + [f"{w} tok/s" for w in widths] + [f"{w} / full" for w in others]
        + [f"nodes per step ({' / '.join(widths)})", "identical outputs"],
        [[c] + [f(s[w]["tokens_per_s"], "{:.1f}") for w in widths] + [f(s[w]["vs_full"], "{:.3f}") for w in others]
         + [" / ".join(f(s[w]["nodes_per_step"], "{:.1f}") for w in widths), "yes" if s["identical"] else "NO"]
         for c, s in summary.items()])
    md = (f"{stamp}, {bu.machine()}; `{cmd}`\n\nModel `{Path(model).name}`, {len(prompts)} prompts, greedy, all "
          f"servers up at once, {args.rounds} rounds in rotating order, each burst from an empty cache; wall "
          f"{time.time() - t_start:.0f} s.\n\n{table}\n")
    bu.write_outputs(out_dir, {"date": stamp, "command": cmd, "model": model, "summary": summary,
                               "width_policy": policies,
                               "runs": {w: {str(c): v for c, v in r.items()} for w, r in runs.items()}}, md)
    print("\n" + md)
    print(f"results in {out_dir}/ (results.json, results.md)")
    return 0 if all(identical.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
