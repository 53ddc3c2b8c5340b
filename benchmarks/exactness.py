"""Greedy identity to plain decoding on a real model: plain vs a speculative server, one server at a time.

For every prompt the output of the speculative server is compared with plain's; for each prompt that
differs, the position of the first difference and plain's own top-2 log-probabilities there (asked
for in the plain run) are reported.

    python benchmarks/exactness.py --model-path .cache/models/smollm2-135m-instruct --n 16 \
        --max-new-tokens 256 [--exact] [--concurrency 8] [--fp32-lm-head] [--method NGRAM|SSR]
        [--client-drafts] [--out DIR]

``--exact`` starts both servers with ``SSR_CPU_EXACT_VERIFY=1`` (see README, Guarantees); only then
are concurrent prompts expected to match too. ``--client-drafts`` (SSR) gives each prompt plain's
output with every 40th token changed as its ``ssr_draft``, so that draft proposals (prefix and
suffix) are verified, not only n-gram ones.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ssr_sglang.testing.exactness import chat_prompts, edited, first_differences, run  # noqa: E402
from ssr_sglang.testing.server import Server, cpu_server_args  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-path", required=True)
    ap.add_argument("--n", type=int, default=12)
    ap.add_argument("--max-new-tokens", type=int, default=192)
    ap.add_argument("--method", default="NGRAM", choices=["NGRAM", "SSR"])
    ap.add_argument("--exact", action="store_true")
    ap.add_argument("--fp32-lm-head", action="store_true")
    ap.add_argument("--out", default=None)
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--client-drafts", action="store_true")
    args = ap.parse_args()
    from transformers import AutoTokenizer

    prompts = chat_prompts(AutoTokenizer.from_pretrained(args.model_path), args.n)
    env = {"OMP_NUM_THREADS": "1", **({"SSR_CPU_EXACT_VERIFY": "1"} if args.exact else {})}
    common = ["--enable-fp32-lm-head"] if args.fp32_lm_head else []
    spec = ["--speculative-algorithm", args.method, "--speculative-num-draft-tokens", "8"]
    name = args.method.lower()
    outs, walls = {}, {}
    for label, extra in (("plain", []), (name, spec)):
        drafts = [edited(o["output_ids"]) for o in outs["plain"]] if label != "plain" and args.client_drafts else None
        with Server(cpu_server_args(args.model_path, *common, *extra), env=env) as s:
            t = time.time()
            outs[label] = run(s.url, prompts, args.max_new_tokens, args.concurrency, top2=label == "plain",
                              drafts=drafts)
            walls[label] = time.time() - t
    diffs = first_differences(outs["plain"], outs[name])
    accepted = {k: sum((o["meta_info"].get("ssr") or {}).get(k, 0) for o in outs[name])
                for k in ("accepted_prefix", "accepted_suffix")}
    report = {"identical": len(prompts) - len(diffs), "prompts": len(prompts), "first_differences": diffs,
              "wall_s": {k: round(v, 1) for k, v in walls.items()}, "accepted": accepted,
              "spec_accept_length": [o["meta_info"].get("spec_accept_length") for o in outs[name]],
              "args": vars(args), "date": time.strftime("%Y-%m-%d %H:%M")}
    print(json.dumps(report, indent=1))
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "results.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
