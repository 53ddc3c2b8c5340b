"""The SGLang router (``sglang-router`` from PyPI) in front of two SSR servers: same tokens as one server.

Starts two SSR servers on a test model (CPU), sends the prompts to the first one directly, then through
``python -m sglang_router.launch_router --worker-urls A B --policy round_robin`` 8 at once, and prints
how many outputs are identical, whether ``meta_info["ssr"]`` came through, and each worker's SSR totals
(drafts are counted on the worker that served their parent). The router is a separate package with its
own dependencies; install it into a separate environment and pass its interpreter::

    python -m venv /tmp/routervenv && /tmp/routervenv/bin/pip install sglang-router
    python benchmarks/router_check.py --router-python /tmp/routervenv/bin/python
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
SSR_ENV = {"SSR_CHECKPOINTS": "16,48,96", "SSR_MAX_DRAFT_TOKENS": "48", "SSR_MAX_BATCH": "32"}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--router-python", required=True, help="an interpreter with sglang-router installed")
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--log-dir", default="results/benchmarks/router-check")
    args = p.parse_args(argv)
    os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
    from transformers import AutoTokenizer

    from ssr_sglang.testing.server import Server, cpu_server_args, free_port
    from ssr_sglang.testing.tiny_models import cached_tiny_model

    model = cached_tiny_model("qwen3")
    tok = AutoTokenizer.from_pretrained(model)
    topics = ["count the items then add", "check the table row", "sum the price and qty", "list the names",
              "what is 12 + 7", "first add then check", "return the total", "print each item"]
    prompts = [tok(tok.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True,
                                           tokenize=False), add_special_tokens=False).input_ids
               for t in (topics * (args.n // len(topics) + 1))[:args.n]]
    logs = Path(args.log_dir)
    logs.mkdir(parents=True, exist_ok=True)
    sargs = cpu_server_args(model, "--speculative-algorithm", "SSR", "--speculative-num-draft-tokens", "8",
                            "--mem-fraction-static", "0.8")
    res = {}
    with Server(sargs, env=SSR_ENV, log_path=str(logs / "worker0.log")) as a, \
            Server(sargs, env=SSR_ENV, log_path=str(logs / "worker1.log")) as b:
        direct = [a.generate(input_ids=q, max_new_tokens=args.max_new_tokens)["output_ids"] for q in prompts]
        before = [s.server_info()["internal_states"][0]["ssr"]["drafts_started"] for s in (a, b)]
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        router = subprocess.Popen([args.router_python, "-m", "sglang_router.launch_router", "--worker-urls", a.url,
                                   b.url, "--policy", "round_robin", "--host", "127.0.0.1", "--port", str(port)],
                                  stdout=open(logs / "router.log", "w"), stderr=subprocess.STDOUT,
                                  start_new_session=True)
        try:
            t0 = time.time()
            probe = {"input_ids": prompts[0], "sampling_params": {"max_new_tokens": 1, "temperature": 0}}
            while True:  # workers register in the background after the router answers /health
                if router.poll() is not None:
                    raise SystemExit(f"router exited with {router.returncode}; see {logs / 'router.log'}")
                try:
                    if requests.post(url + "/generate", json=probe, timeout=60).status_code == 200:
                        break
                except requests.RequestException:
                    pass
                if time.time() - t0 > 180:
                    raise SystemExit(f"router had no healthy worker after 180 s; see {logs / 'router.log'}")
                time.sleep(2)
            res["workers_ready_s"] = round(time.time() - t0, 1)
            body = lambda q: {"input_ids": q, "sampling_params": {"max_new_tokens": args.max_new_tokens,  # noqa: E731
                                                                   "temperature": 0}}
            with cf.ThreadPoolExecutor(len(prompts)) as pool:
                outs = list(pool.map(lambda q: requests.post(url + "/generate", json=body(q), timeout=600), prompts))
            res["status"] = sorted({o.status_code for o in outs})
            outs = [o.json() for o in outs]
            res["identical"] = f"{sum(o['output_ids'] == d for o, d in zip(outs, direct))}/{len(prompts)}"
            res["meta_info_ssr"] = sum("ssr" in o["meta_info"] for o in outs)
            res["drafts_started_via_router"] = sum(o["meta_info"]["ssr"]["drafts_started"] for o in outs)
            after = [s.server_info()["internal_states"][0]["ssr"]["drafts_started"] for s in (a, b)]
            res["drafts_started_per_worker"] = [x - y for x, y in zip(after, before)]
        finally:
            os.killpg(router.pid, signal.SIGTERM)
            router.wait(timeout=30)
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
