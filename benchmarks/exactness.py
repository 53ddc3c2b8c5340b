"""Greedy identity to plain decoding on a real model: plain vs a speculative server, one server at a time.

For every prompt the output of the speculative server is compared with plain's; for each prompt that
differs, the position of the first difference and plain's own top-2 log-probabilities there (asked
for in the plain run) are reported.

    python benchmarks/exactness.py --model-path .cache/models/smollm2-135m-instruct --n 16 \
        --max-new-tokens 256 [--exact] [--concurrency 8] [--fp32-lm-head] [--method NGRAM|SSR]
        [--client-drafts [--draft-edit rename]] [--dataset classeval] [--context]
        [--num-draft-tokens 8] [--out DIR]

``--exact`` starts both servers with ``SSR_CPU_EXACT_VERIFY=1`` (see docs/correctness.md); only then
are concurrent prompts expected to match too. ``--client-drafts`` (SSR) gives each prompt plain's
output with every 40th token changed as its ``ssr_draft``, so that draft proposals (prefix and
suffix) are verified, not only n-gram ones; with ``--draft-edit rename`` the draft is plain's output
with one identifier renamed everywhere (the first that occurs 3-18 times gets the prefix ``my_``;
a prompt without one gets no draft), the case of a draft that named one thing differently.
``--dataset classeval`` takes ClassEval prompts (complete the class in its skeleton, as
``latency.py --dataset classeval``) from ``--data-root`` instead of the built-in questions;
``--dataset reasoner-heldout`` takes the SmolLM2 reasoner's held-out prompts (the main job's
``--model smollm2-reasoner`` tasks, in its order), with the reasoner's think markers set on the SSR server so
that its drafts fork. ``--context`` adds ``ssr_context`` (the prompt as a source) to every SSR request. The report gives
tokens per verify step on the speculative server (its answer tokens over its answer verify steps,
from ``meta_info["ssr"]``, and SGLang's ``spec_accept_length``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from ssr_sglang.testing.exactness import chat_prompts, edited, first_differences, renamed, run  # noqa: E402
from ssr_sglang.testing.server import Server, cpu_server_args  # noqa: E402


def classeval_chat_prompts(tokenizer, n: int, data_root: Path) -> list:
    from bench_utils import classeval_prompts

    rows = classeval_prompts(data_root / "classeval" / "ClassEval_data.json")[:n]
    return [tokenizer(tokenizer.apply_chat_template(r["messages"], add_generation_prompt=True, tokenize=False),
                      add_special_tokens=False).input_ids for r in rows]


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
    ap.add_argument("--draft-edit", default="every40", choices=["every40", "rename"])
    ap.add_argument("--dataset", default="questions", choices=["questions", "classeval", "reasoner-heldout"])
    ap.add_argument("--data-root", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--context", action="store_true", help="ssr_context on every SSR request")
    ap.add_argument("--num-draft-tokens", type=int, default=8, help="--speculative-num-draft-tokens")
    args = ap.parse_args()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(args.model_path)
    if args.dataset == "classeval":
        prompts = classeval_chat_prompts(tok, args.n, args.data_root)
    elif args.dataset == "reasoner-heldout":
        from bench_utils import reasoner_prompts, tokenize

        prompts = [r["input_ids"] for r in tokenize(reasoner_prompts(args.n), tok, None)]
    else:
        prompts = chat_prompts(tok, args.n)
    env = {"OMP_NUM_THREADS": "1", **({"SSR_CPU_EXACT_VERIFY": "1"} if args.exact else {})}
    from ssr_sglang.models.smollm2_reasoner.build import markers

    spec_env = markers(args.model_path) if args.method == "SSR" else {}  # {} unless a SmolLM2 reasoner
    common = ["--enable-fp32-lm-head"] if args.fp32_lm_head else []
    spec = ["--speculative-algorithm", args.method, "--speculative-num-draft-tokens", str(args.num_draft_tokens)]
    name = args.method.lower()
    outs, walls = {}, {}
    renames = None
    for label, extra in (("plain", []), (name, spec)):
        drafts = None
        if label != "plain" and args.client_drafts:
            if args.draft_edit == "rename":
                pairs = [renamed(o["output_ids"], tok) for o in outs["plain"]]
                drafts, renames = [d for d, _ in pairs], [r for _, r in pairs]
            else:
                drafts = [edited(o["output_ids"]) for o in outs["plain"]]
        custom = {"ssr_context": True} if label != "plain" and args.context else None
        with Server(cpu_server_args(args.model_path, *common, *extra), env={**env, **(spec_env if extra else {})}) as s:
            t = time.time()
            outs[label] = run(s.url, prompts, args.max_new_tokens, args.concurrency, top2=label == "plain",
                              drafts=drafts, custom=custom)
            walls[label] = time.time() - t
    diffs = first_differences(outs["plain"], outs[name])
    metas = [o["meta_info"].get("ssr") or {} for o in outs[name]]
    accepted = {k: sum(m.get(k, 0) or 0 for m in metas)
                for k in ("accepted_prefix", "accepted_suffix", "accepted_suffix_live", "accepted_suffix_done",
                          "accepted_suffix_answer", "accepted_suffix_context")}
    answer_tokens = sum(m.get("answer_tokens", 0) or 0 for m in metas)
    answer_steps = sum(m.get("answer_verify_steps", 0) or 0 for m in metas)
    sal = [o["meta_info"].get("spec_accept_length") for o in outs[name]]
    report = {"identical": len(prompts) - len(diffs), "prompts": len(prompts), "first_differences": diffs,
              "wall_s": {k: round(v, 1) for k, v in walls.items()}, "accepted": accepted,
              "tokens_per_verify_step": round(answer_tokens / answer_steps, 3) if answer_steps else None,
              "answer_tokens": answer_tokens, "answer_verify_steps": answer_steps,
              "spec_accept_length": sal,
              "spec_accept_length_mean": round(sum(x for x in sal if x) / max(1, sum(1 for x in sal if x)), 3),
              "renamed": renames, "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
              "date": time.strftime("%Y-%m-%d %H:%M")}
    print(json.dumps(report, indent=1))
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        from bench_utils import portable  # paths relative to the repository, not this machine's

        (Path(args.out) / "results.json").write_text(portable(json.dumps(report, indent=1)))


if __name__ == "__main__":
    main()
