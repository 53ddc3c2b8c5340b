"""Paired per-task ratios with 95% t-intervals, from this folder's steps.json."""
import json, math, statistics as S, sys
from pathlib import Path
d = json.load(open(Path(__file__).with_name("steps.json")))["res"]
def ci(xs):
    m = S.mean(xs); h = 2.07 * S.stdev(xs) / math.sqrt(len(xs)); return f"{m:.3f} [{m-h:.3f}, {m+h:.3f}]"
for key, f in (("e2e", lambda r: r["times"][-1]), ("reasoning", lambda r: r["times"][r["think_chunk"]] - r["times"][0]),
               ("answer", lambda r: r["times"][-1] - r["times"][r["think_chunk"]])):
    print(key, "new/old", ci([f(b) / f(a) for a, b in zip(d["ssr-old"], d["ssr-new"])]),
          "old/ngram", ci([f(a) / f(n) for a, n in zip(d["ssr-old"], d["ngram"])]),
          "new/ngram", ci([f(b) / f(n) for b, n in zip(d["ssr-new"], d["ngram"])]))
