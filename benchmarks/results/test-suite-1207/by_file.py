"""Per test file: seconds spent (setup + call + teardown, summed over its tests) from pytest --durations=0 output."""
import collections, re, sys
tot = collections.Counter()
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"\s*([\d.]+)s (setup|call|teardown)\s+(\S+?)::", line)
    if m:
        tot[m.group(3)] += float(m.group(1))
print(f"{'seconds':>8}  file")
for f, s in tot.most_common():
    if s >= 5:
        print(f"{s:8.0f}  {f}")
print(f"{sum(tot.values()):8.0f}  all files ({sum(tot.values())/60:.1f} worker-minutes)")
