"""Acceptance of SSR drafts on real code: ClassEval solutions, controlled drafts.

The final answers are ClassEval ``solution_code`` files, tokenized with a real
byte-level BPE tokenizer (the bundled model's, 429 tokens; no larger
tokenizer is available offline here). The drafts are *controlled*: each is
the answer with the kinds of difference the paper describes applied by
``ast``/regex edit operators to a fraction of the class's methods:

* ``rename``: the selected methods are renamed consistently everywhere in the
  file (``get_x`` -> ``fetch_x`` ...), and one local variable per method too;
* ``docstring``: the class docstring is replaced (inserted if absent) and the
  selected methods get a different one-line docstring;
* ``reorder``: the selected methods change places (a rotation);
* ``drop``: the selected methods are missing from the draft;
* ``wrong_line``: a wrong statement is inserted as the first body line of the
  selected methods;
* ``mixed``: all of the above, each on its own random selection.

Rates are the fraction of methods affected (at least one method for a rate
> 0). Every (task, operator, rate) is replayed with
``ssr_sglang.core.simulator.simulate`` (greedy chain verification, oracle
target = the answer) for prefix-only, suffix-only and both, at 8 and 16
verify nodes (``max_tokens = num_nodes - 1``). Reported: mean tokens per
verify step (1.0 = plain decoding) and the % of answer tokens accepted via
the prefix and the suffix path. These are controlled, synthetic drafts of
real code, not drafts written by a model.

``--tree`` replays with tree proposals (``propose_tree``, as the server
verifies) instead of chains. ``--baseline REV`` also replays every case with
the core as it was at git revision ``REV`` (its files loaded under another
package name, in the same process), so rows ``mode@REV`` sit beside today's.
``--context`` adds the mode ``both+ctx``: both, with the task's prompt (its
ClassEval ``skeleton``: the class, signatures and docstrings the solution
repeats) as a lower-priority reference source, as the server's
``ssr_context`` does with the prompt and the reasoning.

Usage: python benchmarks/bench_acceptance.py [--limit 40] [--rates 0,0.1,0.3]
       [--nodes 8,16] [--ops rename,docstring,reorder,drop,wrong_line,mixed] [--tree]
       [--baseline HEAD~3] [--context] [--out r.json]
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ssr_sglang.core import ProposerConfig  # noqa: E402
from ssr_sglang.core.simulator import simulate  # noqa: E402

DATA = REPO.parent / "shared" / "data" / "classeval" / "ClassEval_data.json"
OPS = ("rename", "docstring", "reorder", "drop", "wrong_line", "mixed")
MODES = {"prefix": dict(use_prefix=True, use_suffix=False),
         "suffix": dict(use_prefix=False, use_suffix=True),
         "both": dict(use_prefix=True, use_suffix=True)}
SYNONYMS = {"get": "fetch", "set": "update", "add": "insert", "remove": "delete", "is": "check",
            "calculate": "compute", "check": "verify", "find": "search", "create": "make",
            "delete": "remove", "update": "modify", "count": "tally", "read": "load",
            "write": "save", "parse": "decode", "process": "handle", "show": "display"}


# ---------------------------------------------------------------- edit operators
class Source:
    """The solution split into header / method chunks / tail (by source lines)."""

    def __init__(self, code: str):
        self.code = code
        tree = ast.parse(code)
        cls = next(n for n in tree.body if isinstance(n, ast.ClassDef))
        self.cls = cls
        lines = code.splitlines(keepends=True)
        funcs = [n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        starts = [min([n.lineno] + [d.lineno for d in n.decorator_list]) - 1 for n in funcs]
        end = cls.end_lineno
        self.header = "".join(lines[:starts[0]]) if funcs else "".join(lines[:end])
        self.methods = []  # (name, node, text)
        for i, n in enumerate(funcs):
            stop = starts[i + 1] if i + 1 < len(funcs) else end
            text = "".join(lines[starts[i]:stop])
            if i + 1 == len(funcs) and not text.endswith("\n"):
                text += "\n"
            self.methods.append([n.name, n, text, starts[i]])
        self.tail = "".join(lines[end:]) if funcs else ""

    def render(self) -> str:
        return self.header + "".join(m[2] for m in self.methods) + self.tail


def _pick(n: int, rate: float, rng: random.Random, exclude_init: bool = False) -> list:
    pool = list(range(n))
    if rate <= 0 or not pool:
        return []
    k = min(len(pool), max(1, round(rate * len(pool))))
    return sorted(rng.sample(pool, k))


def _new_name(name: str) -> str:
    parts = name.split("_")
    lead = [p for p in parts if p]
    if not lead:
        return name + "_renamed"
    head = lead[0]
    new = SYNONYMS.get(head.lower())
    if new is None:
        return name.replace(head, "do_" + head, 1)
    return name.replace(head, new, 1)


def op_rename(src: Source, rate: float, rng: random.Random) -> None:
    sel = [i for i in _pick(len(src.methods), rate, rng) if not src.methods[i][0].startswith("__")]
    renames = {}
    for i in sel:
        name, node, text, _ = src.methods[i]
        renames[name] = _new_name(name)
        # one local variable of the method, renamed inside the method only
        args = {a.arg for a in node.args.args}
        local = next((t.id for t in ast.walk(node) if isinstance(t, ast.Name)
                      and isinstance(t.ctx, ast.Store) and t.id not in args), None)
        if local:
            src.methods[i][2] = re.sub(rf"\b{re.escape(local)}\b", local + "_value", text)
    for old, new in renames.items():
        pat = re.compile(rf"\b{re.escape(old)}\b")
        src.header = pat.sub(new, src.header)
        src.tail = pat.sub(new, src.tail)
        for m in src.methods:
            m[2] = pat.sub(new, m[2])


def op_docstring(src: Source, rate: float, rng: random.Random) -> None:
    if rate <= 0:
        return
    new_doc = f'    """Draft of {src.cls.name}: a helper class written before the final answer."""\n'
    lines = src.header.splitlines(keepends=True)
    cls_line = src.cls.lineno - 1
    doc = ast.get_docstring(src.cls, clean=False)
    first = src.cls.body[0]
    if doc is not None and first.end_lineno - 1 < len(lines):
        lines[first.lineno - 1:first.end_lineno] = [new_doc]
    else:
        # the class header may span lines; insert after the line ending with ':'
        k = cls_line
        while k < len(lines) and not lines[k].rstrip().endswith(":"):
            k += 1
        lines.insert(k + 1, new_doc)
    src.header = "".join(lines)
    for i in _pick(len(src.methods), rate, rng):
        name, node, text, start = src.methods[i]
        mlines = text.splitlines(keepends=True)
        body0 = node.body[0]
        indent = " " * body0.col_offset
        line = f'{indent}"""{name.replace("_", " ").strip().capitalize()} (draft)."""\n'
        rel = body0.lineno - 1 - start
        is_doc = isinstance(body0, ast.Expr) and isinstance(getattr(body0, "value", None), ast.Constant) \
            and isinstance(body0.value.value, str)
        if is_doc:
            mlines[rel:body0.end_lineno - start] = [line]
        else:
            mlines.insert(rel, line)
        src.methods[i][2] = "".join(mlines)


def op_reorder(src: Source, rate: float, rng: random.Random) -> None:
    sel = _pick(len(src.methods), max(rate, 0), rng)
    if rate > 0 and len(sel) < 2 and len(src.methods) >= 2:  # moving one method needs a partner
        sel = sorted(set(sel) | {rng.choice([i for i in range(len(src.methods)) if i not in sel])})
    if len(sel) < 2:
        return
    moved = [src.methods[i] for i in sel]
    moved = moved[1:] + moved[:1]
    for i, m in zip(sel, moved):
        src.methods[i] = m


def op_drop(src: Source, rate: float, rng: random.Random) -> None:
    sel = set(_pick(len(src.methods), rate, rng))
    if len(sel) >= len(src.methods):
        sel = set(list(sel)[:-1])
    src.methods = [m for i, m in enumerate(src.methods) if i not in sel]


def op_wrong_line(src: Source, rate: float, rng: random.Random) -> None:
    for i in _pick(len(src.methods), rate, rng):
        name, node, text, start = src.methods[i]
        body0 = node.body[0]
        mlines = text.splitlines(keepends=True)
        indent = " " * body0.col_offset
        rel = body0.lineno - 1 - start
        mlines.insert(rel, f"{indent}result = self.{name.strip('_')}_cache.get(None, [])\n")
        src.methods[i][2] = "".join(mlines)


OPERATORS = {"rename": op_rename, "docstring": op_docstring, "reorder": op_reorder,
             "drop": op_drop, "wrong_line": op_wrong_line}


def make_draft(code: str, op: str, rate: float, seed: int) -> str:
    src = Source(code)
    rng = random.Random(seed)
    if op == "mixed":
        # renames first (they touch the whole file), layout changes last
        for name in ("rename", "docstring", "wrong_line", "drop", "reorder"):
            OPERATORS[name](src, rate, rng)
    else:
        OPERATORS[op](src, rate, rng)
    return src.render()


# ---------------------------------------------------------------- benchmark
def load_tokenizer():
    from transformers import AutoTokenizer

    from ssr_sglang.models import bundled_model_path

    path = bundled_model_path()
    tok = AutoTokenizer.from_pretrained(path)
    return tok, f"bundled model tokenizer ({Path(path).name}, byte-level BPE, {len(tok)} tokens)"


def load_baseline(rev: str):
    """``(ProposerConfig, simulate)`` of the core at git revision ``rev`` (``core_baseline.load_core``)."""
    from core_baseline import load_core

    core = load_core(rev)
    return core.ProposerConfig, core.simulate


def run(limit: int, rates, nodes, ops, seed: int = 0, data: Path = DATA, tree: bool = False,
        baseline: str = "", context: bool = False):
    tasks = json.loads(Path(data).read_text())[:limit]
    tok, tok_name = load_tokenizer()

    def enc(s: str) -> list:
        return tok.encode(s, add_special_tokens=False)

    impls = [("", ProposerConfig, simulate)]
    if baseline:
        impls.append(("@" + baseline, *load_baseline(baseline)))
    modes = dict(MODES)
    if context:
        modes["both+ctx"] = dict(use_prefix=True, use_suffix=True)
    agg: dict = {}
    answer_tokens = 0
    t0 = time.perf_counter()
    for ti, task in enumerate(tasks):
        code = task["solution_code"]
        answer = enc(code)
        answer_tokens += len(answer)
        prompt = enc(task["skeleton"]) if context else []
        for op in ops:
            for rate in rates:
                if rate == 0 and op != ops[0]:
                    continue  # the unedited draft is the same for every operator
                draft = enc(make_draft(code, op, rate, seed * 100003 + ti)) if rate > 0 else list(answer)
                for nn in nodes:
                    for mode, flags in modes.items():
                        for tag, config_cls, sim in impls:
                            cfg = config_cls(max_tokens=max(1, nn - 1), **flags)
                            refs = [prompt] if mode.endswith("+ctx") else []
                            rep = sim(answer, [draft], cfg, num_nodes=nn, tree=tree, references=refs)
                            key = ("none" if rate == 0 else op, rate, nn, mode + tag)
                            a = agg.setdefault(key, [0, 0, 0, 0, 0])
                            a[0] += rep.plain_steps
                            a[1] += rep.steps
                            a[2] += rep.accepted_prefix
                            a[3] += rep.accepted_suffix
                            a[4] += 1
    rows = []
    for (op, rate, nn, mode), (plain, steps, ap, asf, n) in agg.items():
        rows.append({"op": op, "rate": rate, "num_nodes": nn, "mode": mode, "tasks": n,
                     "tokens_per_step": plain / steps if steps else 0.0,
                     "pct_prefix": 100.0 * ap / plain if plain else 0.0,
                     "pct_suffix": 100.0 * asf / plain if plain else 0.0})
    meta = {"tokenizer": tok_name, "tasks": len(tasks), "answer_tokens": answer_tokens,
            "data": str(data), "rates": list(rates), "nodes": list(nodes), "ops": list(ops),
            "seed": seed, "seconds": time.perf_counter() - t0, "tree": tree, "baseline": baseline,
            "context": context, "modes": [m + tag for tag, _, _ in impls for m in modes],
            "note": "controlled drafts: ClassEval solution_code edited by ast/regex operators; "
                    "tokens_per_step = answer tokens / verify steps (chain, oracle greedy target)"}
    return {"meta": meta, "rows": rows}


def markdown(res: dict) -> str:
    rows = res["rows"]
    nodes = res["meta"]["nodes"]
    out = [f"Controlled drafts of ClassEval solutions ({res['meta']['tasks']} tasks, "
           f"{res['meta']['answer_tokens']} answer tokens; tokenizer: {res['meta']['tokenizer']}).",
           "Cells: tokens per verify step (% of tokens via prefix / suffix).", ""]
    modes = res["meta"]["modes"]
    hdr = ["op", "rate"] + [f"{m} n={nn}" for nn in nodes for m in modes]
    out.append("| " + " | ".join(hdr) + " |")
    out.append("|" + "---|" * len(hdr))
    idx = {(r["op"], r["rate"], r["num_nodes"], r["mode"]): r for r in rows}
    for op, rate in dict.fromkeys((r["op"], r["rate"]) for r in rows):
        cells = []
        for nn in nodes:
            for m in modes:
                r = idx[(op, rate, nn, m)]
                cells.append(f"{r['tokens_per_step']:.2f} ({r['pct_prefix']:.0f}/{r['pct_suffix']:.0f})")
        out.append(f"| {op} | {rate:g} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=40, help="number of ClassEval tasks")
    ap.add_argument("--rates", default="0,0.1,0.3")
    ap.add_argument("--nodes", default="8,16")
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--tree", action="store_true", help="tree proposals (as the server verifies), not chains")
    ap.add_argument("--baseline", default="", help="also replay with the core at this git revision")
    ap.add_argument("--context", action="store_true",
                    help="also mode both+ctx: the task's skeleton (its prompt) as a reference source")
    ap.add_argument("--out", type=Path, default=None, help="write JSON results here")
    args = ap.parse_args()
    ops = [o for o in args.ops.split(",") if o]
    for o in ops:
        if o not in OPS:
            ap.error(f"unknown op {o!r}; choose from {', '.join(OPS)}")
    res = run(args.limit, [float(r) for r in args.rates.split(",")], [int(n) for n in args.nodes.split(",")],
              ops, args.seed, args.data, args.tree, args.baseline, args.context)
    print(markdown(res))
    print(f"\n({res['meta']['seconds']:.1f} s)")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(res, indent=2))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
