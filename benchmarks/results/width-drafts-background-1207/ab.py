"""A/B: NGRAM, SSR at 026935c (draft tokens counted in the width objective), SSR with drafts as background.
Same tasks, rotating order, streamed; run from /tmp so PYTHONPATH picks each server's code."""
import json, sys, time, statistics as S
from pathlib import Path
from contextlib import ExitStack
import requests
sys.path.insert(0, "/work/main")
from ssr_sglang import main_job as mj
from ssr_sglang.testing.server import Server
from ssr_sglang.testing.http import flush_cache
from transformers import AutoTokenizer
from ssr_sglang.models import bundled_model_path

out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
n = int(sys.argv[2]) if len(sys.argv) > 2 else 24
args = mj.parse_args(["--n", str(n)]); args.max_new_tokens = 512; args.ssr_markers = {}
model = bundled_model_path(); tok = AutoTokenizer.from_pretrained(model)
tasks = mj.load_tasks(args, tok, n, args.seed, skip=8); warm = mj.load_tasks(args, tok, 8, args.seed + 1)

def stream(url, ids):
    flush_cache(url)
    body = {"input_ids": list(ids), "stream": True, "sampling_params": {"max_new_tokens": 512, "temperature": 0, "skip_special_tokens": False}}
    t0 = time.perf_counter(); times = []; texts = []; last = None
    with requests.post(url + "/generate", json=body, stream=True) as r:
        for line in r.iter_lines():
            if not line.startswith(b"data:") or line == b"data: [DONE]": continue
            last = json.loads(line[5:]); times.append(time.perf_counter() - t0); texts.append(len(last["text"]))
    think = next((i for i, _ in enumerate(times) if "</think>" in last["text"][:texts[i]]), None)
    return {"times": times, "think_chunk": think, "ssr": last["meta_info"].get("ssr"), "ids": last.get("output_ids")}

cfg = {"ngram": ("ngram", {}), "ssr-old": ("ssr", {"PYTHONPATH": "/tmp/wt-old"}), "ssr-new": ("ssr", {"PYTHONPATH": "/work/main"})}
with ExitStack() as st:
    servers = {}
    for name, (m, env) in cfg.items():
        servers[name] = st.enter_context(Server(mj.server_args(args, model, m), env=env, log_path=str(out / f"{name}.log"), timeout=600))
    for t in warm:
        for s in servers.values(): stream(s.url, t["input_ids"])
    res = {m: [] for m in servers}
    names = list(servers)
    for i, t in enumerate(tasks):
        order = names[i % 3:] + names[:i % 3]
        for m in order: res[m].append(stream(servers[m].url, t["input_ids"]))
    info = {m: requests.get(servers[m].url + "/server_info").json()["internal_states"][0].get("ssr") for m in ("ssr-old", "ssr-new")}
(out / "steps.json").write_text(json.dumps({"res": res, "info": info}))
ids = {m: [r["ids"] for r in res[m]] for m in res}
print("identical", {m: sum(a == b for a, b in zip(ids[m], ids["ngram"])) for m in res})
for m in res:
    rs = res[m]
    e2e = S.mean(r["times"][-1] for r in rs); dec = S.mean(r["times"][r["think_chunk"]] - r["times"][0] for r in rs)
    ans = S.mean(r["times"][-1] - r["times"][r["think_chunk"]] for r in rs)
    print(f"{m}: e2e {1e3*e2e:.1f} ms, reasoning {1e3*dec:.1f} ms, answer {1e3*ans:.1f} ms")
    if m != "ngram":
        sp = [r["ssr"]["reasoning_split_s"] for r in rs if r["ssr"] and r["ssr"].get("reasoning_split_s")]
        if sp: print("   split", {k: round(1e3 * S.mean(x[k] for x in sp), 1) for k in sp[0]})
        print("   accepted_prefix+suffix", S.mean(r["ssr"].get("accepted_prefix", 0) + r["ssr"].get("accepted_suffix", 0) for r in rs),
              "draft steps", S.mean(r["ssr"].get("reasoning_draft_steps", 0) for r in rs))
