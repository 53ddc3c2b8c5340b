"""What a draft costs a reasoning step: scheduler step times with and without a draft beside it.

One SSR server on the bundled model with a fixed schedule that keeps a draft beside most reasoning
steps (a draft every 16 tokens); every task runs from an empty cache. It prints the mean reasoning
step (the worker's forward, proposals included, to the verified tokens) without and with a draft of
the same request in the batch, and the answer-phase verify step, from ``meta_info["ssr"]``. To
compare two versions of the code, run it in each checkout on an otherwise idle machine.

    python benchmarks/draft_step_cost.py --n 12
"""

from __future__ import annotations

import argparse
import os
import random


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=12)
    p.add_argument("--seed", type=int, default=777)
    args = p.parse_args(argv)
    os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
    from transformers import AutoTokenizer

    from ssr_sglang.main_job import parse_args, server_args
    from ssr_sglang.testing.http import run_one
    from ssr_sglang.models import bundled_model_path, tasks
    from ssr_sglang.testing.server import Server

    model = bundled_model_path()
    tok = AutoTokenizer.from_pretrained(model)
    rng = random.Random(args.seed)
    prompts = [tok(tasks.format_chat(tasks.make_example(rng)["prompt"]), add_special_tokens=False).input_ids
               for _ in range(args.n)]
    env = {"SSR_EVERY": "16", "SSR_MAX_DRAFTS": "8", "SSR_MAX_DRAFT_TOKENS": "112"}
    t = dict.fromkeys(("free_s", "free_n", "draft_s", "draft_n", "verify_s", "verify_n"), 0.0)
    with Server(server_args(parse_args([]), model, "ssr"), env=env) as s:
        run_one(s.url, prompts[0], 8)  # warm-up
        for ids in prompts:
            m = run_one(s.url, ids, 512, flush=True)["ssr"]
            t["free_s"] += m["reasoning_time_s"] - m["reasoning_draft_time_s"]
            t["free_n"] += m["reasoning_steps"] - m["reasoning_draft_steps"]
            t["draft_s"] += m["reasoning_draft_time_s"]
            t["draft_n"] += m["reasoning_draft_steps"]
            t["verify_s"] += m["verify_time_s"]
            t["verify_n"] += m["answer_verify_steps"]
    ms = lambda a, b: 1000 * t[a] / max(1.0, t[b])  # noqa: E731
    print(f"reasoning step: {ms('free_s', 'free_n'):.2f} ms alone ({t['free_n']:.0f} steps), "
          f"{ms('draft_s', 'draft_n'):.2f} ms with a draft beside it ({t['draft_n']:.0f} steps); "
          f"answer verify step {ms('verify_s', 'verify_n'):.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
