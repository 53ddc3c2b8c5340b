"""Does a CPU NGRAM server work with overlap scheduling (SGLang turns it off for speculative decoding on CPU)?

    SGLANG_USE_CPU_ENGINE=1 python scripts/overlap_cpu/ngram_overlap_check.py ngram_overlap   # then: plain
    python scripts/overlap_cpu/ngram_overlap_check.py compare

Each run starts one server (tiny test Qwen3), generates the 16 test chat prompts greedily (128 tokens, one
at a time, then 8 concurrent), dumps the scheduler processes' stacks with py-spy (which event loop runs) and
writes the outputs to $OUT (default /tmp/overlap_cpu); ``compare`` compares the two runs.
"""
import argparse, json, os, subprocess, sys, time, concurrent.futures as cf
from pathlib import Path
_p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
_p.add_argument("mode", choices=["plain", "ngram_overlap", "compare"])
_mode = _p.parse_args().mode
OUT = os.environ.get("OUT", "/tmp/overlap_cpu")
os.makedirs(OUT, exist_ok=True)
if _mode == "compare":
    a, b = (json.load(open(f"{OUT}/{m}.json")) for m in ("plain", "ngram_overlap"))
    for k in ("seq", "conc"):
        same = sum(x == y for x, y in zip(a[k], b[k]))
        print(k, f"{same}/{len(a[k])} identical")
    sys.exit(0)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
from ssr_sglang.testing.server import Server, cpu_server_args
from ssr_sglang.testing.tiny_models import cached_tiny_model
from conftest import PROMPT_TOPICS
from transformers import AutoTokenizer
model = cached_tiny_model("qwen3")
tok = AutoTokenizer.from_pretrained(model)
prompts = [tok(tok.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True, tokenize=False),
               add_special_tokens=False).input_ids for t in PROMPT_TOPICS]
mode = _mode
extra = []
if mode != "plain":
    extra = ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "8"]
s = Server(cpu_server_args(model, *extra), log_path=f"{OUT}/{mode}.log")
if mode == "ngram_overlap":
    s.args[1:3] = [str(Path(__file__).with_name("launch_server_overlap.py"))]
print(s.args[:4])
with s:
    info = s.server_info()
    print("disable_overlap_schedule", info.get("disable_overlap_schedule"), "algo", info.get("speculative_algorithm"))
    pids = subprocess.run(["pgrep", "-g", str(s.proc.pid)], capture_output=True, text=True).stdout.split()
    t0 = time.time()
    outs = [s.generate(input_ids=p, max_new_tokens=128) for p in prompts]
    with cf.ThreadPoolExecutor(8) as pool:
        conc = list(pool.map(lambda p: s.generate(input_ids=p, max_new_tokens=128), prompts[:8]))
    print("time", time.time() - t0)
    for pid in pids:
        r = subprocess.run([os.path.dirname(sys.executable) + "/py-spy", "dump", "--pid", pid], capture_output=True, text=True)
        if "event_loop" in r.stdout:
            print("pid", pid, [l.strip() for l in r.stdout.splitlines() if "event_loop" in l])
    print("loads", s.wait_idle(30))
json.dump({"seq": [o["output_ids"] for o in outs], "conc": [o["output_ids"] for o in conc],
           "meta": [o["meta_info"] for o in outs]}, open(f"{OUT}/{mode}.json", "w"))
