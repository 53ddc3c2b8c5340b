"""SSR (Self-Speculation for Reasoning) as SGLang frontend programs.

Two ``@sgl.function`` programs; both return (as state variables) the answer, the reasoning and the
drafts:

* :func:`ssr_reasoning` -- generate the reasoning in segments up to each checkpoint; at each one,
  ``s.fork()`` a draft branch that appends the forced think end (``"\\n</think>\\n\\n"`` for
  Qwen3-style models) and generates a draft answer **while the main branch keeps reasoning** (each
  branch runs in its own stream-executor thread, so the two requests are in flight together);
  when the reasoning ends, generate the final answer with the drafts handed to that request.
* :func:`iterative_ssr` -- the same with checkpoints every ``every`` reasoning tokens (at most
  ``max_drafts``), and each later draft **seeded** with the earlier drafts: the draft request gets
  them as its own drafts, so it is verified against them (speculative) instead of decoded plainly.

With an SSR server (``--speculative-algorithm SSR``) the drafts go to the server per request as
``custom_params`` ``ssr_draft_<k>`` (token ids) and ``meta_info["ssr"]`` of the answer says what
its verifier accepted; with a stock server the answer is verified on the client, one prefill
request per step (``meta_info["client_verify"]``).  See ``programs/README.md``.

Run::

    python programs/ssr_program.py --url http://127.0.0.1:30000 --task-seed 3 --checkpoints 40,80
    python programs/ssr_program.py --url http://127.0.0.1:30000 --iterative --every 24 --max-drafts 3
    python programs/ssr_program.py --url http://127.0.0.1:30000 --prompt "Update the stock. ..."
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import List, Optional, Sequence

import sglang as sgl

try:
    from ssr_sglang.core.budgets import BudgetSchedule
    from ssr_sglang.core.think_markers import markers_for
    from ssr_sglang.frontend import SSREndpoint, ssr_gen
except ImportError:  # run from a checkout without installing the package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from ssr_sglang.core.budgets import BudgetSchedule
    from ssr_sglang.core.think_markers import markers_for
    from ssr_sglang.frontend import SSREndpoint, ssr_gen

_QWEN = markers_for("qwen3")


def _markers(s):
    return getattr(s.stream_executor.backend, "markers", _QWEN)


def _start_draft(d, prev_threads, prev_forks, seed: bool, max_tokens: int, temperature: float, errors: list):
    """Body of a draft branch's helper thread: wait for the earlier drafts when seeding, then generate."""
    try:
        seeds: List[List[int]] = []
        if seed:
            for t in prev_threads:
                t.join()
            seeds = [f.get_meta_info("draft")["output_ids"] for f in prev_forks]
        ssr_gen(d, "draft", drafts=seeds, max_tokens=max_tokens, temperature=temperature)
    except Exception as e:  # surfaced by the main branch
        errors.append(e)


def _ssr_body(s, prompt: str, checkpoints: Sequence[int], seed_drafts: bool, max_reasoning_tokens: int,
              draft_max_tokens: int, answer_max_tokens: int, temperature: float):
    m = _markers(s)
    s += prompt
    segments: List[str] = []
    seg_ids: List[int] = []
    seg_meta: List[dict] = []
    forks, threads, errors, fork_points = [], [], [], []
    used, ended = 0, False

    def reason(upto: int) -> None:
        nonlocal s, used, ended
        name = f"reasoning_{len(segments)}"
        s += sgl.gen(name, max_tokens=upto - used, stop=m.end, temperature=temperature)
        text, meta = _output(s, name)  # waits for this segment only; draft branches keep running
        segments.append(text)
        seg_ids.extend(meta["output_ids"])
        seg_meta.append(meta)
        used += meta["completion_tokens"]
        ended = m.end in text or meta["finish_reason"].get("type") != "length"

    for cp in sorted(set(int(c) for c in checkpoints)):
        if cp >= max_reasoning_tokens:
            break
        if cp <= used:
            continue
        reason(cp)
        if ended:
            break
        d = s.fork(1)[0]  # copies the text so far; the server's radix cache holds its KV
        d += m.force_answer
        t = threading.Thread(target=_start_draft, daemon=True,
                             args=(d, list(threads), list(forks), seed_drafts, draft_max_tokens, temperature, errors))
        t.start()
        forks.append(d)
        threads.append(t)
        fork_points.append(used)
    if not ended:
        reason(max_reasoning_tokens)
    forced = not ended
    if forced:  # thinking budget spent: end the reasoning the way a draft does
        s += m.force_answer
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    draft_ids = [f.get_meta_info("draft")["output_ids"] for f in forks]
    ssr_gen(s, "answer", drafts=draft_ids, max_tokens=answer_max_tokens, temperature=temperature)
    answer_meta = s.get_meta_info("answer")
    reasoning = "".join(segments)
    if m.end in reasoning:
        reasoning = reasoning[: reasoning.index(m.end)]
    s.set_var("reasoning", reasoning)
    s.set_var("reasoning_tokens", used)
    s.set_var("budget_forced", forced)
    s.set_var("drafts", [f["draft"] for f in forks])
    s.set_var("draft_ids", draft_ids)
    s.set_var("draft_meta", [f.get_meta_info("draft") for f in forks])
    s.set_var("fork_points", fork_points)
    s.set_var("segment_meta", seg_meta)
    s.set_var("output_ids", seg_ids + (list(answer_meta["prompt_ids"][-len(_force_ids(s)):]) if forced else [])
              + answer_meta["output_ids"])


