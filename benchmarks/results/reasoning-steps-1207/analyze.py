import json, sys, statistics as S
d = json.load(open(sys.argv[1])); res = d["res"]
def summ(m):
    rs = res[m]
    ttft = S.mean(r["times"][0] for r in rs); k = [r["think_chunk"] for r in rs]
    dec = S.mean(r["times"][r["think_chunk"]] - r["times"][0] for r in rs)
    per = S.mean((r["times"][r["think_chunk"]] - r["times"][0]) / r["think_chunk"] for r in rs)
    return ttft, S.mean(k), dec, per
for m in res: print(m, "ttft %.1f ms, reasoning steps %.1f, reasoning decode %.1f ms, per step %.2f ms" % (1e3*summ(m)[0], summ(m)[1], 1e3*summ(m)[2], 1e3*summ(m)[3]))
b = res["ssr"]
sp = [r["ssr"].get("reasoning_split_s") for r in b if r["ssr"] and r["ssr"].get("reasoning_split_s")]
if sp: print("split mean ms", {k: round(1e3 * S.mean(x[k] for x in sp), 1) for k in sp[0]})
print("forks/task", S.mean(len([x for x in r["ssr"].get("decisions", []) if x.get("fork")]) for r in b))
print("reasoning_steps (server)", S.mean(r["ssr"].get("reasoning_steps", 0) for r in b), "draft steps", S.mean(r["ssr"].get("reasoning_draft_steps", 0) for r in b))
vw = d["info"].get("verify_width", {})
print("widths", vw.get("widths"), "accepted_per_node", {k: v[:4] for k, v in (vw.get("accepted_per_node") or {}).items()})
print("row_s", vw.get("row_s"), "fixed_s", vw.get("fixed_s"), "nearly free", vw.get("rows_nearly_free_steps"), "steps", vw.get("steps"))
