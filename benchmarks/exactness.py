"""Greedy identity to plain decoding on a real model: plain vs a speculative server, one server at a time.

For every prompt the output of the speculative server is compared with plain's; for each prompt that
differs, the position of the first difference and plain's top-3 log-probabilities there (from a plain
server, the prompt plus plain's output up to that position prefilled) are reported.

    python benchmarks/exactness.py --model-path .cache/models/smollm2-135m-instruct --n 12 \
        --max-new-tokens 192 [--exact] [--fp32-lm-head] [--method NGRAM|SSR] [--out DIR]

``--exact`` starts both servers with ``SSR_CPU_EXACT_VERIFY=1`` (see README, Guarantees).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ssr_sglang.testing.server import Server, cpu_server_args  # noqa: E402

QUESTIONS = [
    "Write a Python function that returns the sum of a list.", "Explain why the sky is blue.",
    "Write a Python class for a stack with push and pop.", "What is the capital of France? Explain its history.",
    "Write a function to check if a string is a palindrome.", "List five fruits and their colors.",
    "Write a Python function that computes the factorial of n.", "Describe how a bicycle works.",
    "Write a Python function to reverse a linked list.", "What are the benefits of exercise?",
    "Write a Python function that merges two sorted lists.", "Explain what a prime number is.",
    "Write a Python function that counts words in a string.", "How do plants make food?",
    "Write a Python function for binary search.", "Why do we have seasons?",
]


def first_difference(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None if len(a) == len(b) else min(len(a), len(b)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-path", required=True)
    ap.add_argument("--n", type=int, default=12)
    ap.add_argument("--max-new-tokens", type=int, default=192)
    ap.add_argument("--method", default="NGRAM", choices=["NGRAM", "SSR"])
    ap.add_argument("--exact", action="store_true")
    ap.add_argument("--fp32-lm-head", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(args.model_path)
    prompts = [tok(tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                           tokenize=False), add_special_tokens=False).input_ids
               for q in QUESTIONS[: args.n]]
    env = {"OMP_NUM_THREADS": "1", **({"SSR_CPU_EXACT_VERIFY": "1"} if args.exact else {})}
    common = ["--enable-fp32-lm-head"] if args.fp32_lm_head else []
    spec = ["--speculative-algorithm", args.method, "--speculative-num-draft-tokens", "8"]
    outs, walls = {}, {}
    for name, extra in (("plain", []), (args.method.lower(), spec)):
        with Server(cpu_server_args(args.model_path, *common, *extra), env=env) as s:
            t = time.time()
            outs[name] = [s.generate(input_ids=p, max_new_tokens=args.max_new_tokens)["output_ids"] for p in prompts]
            walls[name] = time.time() - t
    plain, other = outs["plain"], outs[args.method.lower()]
    diffs = [first_difference(a, b) for a, b in zip(plain, other)]
    gaps = {}
    with Server(cpu_server_args(args.model_path, *common), env=env) as s:
        for i, d in enumerate(diffs):
            if d is None or d >= len(plain[i]):
                continue
            r = requests.post(s.url + "/generate", json={
                "input_ids": prompts[i] + plain[i][:d], "return_logprob": True, "top_logprobs_num": 3,
                "sampling_params": {"max_new_tokens": 1, "temperature": 0}}, timeout=300).json()
            gaps[i] = [(round(lp, 4), t) for lp, t, *_ in r["meta_info"]["output_top_logprobs"][0]]
    same = sum(d is None for d in diffs)
    report = {"identical": same, "prompts": len(prompts), "first_difference": diffs, "plain_top3_there": gaps,
              "wall_s": {k: round(v, 1) for k, v in walls.items()}, "args": vars(args),
              "date": time.strftime("%Y-%m-%d %H:%M")}
    print(json.dumps(report, indent=1))
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "results.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
