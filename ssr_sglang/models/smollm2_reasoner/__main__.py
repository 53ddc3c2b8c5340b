"""``python -m ssr_sglang.models.smollm2_reasoner build|distill|train|eval``.

* ``build`` (default): the reasoner folder under ``.cache/models/smollm2-reasoner`` from the base model and the
  committed adapter (cached; prints the folder).
* ``distill OUT.jsonl``: the self-distillation data (see :mod:`.distill`).
* ``train [DATA.jsonl] [ADAPTER]``: the LoRA from the data (default: the committed ``distill.jsonl``, written
  to the committed ``adapter.safetensors`` with its ``adapter.json``).
* ``eval [--n-code N --n-word N --out DIR]``: held-out think-close rate and answer quality, reasoner vs base.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _build(args) -> int:
    from ssr_sglang.models.smollm2_reasoner.build import BuildError, cached_reasoner

    try:
        print(cached_reasoner(Path(args.out) if args.out else None))
    except BuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def _train(args) -> int:
    import torch

    from ssr_sglang.models.smollm2_reasoner import build, train

    torch.set_num_threads(args.threads)
    adapter = Path(args.adapter)
    tmp = adapter.with_name(adapter.name + ".part")
    info = train.train(Path(args.data), tmp, **({} if args.epochs is None else {"epochs": args.epochs}))
    tmp.replace(adapter)
    info.update({"data": Path(args.data).name, "sha256": build.sha256(adapter)})
    adapter.with_suffix(".json").write_text(json.dumps(info, indent=1) + "\n")
    print(json.dumps(info))
    return 0


def _eval(args) -> int:
    import torch

    from ssr_sglang.models.smollm2_reasoner import evaluate
    from ssr_sglang.models.smollm2_reasoner.build import cached_reasoner
    from ssr_sglang.testing.smollm2 import cached_smollm2

    torch.set_num_threads(args.threads)
    tasks = evaluate.held_out_tasks(args.n_code, args.n_word, args.offset, args.n_classeval, args.classeval)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {}
    for name, folder, reasoner in (("reasoner", cached_reasoner(), True), ("base", cached_smollm2(), False)):
        if (name == "base" and args.skip_base) or (name == "reasoner" and args.skip_reasoner):
            continue
        def save(rows, name=name):
            result[name] = {"summary": evaluate.summary(rows), "rows": rows}
            (out / "eval.json").write_text(json.dumps(result, indent=1))

        save(evaluate.run(folder, tasks, reasoner, answer_budget=args.answer_budget, progress=save))
        print(name, json.dumps(result[name]["summary"]))
    return 0


def _score(args) -> int:
    """Pass@1 of the ClassEval answers in a ``benchmarks/latency.py`` results file, per method (SGLang's own
    outputs: a served model scored without a second, slower generation)."""
    from ssr_sglang.models.smollm2_reasoner import classeval, evaluate

    rows = {r["task_id"]: r for r in classeval.load(Path(args.classeval))}
    results = json.loads(Path(args.results).read_text())["results"]
    out = {}
    for method, samples in results.items():
        scored = [(s["id"], evaluate.passes_classeval(rows[s["id"]], s["text"].split(evaluate.THINK_END, 1)[-1]))
                  for s in samples if s.get("id") in rows]
        out[method] = {"passed": sum(ok for _, ok in scored), "tasks": len(scored),
                       "passed_ids": [i for i, ok in scored if ok]}
    print(json.dumps(out, indent=1))
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m ssr_sglang.models.smollm2_reasoner", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd")
    b = sub.add_parser("build")
    b.add_argument("--out", default=None)
    d = sub.add_parser("distill")
    d.add_argument("out")
    d.add_argument("rest", nargs=argparse.REMAINDER, help="--code-limit N --word-problems N")
    t = sub.add_parser("train")
    t.add_argument("data", nargs="?", default=str(HERE / "distill.jsonl"))
    t.add_argument("adapter", nargs="?", default=str(HERE / "adapter.safetensors"))
    t.add_argument("--epochs", type=int, default=None, help="default: train.train's (the committed adapter's)")
    t.add_argument("--threads", type=int, default=1)
    e = sub.add_parser("eval")
    e.add_argument("--n-code", type=int, default=20)
    e.add_argument("--n-word", type=int, default=20)
    e.add_argument("--n-classeval", type=int, default=0, help="also the first N held-out ClassEval tasks")
    e.add_argument("--classeval", default=str(HERE.parents[2].parent / "shared/data/classeval/ClassEval_data.json"),
                   help="ClassEval_data.json (default: ../shared/data/classeval/ beside the repository)")
    e.add_argument("--out", default="benchmarks/results/smollm2-reasoner-eval")
    e.add_argument("--threads", type=int, default=1)
    e.add_argument("--answer-budget", type=int, default=320, help="answer tokens after the think block "
                                                                 "(a ClassEval class needs about 800)")
    e.add_argument("--skip-base", action="store_true")
    e.add_argument("--skip-reasoner", action="store_true")
    e.add_argument("--offset", type=int, default=0, help="skip the first N held-out prompts of each kind (the main "
                                                         "job's --warmup: its timed tasks start there)")
    s = sub.add_parser("score", help="pass@1 of the ClassEval answers in a benchmarks/latency.py results.json")
    s.add_argument("results")
    s.add_argument("--classeval", default=str(HERE.parents[2].parent / "shared/data/classeval/ClassEval_data.json"),
                   help="ClassEval_data.json (default: ../shared/data/classeval/ beside the repository)")
    args = p.parse_args(argv)
    if args.cmd == "score":
        return _score(args)
    if args.cmd == "distill":
        from ssr_sglang.models.smollm2_reasoner import distill

        return distill.main([args.out, *args.rest])
    if args.cmd == "train":
        return _train(args)
    if args.cmd == "eval":
        return _eval(args)
    if args.cmd in (None, "build"):
        return _build(args if args.cmd else argparse.Namespace(out=None))
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
