"""SGLang's own grammar test kits against plain, NGRAM and SSR servers on CPU (issue 38 item 1).

The kits shipped in ``sglang.test.kits`` (JSON schema, regex, EBNF, JSON mode, and the speculative grammar kit
on NGRAM and SSR) run unchanged against one server per method, on a real pretrained model (SmolLM2-135M-Instruct
in bf16, ``ssr_sglang.testing.smollm2``; the kits' prompts are plain English). Every request the kits send is
recorded with its output, so a kit that fails can be shown to fail the same way on every method (the kit's
model assumption) rather than because of speculation.

    OMP_NUM_THREADS=1 python benchmarks/grammar_kits.py [--methods plain,ngram,ssr] [--exact] [--out DIR]

``--exact``: the CPU engine's exact mode (``SSR_CPU_EXACT_VERIFY=1``) on every server, plain included. Without
it a bf16 verify row can round differently from a decode row, so NGRAM's and SSR's greedy outputs may leave
plain's at a near-tie (a different, equally valid answer); with it they must equal plain's token for token.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import unittest
from typing import Dict, List

KITS = {  # kit class name -> module under sglang.test.kits
    "JSONConstrainedMixin": "json_constrained_kit", "RegexConstrainedMixin": "regex_constrained_kit",
    "EBNFConstrainedMixin": "ebnf_constrained_kit", "JSONModeMixin": "json_mode_kit",
    "SpecGrammarKit": "spec_server_kits",
}
SPEC_ONLY = {"SpecGrammarKit"}
METHOD_ARGS = {"plain": (), "ngram": ("--speculative-algorithm", "NGRAM"), "ssr": ("--speculative-algorithm", "SSR")}


def _kit(name: str):
    import importlib

    return getattr(importlib.import_module(f"sglang.test.kits.{KITS[name]}"), name)


class _Recorder:
    """Records ``requests.post`` calls to ``/generate``: (payload, text, finish reason) in call order. Each is
    preceded by a cache flush (refused, and so skipped, while other requests run): a prompt's prefill then does
    not depend on what earlier requests left in the radix cache, which differs from method to method (in bf16 a
    cached prefix plus a short extend rounds differently from one whole prefill)."""

    def __init__(self):
        self.calls: List[dict] = []

    def __enter__(self):
        import requests

        self._post = post = requests.post

        def recording(url, *args, **kwargs):
            if url.endswith("/generate"):
                post(url[:-len("/generate")] + "/flush_cache", timeout=30)
            r = post(url, *args, **kwargs)
            if url.endswith("/generate"):
                payload = json.dumps(kwargs.get("json"), sort_keys=True)
                outs = r.json() if r.status_code == 200 else [{"text": None, "error": f"{r.status_code}: {r.text[:200]}"}]
                for o in outs if isinstance(outs, list) else [outs]:
                    self.calls.append({"payload": payload, "text": o.get("text"), "error": o.get("error"),
                                       "finish": (o.get("meta_info") or {}).get("finish_reason")})
            return r

        requests.post = recording
        return self

    def __exit__(self, *exc):
        import requests

        requests.post = self._post


def run_kits(url: str, model: str, spec: bool, kits=tuple(KITS), skip=()) -> Dict[str, dict]:
    """Run the kits against the server at ``url``: {kit: {"ran", "failed": [test], "errors": {test: last line},
    "outputs": [{payload, text, finish}], "seconds"}}; the speculative kit only where ``spec``; the kits' tests
    named in ``skip`` are left out."""
    import time

    import openai

    out = {}
    for name in kits:
        if name in SPEC_ONLY and not spec:
            continue
        attrs = {"base_url": url, "model": model, "client": openai.Client(api_key="EMPTY", base_url=url + "/v1")}
        case = type("Test" + name, (_kit(name), unittest.TestCase), attrs)
        tests = [t for t in unittest.defaultTestLoader.loadTestsFromTestCase(case) if t._testMethodName not in skip]
        t0 = time.perf_counter()
        with open("/dev/null", "w") as sink, _Recorder() as rec:
            r = unittest.TextTestRunner(stream=sink, verbosity=0).run(unittest.TestSuite(tests))
        out[name] = {"ran": r.testsRun, "failed": sorted(t._testMethodName for t, _ in r.failures),
                     "errors": {t._testMethodName: tb.strip().splitlines()[-1] for t, tb in r.errors},
                     "outputs": rec.calls, "seconds": round(time.perf_counter() - t0, 1)}
    return out


def greedy_outputs(calls: List[dict]) -> Dict[str, set]:
    """{payload: the outputs it got (text, finish reason, error)} over the greedy requests (temperature 0; the
    kits sample at 0.5 where they ask for several choices)."""
    out: Dict[str, set] = {}
    for c in calls:
        if json.loads(c["payload"])["sampling_params"].get("temperature", 1.0) == 0:
            out.setdefault(c["payload"], set()).add((c["text"], json.dumps(c["finish"], sort_keys=True), c.get("error")))
    return out


def same_outputs(a: List[dict], b: List[dict]) -> bool:
    """Every greedy payload gets the same outputs on both (sampled requests are checked by the kits' own tests)."""
    return greedy_outputs(a) == greedy_outputs(b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--methods", default="plain,ngram,ssr")
    ap.add_argument("--exact", action="store_true", help="SSR_CPU_EXACT_VERIFY=1 on every server, plain included")
    ap.add_argument("--out", default="benchmarks/results/grammar-kits")
    ap.add_argument("--skip", default="", help="comma list of the kits' tests to leave out (e.g. test_mix_json_and_other)")
    a = ap.parse_args()
    from ssr_sglang.testing.server import Server, cpu_server_args
    from ssr_sglang.testing.smollm2 import cached_smollm2

    model = str(cached_smollm2())
    res = {}
    for m in a.methods.split(","):
        env = {"SSR_CPU_EXACT_VERIFY": "1"} if a.exact else None
        with Server(cpu_server_args(model, *METHOD_ARGS[m]), env=env) as s:
            res[m] = run_kits(s.url, model, spec=m != "plain", skip=set(filter(None, a.skip.split(","))))
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(res, indent=1))
    (out / "results.md").write_text(report(res, a))
    print(report(res, a))


def report(res: dict, a) -> str:
    methods = list(res)
    lines = ["# SGLang's grammar kits on CPU: plain / NGRAM / SSR\n",
             f"Command: `OMP_NUM_THREADS=1 python benchmarks/grammar_kits.py --methods {a.methods}"
             f"{' --exact' if a.exact else ''}{' --skip ' + a.skip if a.skip else ''} --out {a.out}`\n",
             "Model: SmolLM2-135M-Instruct (bf16). Per kit: tests passed of those run on each server (and the kit's "
             "wall time there, one server at a time); the methods "
             "whose greedy outputs equal the first method's (every temperature-0 payload: same texts, finish reasons "
             "and errors; the kits' sampled requests, at temperature 0.5, are checked by the kits only).\n",
             "| kit | " + " | ".join(methods) + " | greedy payloads | greedy outputs equal to " + methods[0] + " |",
             "|---|" + "---|" * (len(methods) + 2)]
    for kit in KITS:
        runs = {m: res[m].get(kit) for m in methods}
        cells = [f"{r['ran'] - len(r['failed']) - len(r['errors'])}/{r['ran']} ({r.get('seconds', '?')} s)" if r else "-"
                 for r in runs.values()]
        ref = next((r for r in runs.values() if r), None)
        greedy = len(greedy_outputs(ref["outputs"])) if ref else 0
        same = ", ".join(m for m, r in runs.items()
                         if greedy and r and r is not ref and same_outputs(ref["outputs"], r["outputs"]))
        lines.append(f"| {kit} | " + " | ".join(cells) + f" | {greedy} | {same or '-'} |")
    errors = {m: sum(bool(c.get("error")) for r in res[m].values() for c in r["outputs"]) for m in methods}
    lines.append("\nRequests answered with an HTTP error: " + ", ".join(f"{m} {n}" for m, n in errors.items()))
    for m in methods:
        for kit, r in res[m].items():
            for test, err in {**{t: "failed" for t in r["failed"]}, **r["errors"]}.items():
                lines.append(f"\n{m} {kit}.{test}: {err}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
