"""Per-step client arrival times, NGRAM vs SSR (same tasks, side by side): where does SSR's reasoning time go?"""
import json, sys, time, statistics
from pathlib import Path
from contextlib import ExitStack
import requests
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository
from ssr_sglang import main_job as mj
from ssr_sglang.testing.server import Server
from ssr_sglang.testing.http import flush_cache
from transformers import AutoTokenizer
from ssr_sglang.models import bundled_model_path

env_ssr = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
out = Path(sys.argv[2] if len(sys.argv) > 2 else "/tmp/prof/steps"); out.mkdir(parents=True, exist_ok=True)
args = mj.parse_args(["--n", "24"]); args.max_new_tokens = 512; args.ssr_markers = {}
model = bundled_model_path(); tok = AutoTokenizer.from_pretrained(model)
tasks = mj.load_tasks(args, tok, 24, args.seed, skip=8); warm = mj.load_tasks(args, tok, 8, args.seed + 1)

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

with ExitStack() as st:
    servers = {}
    for m in ("ngram", "ssr"):
        servers[m] = st.enter_context(Server(mj.server_args(args, model, m), env=env_ssr if m == "ssr" else {}, log_path=str(out / f"{m}.log"), timeout=600))
    for t in warm:
        for s in servers.values(): stream(s.url, t["input_ids"])
    res = {m: [] for m in servers}
    for i, t in enumerate(tasks):
        order = list(servers) if i % 2 == 0 else list(servers)[::-1]
        for m in order: res[m].append(stream(servers[m].url, t["input_ids"]))
    info = requests.get(servers["ssr"].url + "/server_info").json()["internal_states"][0].get("ssr")
(out / "steps.json").write_text(json.dumps({"res": res, "info": info}))
print("done")
