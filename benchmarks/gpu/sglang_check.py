"""SGLang + SSR on a CUDA GPU in one run: exactness, sampled verify, step costs, a hybrid checkpoint.

Run by ``benchmarks/gpu/run_check.sh`` on the lent H200 after it unpacked the bundle
(``benchmarks/gpu/bundle.py``); every phase runs real SGLang servers (``sglang.launch_server``) with
``--attention-backend triton --sampling-backend pytorch``. Writes ``results.json`` (rewritten after
every phase, so a run cut short keeps what it measured) and the servers' logs to ``--out``.

Phases (each skipped once the ``--deadline-s`` budget is spent):

* ``exactness``: the bundled dense and hybrid reasoners, plain / NGRAM / SSR (a fixed draft schedule,
  so drafts fork mid-decode; and SSR's default policy on the dense model), overlap scheduling on and
  off, CUDA graphs on; 8 tasks one at a time and 16 concurrent; token ids compared with plain's.
* ``sampled``: temperature 0.6 / top-p 0.95 on plain and SSR (dense); the outputs' agreement with greedy
  and their distribution per task, or the error that sampled verify gives on this stack.
* ``cost``: dummy weights with Qwen3-8B's shapes at contexts 2k/8k/32k: plain decode step, the step of
  B sequences sharing the context (what B-1 drafts beside a reasoning request cost), a fork's prefill
  (a few tokens on a cached context), NGRAM's step and accept length, SSR's with a client draft equal
  to plain's output, and SSR reasoning with a fixed draft schedule against NGRAM's; SSR's own
  per-step host time from ``/server_info``.

Servers start one at a time (each sizes its KV pool from the GPU memory free when it starts) and their
workloads run while the next one starts.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import random
import shutil
import sys
import time
import traceback
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from ssr_sglang.models import tasks  # noqa: E402
from ssr_sglang.testing.server import Server  # noqa: E402

DENSE = ROOT / "ssr_sglang" / "models" / "tiny-reasoner"
HYBRID = ROOT / "ssr_sglang" / "models" / "tiny-hybrid-reasoner"
QWEN3_8B_CONFIG = ROOT / "benchmarks" / "gpu" / "qwen3-8b-config.json"
GPU_ENV = {"SGLANG_USE_CPU_ENGINE": "0", "OMP_NUM_THREADS": "4"}
COMMON = ["--attention-backend", "triton", "--sampling-backend", "pytorch", "--dtype", "bfloat16",
          "--skip-server-warmup", "--log-level", "warning", "--random-seed", "0", "--sleep-on-idle"]
# A fixed schedule that always drafts: forks at these reasoning lengths, each draft capped.
SSR_FIXED = {"SSR_POLICY": "fixed", "SSR_CHECKPOINTS": "16,48,96", "SSR_MAX_DRAFT_TOKENS": "96"}

RESULTS: dict = {}
T0 = time.time()


def log(*a) -> None:
    print(f"[{time.time() - T0:6.1f}s]", *a, flush=True)


def save(out: Path) -> None:
    (out / "results.json").write_text(json.dumps(RESULTS, indent=1, default=str))


SMOKE = False  # --smoke: the same code on this machine's CPU engine, tiny configs (tests and rehearsal)
CPU_COMMON = ["--device", "cpu", "--dtype", "bfloat16", "--max-total-tokens", "8192", "--sleep-on-idle",
              "--skip-server-warmup", "--log-level", "warning", "--random-seed", "0"]


def start(name: str, model: Path, extra: list, env: dict, out: Path, max_tokens: int) -> Server:
    """Start one server; many start at once, so each pool is capped (``--max-total-tokens``) and the static
    fraction is high enough that the memory the others take while it profiles never leaves it short."""
    common = CPU_COMMON if SMOKE else COMMON + ["--mem-fraction-static", "0.85"]
    if SMOKE and "--cuda-graph-max-bs-decode" in extra:
        i = extra.index("--cuda-graph-max-bs-decode")
        extra = extra[:i] + extra[i + 2:]
    args = ["--model-path", str(model), *common, "--max-total-tokens", str(max_tokens), *extra]
    base_env = {"SGLANG_USE_CPU_ENGINE": "1", "OMP_NUM_THREADS": "1"} if SMOKE else GPU_ENV
    s = Server(args, env={**base_env, **env}, log_path=str(out / "logs" / f"{name}.log"), timeout=420)
    t = time.time()
    s.start()
    log(f"server {name} up in {time.time() - t:.1f}s")
    RESULTS.setdefault("server_start_s", {})[name] = round(time.time() - t, 1)
    return s


def start_all(specs: list, out: Path) -> tuple:
    """Start every ``(name, model, extra, env, max_tokens)`` at once; returns (servers, start errors)."""
    servers, errors = {}, {}

    def one(spec):
        name = spec[0]
        try:
            servers[name] = start(*spec[:4], out, spec[4])
        except Exception as e:
            errors[name] = f"start failed: {str(e)[-2500:]}"
            log(f"{name}: start failed: {str(e)[-1200:]}")

    with cf.ThreadPoolExecutor(len(specs) or 1) as pool:
        list(pool.map(one, specs))
    return servers, errors


def generate(s: Server, ids, max_new: int, temperature: float = 0.0, **extra) -> dict:
    sp = {"max_new_tokens": max_new, "temperature": temperature, **extra.pop("sampling", {})}
    body = {"input_ids": list(ids), "sampling_params": sp, **extra}
    r = requests.post(s.url + "/generate", json=body, timeout=600)
    if r.status_code != 200:
        raise RuntimeError(f"HTTP {r.status_code}: {r.text[:400]}")
    return r.json()


def ssr_state(s: Server) -> dict:
    try:
        states = s.server_info().get("internal_states") or [{}]
        return states[0].get("ssr", {})
    except Exception as e:  # the plain and NGRAM servers have none
        return {"error": repr(e)}


def _meta(m: dict) -> dict:
    keep = ("completion_tokens", "spec_verify_ct", "spec_accept_length", "spec_accept_rate", "ssr", "e2e_latency")
    return {k: m[k] for k in keep if k in m}


# ---------------------------------------------------------------- exactness
def task_prompts(model: Path, n: int = 16) -> list:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model))
    rng = random.Random(20261204)
    return [tok(tasks.format_chat(str(tasks.make_example(rng)["prompt"])), add_special_tokens=False).input_ids
            for _ in range(n)]


def exactness_workload(s: Server, prompts: list, max_new: int) -> dict:
    t = time.time()
    b1 = [generate(s, p, max_new) for p in prompts[:8]]
    b1_s = time.time() - t
    t = time.time()
    with cf.ThreadPoolExecutor(16) as pool:
        conc = list(pool.map(lambda p: generate(s, p, max_new), prompts))
    conc_s = time.time() - t
    load = s.wait_idle(30.0)
    return {"b1": [o["output_ids"] for o in b1], "conc": [o["output_ids"] for o in conc],
            "b1_meta": [_meta(o["meta_info"]) for o in b1], "conc_meta": [_meta(o["meta_info"]) for o in conc],
            "b1_s": round(b1_s, 3), "conc_s": round(conc_s, 3), "idle_load": load, "ssr_state": ssr_state(s)}


def exactness_configs() -> list:
    """(name, model, extra args, env): plain with overlap (SGLang's CUDA default) is the reference."""
    ssr, ngram, noov = ["--speculative-algorithm", "SSR"], ["--speculative-algorithm", "NGRAM"], \
        ["--disable-overlap-schedule"]
    out = [("dense-plain-ov", DENSE, [], {}), ("dense-ngram-ov", DENSE, ngram, {}),
           ("dense-ssrfixed-ov", DENSE, ssr, SSR_FIXED), ("dense-ssrfixed-noov", DENSE, ssr + noov, SSR_FIXED),
           ("dense-ssr-ov", DENSE, ssr, {}),
           ("hybrid-plain-ov", HYBRID, [], {}), ("hybrid-ssrfixed-ov", HYBRID, ssr, SSR_FIXED),
           ("hybrid-ssrfixed-noov", HYBRID, ssr + noov, SSR_FIXED)]
    if SMOKE:  # CPU: overlap is off for speculative servers and hybrid needs other flags; a few configs
        out = [c for c in out if c[0] in ("dense-plain-ov", "dense-ssrfixed-noov")]
    return out


def exactness_specs() -> list:
    return [(n, m, ["--cuda-graph-max-bs-decode", "16", "--max-running-requests", "16", *a], e, 65536)
            for n, m, a, e in exactness_configs()]


def compare(runs: dict) -> dict:
    """Per config: prompts whose outputs equal plain's (same model, overlap on), one at a time and concurrent."""
    table = {}
    for name, r in runs.items():
        if "error" in r:
            table[name] = {"error": r["error"][-300:]}
            continue
        model = name.split("-")[0]
        ref = runs.get(f"{model}-plain-ov")
        if not ref or "error" in ref:
            continue
        row = {"b1_identical": sum(a == b for a, b in zip(r["b1"], ref["b1"])), "b1_n": len(r["b1"]),
               "conc_identical": sum(a == b for a, b in zip(r["conc"], ref["conc"])), "conc_n": len(r["conc"]),
               "conc_identical_to_b1": sum(a == b for a, b in zip(r["conc"][:8], ref["b1"])),
               "b1_s": r["b1_s"], "conc_s": r["conc_s"],
               "tokens_b1": sum(len(o) for o in r["b1"]), "kv_left": r["idle_load"].get("num_used_tokens")}
        ssr = [m.get("ssr") or {} for m in r["b1_meta"] + r["conc_meta"]]
        if any(ssr):
            row["drafts_started"] = sum(m.get("drafts_started", 0) for m in ssr)
            row["accepted_from_drafts"] = sum(m.get("accepted_prefix", 0) + m.get("accepted_suffix", 0) for m in ssr)
        vc = [m.get("spec_verify_ct") for m in r["b1_meta"] if m.get("spec_verify_ct")]
        if vc:
            row["b1_tokens_per_step"] = round(row["tokens_b1"] / sum(vc), 3)
        table[name] = row
    return table


def phase_exactness(servers: dict, errors: dict, out: Path, deadline: float) -> None:
    prompts = {"dense": task_prompts(DENSE), "hybrid": task_prompts(HYBRID)}
    runs = {n: {"error": e} for n, e in errors.items()}
    with cf.ThreadPoolExecutor(16) as pool:
        futures = {n: pool.submit(exactness_workload, s, prompts[n.split("-")[0]], 320)
                   for n, s in servers.items() if n.startswith(("dense-", "hybrid-"))}
        for name, f in futures.items():
            try:
                runs[name] = f.result(timeout=max(10.0, deadline - time.time()))
            except Exception as e:
                runs[name] = {"error": f"{type(e).__name__}: {e}\n{traceback.format_exc()[-800:]}"}
                log(f"{name}: workload failed: {e}")
    RESULTS["exactness"] = compare(runs)
    RESULTS["exactness_outputs"] = {k: {"b1": v.get("b1"), "ssr_state": v.get("ssr_state")} for k, v in runs.items()}
    log("exactness: " + json.dumps(RESULTS["exactness"])[:3000])
    save(out)
    phase_sampled(servers.get("dense-plain-ov"), servers.get("dense-ssrfixed-ov"), prompts["dense"], out)


# ---------------------------------------------------------------- sampled
def phase_sampled(plain: Server, ssr: Server, prompts: list, out: Path, n_tasks: int = 4, k: int = 4) -> None:
    if plain is None or ssr is None:
        RESULTS["sampled"] = {"error": "servers missing"}
        return
    greedy = RESULTS.get("exactness_outputs", {}).get("dense-plain-ov", {}).get("b1") or []
    sp = {"top_p": 0.95}

    def run(s: Server) -> dict:
        outs, err = [], None
        try:
            for i, p in enumerate(prompts[:n_tasks]):
                outs.append([generate(s, p, 320, temperature=0.6, sampling=dict(sp, sampling_seed=1000 * i + j))
                             ["output_ids"] for j in range(k)])
        except Exception as e:
            err = f"{type(e).__name__}: {str(e)[:600]}"
        return {"error": err, "server_alive": s.proc.poll() is None, "samples": outs,
                "identical_to_greedy": sum(o == greedy[i] for i, row in enumerate(outs) for o in row
                                           if i < len(greedy)), "n": sum(len(r) for r in outs)}

    with cf.ThreadPoolExecutor(2) as pool:
        res = dict(zip(("plain", "ssr"), pool.map(run, (plain, ssr))))
    if not res["plain"]["error"] and not res["ssr"]["error"]:
        tv = []
        for a, b in zip(res["plain"]["samples"], res["ssr"]["samples"]):
            keys = {tuple(x) for x in a} | {tuple(x) for x in b}
            tv.append(0.5 * sum(abs(a.count(list(kk)) - b.count(list(kk))) / k for kk in keys))
        res["tv_per_task"] = [round(x, 3) for x in tv]
    RESULTS["sampled"] = {n: {kk: v for kk, v in r.items() if kk != "samples"} if isinstance(r, dict) else r
                          for n, r in res.items()}
    save(out)


# ---------------------------------------------------------------- cost
def dummy_model_dir() -> Path:
    d = Path(os.environ.get("TMPDIR", "/tmp")) / "qwen3-8b-dummy"
    d.mkdir(exist_ok=True)
    shutil.copy(QWEN3_8B_CONFIG, d / "config.json")
    for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(DENSE / f, d / f)
    return d


def timed(s: Server, ids, max_new: int, **extra) -> tuple:
    t = time.perf_counter()
    o = generate(s, ids, max_new, sampling={"ignore_eos": True}, **extra)
    return time.perf_counter() - t, o


def rand_ids(rng: random.Random, n: int, head=()) -> list:
    return list(head) + [rng.randrange(10, 420) for _ in range(n - len(head))]


def cost_plain(s: Server, L: int, rng: random.Random, n: int = 64) -> dict:
    row = {}
    t1, _ = timed(s, rand_ids(rng, L), 1)
    tn, o = timed(s, rand_ids(rng, L), n + 1)
    row["prefill_s"] = round(t1, 4)
    row["decode_step_ms"] = round(1000 * (tn - t1) / n, 3)
    base = rand_ids(rng, L)
    timed(s, base, 1)  # cache the context
    tf, _ = timed(s, base + rand_ids(rng, 4), 1)
    row["fork_prefill_s"] = round(tf, 4)  # 4 new tokens on a cached context (what a draft's fork runs)
    for b in (2, 3, 5):
        ctx = rand_ids(rng, L)
        timed(s, ctx, 1)
        with cf.ThreadPoolExecutor(b) as pool:
            t = time.perf_counter()
            list(pool.map(lambda i: timed(s, ctx + [11 + i], 1), range(b)))
            tb1 = time.perf_counter() - t
            t = time.perf_counter()
            list(pool.map(lambda i: timed(s, ctx + [11 + i], n + 1), range(b)))
            tbn = time.perf_counter() - t
        row[f"step_ms_{b}_seqs"] = round(1000 * (tbn - tb1) / n, 3)
    return row


def _draft_row(o: dict, total: float, prefill: float, n: int, **flags) -> dict:
    steps = max(1, o["meta_info"].get("spec_verify_ct", n))
    return {**flags, "total_s": round(total, 4), "verify_steps": steps,
            "tokens_per_step": round((n + 1) / steps, 3), "step_ms": round(1000 * (total - prefill) / steps, 3)}


def cost_spec(s: Server, L: int, rng: random.Random, plain: Server, n: int = 64, think: bool = False) -> dict:
    """Step time and accepted tokens per step: no draft (n-gram proposals), and (SSR) a client draft equal to
    plain's output; with ``think`` the prompt opens a think block so SSR's schedule forks drafts."""
    head = DUMMY_THINK_HEAD if think else ()
    row = {}
    ids = rand_ids(rng, L, head)
    t1, _ = timed(s, ids, 1)
    ids = rand_ids(rng, L, head)
    tn, o = timed(s, ids, n + 1)
    m = o["meta_info"]
    row.update(step_ms=round(1000 * (tn - t1) / max(1, m.get("spec_verify_ct", n)), 3),
               tokens_per_step=round((n + 1) / max(1, m.get("spec_verify_ct", n)), 3), total_s=round(tn, 4),
               ssr=(m.get("ssr") or {}))
    if plain is not None and not think:
        q = rand_ids(rng, L)
        ref = generate(plain, q, n + 1, sampling={"ignore_eos": True})["output_ids"]
        t = time.perf_counter()
        oq = generate(s, q, n + 1, sampling={"ignore_eos": True, "custom_params": {"ssr_draft": ref}})
        tq = time.perf_counter() - t
        row["client_draft"] = _draft_row(oq, tq, t1, n, identical_to_plain=oq["output_ids"] == ref)
        if oq["output_ids"] != ref:  # dummy weights are full of near-ties: draft with SSR's own output too
            t = time.perf_counter()
            own = generate(s, q, n + 1, sampling={"ignore_eos": True, "custom_params": {"ssr_draft": oq["output_ids"]}})
            row["client_draft_own"] = _draft_row(own, time.perf_counter() - t, t1, n,
                                                 identical_to_first=own["output_ids"] == oq["output_ids"])
    return row


DUMMY_THINK_HEAD: tuple = ()


def cost_specs() -> list:
    model = dummy_model_dir()
    extra = ["--load-format", "dummy", "--context-length", "1024" if SMOKE else "40960",
             "--cuda-graph-max-bs-decode", "8", "--max-running-requests", "8"]
    small = SMOKE
    return [("q8b-plain", model, extra, {}, 8192 if small else 200_000),
            ("q8b-ngram", model, extra + ["--speculative-algorithm", "NGRAM"], {}, 8192 if small else 60_000),
            ("q8b-ssr", model, extra + ["--speculative-algorithm", "SSR"],
             {"SSR_POLICY": "fixed", "SSR_EVERY": "16", "SSR_MAX_DRAFTS": "4", "SSR_MAX_DRAFT_TOKENS": "64"},
             8192 if small else 80_000)]


def phase_cost(servers: dict, errors: dict, out: Path, deadline: float) -> None:
    """One server measured at a time (the others idle), contexts in increasing order."""
    global DUMMY_THINK_HEAD
    from transformers import AutoTokenizer

    contexts = (200,) if SMOKE else (2048, 8192, 32768)
    model = dummy_model_dir()
    DUMMY_THINK_HEAD = tuple(AutoTokenizer.from_pretrained(str(model))(
        tasks.format_chat("Think."), add_special_tokens=False).input_ids)
    res = RESULTS.setdefault("cost", {"model": "Qwen3-8B shapes, dummy weights", "contexts": list(contexts),
                                      "errors": {n: e for n, e in errors.items() if n.startswith("q8b")}})
    s = {k.split("-", 1)[1]: v for k, v in servers.items() if k.startswith("q8b-")}
    rng = random.Random(7)
    for L in contexts:
        if time.time() > deadline:
            res.setdefault("skipped", []).append(L)
            continue
        row = {}
        for name, fn in (("plain", lambda x: cost_plain(x, L, rng)),
                         ("ngram", lambda x: cost_spec(x, L, rng, None)),
                         ("ngram_think", lambda x: cost_spec(x, L, rng, None, think=True)),
                         ("ssr", lambda x: cost_spec(x, L, rng, s.get("plain"))),
                         ("ssr_think", lambda x: cost_spec(x, L, rng, None, think=True))):
            srv = s.get(name.split("_")[0])
            if srv is None or time.time() > deadline:
                continue
            try:
                row[name] = fn(srv)
            except Exception as e:
                row[name] = {"error": f"{type(e).__name__}: {str(e)[:500]}"}
        res[str(L)] = row
        log(f"cost L={L}: {json.dumps(row)[:800]}")
        save(out)
    res["ssr_state"] = ssr_state(s["ssr"]) if "ssr" in s else None
    save(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu_results")))
    ap.add_argument("--deadline-s", type=float, default=400.0)
    ap.add_argument("--phases", default="exactness,cost")
    ap.add_argument("--smoke", action="store_true", help="run on this machine's CPU engine with tiny configs")
    args = ap.parse_args(argv)
    global SMOKE
    SMOKE = args.smoke
    (args.out / "logs").mkdir(parents=True, exist_ok=True)
    RESULTS["started"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    stack = Path(os.environ.get("SSR_GPU_STACK_FILE", "/nonexistent"))
    if stack.exists():
        RESULTS["stack"] = json.loads(stack.read_text())
    phases = args.phases.split(",")
    specs = (exactness_specs() if "exactness" in phases else []) + (cost_specs() if "cost" in phases else [])
    log(f"starting {len(specs)} servers at once")
    servers, errors = start_all(specs, args.out)
    RESULTS["start_errors"] = {n: e[-600:] for n, e in errors.items()}
    save(args.out)
    try:
        if "exactness" in phases:
            try:
                phase_exactness(servers, errors, args.out, T0 + 0.6 * args.deadline_s)
            except Exception as e:
                RESULTS["exactness_error"] = traceback.format_exc()[-2000:]
                log(f"phase exactness failed: {e}")
            for n in [n for n in servers if not n.startswith("q8b")]:
                servers.pop(n).stop()
        if "cost" in phases:
            try:
                phase_cost(servers, errors, args.out, T0 + args.deadline_s - 20)
            except Exception as e:
                RESULTS["cost_error"] = traceback.format_exc()[-2000:]
                log(f"phase cost failed: {e}")
    finally:
        for srv in servers.values():
            srv.stop()
    RESULTS["elapsed_s"] = round(time.time() - T0, 1)
    save(args.out)
    print(json.dumps({k: RESULTS.get(k) for k in ("exactness", "sampled")}, indent=1, default=str)[:6000])
    print(json.dumps(RESULTS.get("cost"), default=str)[:4000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