def _output(s, name: str):
    """``s[name]`` and its meta info, or the error its request raised: SGLang's executor thread keeps that
    error (``s.error()``) and leaves the variable unset, which would read as a bare ``KeyError``."""
    try:
        return s[name], s.get_meta_info(name)
    except KeyError:
        ex = s.stream_executor
        if ex.use_thread:
            ex.worker.join(timeout=10.0)  # the executor records the error as its thread ends
        if ex.error_ is not None:
            raise RuntimeError(f"sgl.gen {name!r} failed: {ex.error_!r}") from ex.error_
        raise


def _force_ids(s) -> List[int]:
    be = s.stream_executor.backend
    return list(getattr(be, "force_ids", []))


@sgl.function
def ssr_reasoning(s, prompt, checkpoints=(48,), max_reasoning_tokens=1024, draft_max_tokens=256,
                  answer_max_tokens=512, temperature=0.0):
    """SSR: a draft answer forked at each reasoning checkpoint (token counts), then the answer."""
    _ssr_body(s, prompt, checkpoints, False, max_reasoning_tokens, draft_max_tokens, answer_max_tokens, temperature)


@sgl.function
def iterative_ssr(s, prompt, every=32, max_drafts=3, max_reasoning_tokens=1024, draft_max_tokens=256,
                  answer_max_tokens=512, temperature=0.0):
    """Iterative SSR: a draft every ``every`` reasoning tokens (at most ``max_drafts``), each later
    draft seeded with the earlier ones (as its own drafts)."""
    points = BudgetSchedule(every=every, max_drafts=max_drafts, draft_len=draft_max_tokens).checkpoints()
    _ssr_body(s, prompt, points, True, max_reasoning_tokens, draft_max_tokens, answer_max_tokens, temperature)


def result(state) -> dict:
    """The program's outcome as a plain dict."""
    answer_meta = state.get_meta_info("answer")
    return {
        "answer": state["answer"].strip(),
        "reasoning": state["reasoning"],
        "drafts": [d.strip() for d in state["drafts"]],
        "reasoning_tokens": state["reasoning_tokens"],
        "fork_points": state["fork_points"],
        "budget_forced": state["budget_forced"],
        "output_ids": state["output_ids"],
        "draft_ids": state["draft_ids"],
        "draft_cached_tokens": [m.get("cached_tokens") for m in state["draft_meta"]],
        "draft_prompt_tokens": [m.get("prompt_tokens") for m in state["draft_meta"]],
        "draft_ssr": [m.get("ssr") or m.get("client_verify") for m in state["draft_meta"]],
        "answer_ssr": answer_meta.get("ssr"),
        "answer_client_verify": answer_meta.get("client_verify"),
    }


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:30000")
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--prompt", help="user message (the server's chat template is applied)")
    src.add_argument("--task-seed", type=int, default=3,
                     help="a seeded task of the bundled tiny model (ssr_sglang.models.tasks); default 3")
    ap.add_argument("--checkpoints", default="48", help="comma-separated reasoning-token checkpoints")
    ap.add_argument("--iterative", action="store_true", help="iterative SSR: --every / --max-drafts, seeded drafts")
    ap.add_argument("--every", type=int, default=32)
    ap.add_argument("--max-drafts", type=int, default=3)
    ap.add_argument("--max-reasoning-tokens", type=int, default=1024)
    ap.add_argument("--draft-max-tokens", type=int, default=256)
    ap.add_argument("--answer-max-tokens", type=int, default=512)
    ap.add_argument("--mode", choices=["auto", "server", "client"], default="auto",
                    help="where drafts are verified (auto: server if it runs SSR, else client)")
    ap.add_argument("--json", action="store_true", help="print the full result as JSON")
    args = ap.parse_args(argv)

    backend = SSREndpoint(args.url, mode=args.mode)
    sgl.set_default_backend(backend)
    if args.prompt is not None:
        prompt = backend.chat_prompt([{"role": "user", "content": args.prompt}])
    else:
        import random

        from ssr_sglang.models.tasks import format_chat, make_example

        prompt = format_chat(str(make_example(random.Random(args.task_seed))["prompt"]))
    common = dict(max_reasoning_tokens=args.max_reasoning_tokens, draft_max_tokens=args.draft_max_tokens,
                  answer_max_tokens=args.answer_max_tokens, temperature=0.0)
    t0 = time.time()
    if args.iterative:
        state = iterative_ssr.run(prompt, every=args.every, max_drafts=args.max_drafts, **common)
    else:
        cps = [int(x) for x in args.checkpoints.split(",") if x.strip()]
        state = ssr_reasoning.run(prompt, checkpoints=cps, **common)
    out = result(state)
    out["seconds"] = round(time.time() - t0, 3)
    out["verified_on"] = backend.mode
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"# reasoning ({out['reasoning_tokens']} tokens)\n{out['reasoning']}\n")
    for i, d in enumerate(out["drafts"]):
        print(f"# draft {i} (prompt {out['draft_prompt_tokens'][i]} tokens, {out['draft_cached_tokens'][i]} cached)\n{d}\n")
    print(f"# answer\n{out['answer']}\n")
    stats = out["answer_ssr"] or out["answer_client_verify"]
    print(f"# verified on the {backend.mode}: {json.dumps(stats)}  ({out['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
