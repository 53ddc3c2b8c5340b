"""ssr_context on in-server drafts: the bundled reasoning model, fixed schedule, 8 prompts, with and without."""
import argparse, json, random, sys, time
argparse.ArgumentParser(description=__doc__ + " Run from the repository root; writes results.json beside this "
                        "script.").parse_args()
sys.path.insert(0, '.')
from transformers import AutoTokenizer
from ssr_sglang.models import bundled_model_path, tasks
from ssr_sglang.testing.server import Server, cpu_server_args
from ssr_sglang.testing.http import flush_cache
path = bundled_model_path()
tok = AutoTokenizer.from_pretrained(path)
rng = random.Random(777)
exs = [tasks.make_example(rng) for _ in range(8)]
prompts = [tok(tasks.format_chat(ex["prompt"]), add_special_tokens=False).input_ids for ex in exs]
env = {"SSR_EVERY": "16", "SSR_MAX_DRAFTS": "8", "SSR_MAX_DRAFT_TOKENS": "112"}
res = {"off": [], "on": []}
with Server(cpu_server_args(str(path), "--speculative-algorithm", "SSR", "--reasoning-parser", "qwen3"), env=env) as s:
    for rep in range(2):
        for p in prompts:
            for label, cp in (("off", {}), ("on", {"ssr_context": True})):
                flush_cache(s.url)
                out = s.generate(input_ids=p, max_new_tokens=512, custom_params=cp) if cp else s.generate(input_ids=p, max_new_tokens=512)
                res[label].append({"ids": out["output_ids"], "ssr": out["meta_info"]["ssr"], "e2e": out["meta_info"]["e2e_latency"]})
summary = {}
for label, rows in res.items():
    m = [r["ssr"] for r in rows]
    summary[label] = {k: sum(x.get(k, 0) or 0 for x in m) for k in ("answer_tokens", "answer_verify_steps", "accepted_prefix", "accepted_suffix", "accepted_suffix_context", "context_tokens", "propose_time_s", "verify_time_s")}
    summary[label]["answer_accept_length"] = round(summary[label]["answer_tokens"] / summary[label]["answer_verify_steps"], 3)
    summary[label]["mean_e2e_s"] = round(sum(r["e2e"] for r in rows) / len(rows), 4)
per = [(a["ssr"]["drafts_started"], b["ssr"]["drafts_started"], a["ssr"]["answer_verify_steps"], b["ssr"]["answer_verify_steps"], a["ssr"]["accepted_suffix"], b["ssr"]["accepted_suffix"], b["ssr"]["context_tokens"]) for a, b in zip(res["off"], res["on"])]
print(per)
summary["per_request_off_on"] = per
summary["identical"] = sum(a["ids"] == b["ids"] for a, b in zip(res["off"], res["on"]))
summary["requests"] = len(res["on"])
summary["date"] = time.strftime("%Y-%m-%d %H:%M")
summary["command"] = "bundled model, SSR, --reasoning-parser qwen3, SSR_EVERY=16 SSR_MAX_DRAFTS=8 SSR_MAX_DRAFT_TOKENS=112, 8 prompts (seed 777) x 2 rounds, each with and without custom_params ssr_context, alternating, /flush_cache before every request"
print(json.dumps(summary, indent=1))
json.dump(summary, open('benchmarks/results/context-bundled/results.json', 'w'), indent=1)
