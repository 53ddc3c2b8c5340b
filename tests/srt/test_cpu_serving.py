"""Foundation: a real SGLang server and Engine on CPU, with the plugin loaded, serve and verify."""

from __future__ import annotations

import pytest
import requests

pytestmark = pytest.mark.server


def test_health_and_generate(plain_server, tokenizer):
    assert requests.get(plain_server.url + "/health", timeout=10).status_code == 200
    r = plain_server.generate(text="count the items", max_new_tokens=16)
    assert r["meta_info"]["completion_tokens"] == 16 == len(r["output_ids"])
    assert r["text"] and r["text"] == tokenizer.decode(r["output_ids"], skip_special_tokens=True)


def test_openai_completions_and_chat(plain_server):
    model = requests.get(plain_server.url + "/v1/models", timeout=10).json()["data"][0]["id"]
    r = requests.post(plain_server.url + "/v1/completions", timeout=60,
                      json={"model": model, "prompt": "sum the price", "max_tokens": 12, "temperature": 0})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 12
    r = requests.post(plain_server.url + "/v1/chat/completions", timeout=60,
                      json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 12,
                            "temperature": 0})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["choices"][0]["message"]["content"].strip(), body
    assert 1 <= body["usage"]["completion_tokens"] <= 12, body["usage"]


def test_plugin_loaded_without_errors(plain_server):
    log = open(plain_server.log_path).read()
    assert "Failed to apply hooks" not in log
    assert "Traceback" not in log.split("post-warmup")[0]  # the skipped warm-up logs one harmless traceback


# NGRAM's greedy outputs equal plain decoding's: tests/srt/test_spec_sampling_server.py
# (test_ngram_greedy_identical_to_plain, on that module's NGRAM server: the same server as one here was).


ENGINE_SCRIPT = """
import json, sys
import sglang
for kwargs in json.loads(sys.argv[2]):
    engine = sglang.Engine(model_path=sys.argv[1], device="cpu", dtype="bfloat16", max_total_tokens=4096,
                           mem_fraction_static=0.8, skip_server_warmup=True, log_level="warning", **kwargs)
    try:
        out = engine.generate(input_ids=[5, 6, 7, 8, 9, 10],
                              sampling_params={"max_new_tokens": 24, "temperature": 0, "ignore_eos": True})
        print("RESULT", json.dumps({"output_ids": out["output_ids"], "meta": out["meta_info"]}), flush=True)
    finally:
        engine.shutdown()
"""


def run_engines(model, *configs: dict) -> list:
    """``sglang.Engine`` the way a user runs it on CPU: a script started with the CPU environment, which
    starts, uses and shuts down one Engine per config in turn (SGLang imported once)."""
    import json
    import os
    import subprocess
    import sys

    from ssr_sglang.testing.server import CPU_ENV

    proc = subprocess.run([sys.executable, "-c", ENGINE_SCRIPT, str(model), json.dumps(configs)],
                          env={**os.environ, **CPU_ENV}, capture_output=True, text=True, timeout=600)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    assert proc.returncode == 0 and len(lines) == len(configs), proc.stdout[-2000:] + proc.stderr[-4000:]
    return [json.loads(l[len("RESULT "):]) for l in lines]


def test_engine_on_cpu_with_llama_plain_ngram_and_ssr(tiny_llama):
    """One plain Engine run is the reference of both speculative ones (SSR's was test_ssr_server's)."""
    spec = {"speculative_num_draft_tokens": 8}
    plain, ngram, ssr = run_engines(tiny_llama, {}, {"speculative_algorithm": "NGRAM", **spec},
                                    {"speculative_algorithm": "SSR", **spec})
    assert len(plain["output_ids"]) == 24
    assert ngram["output_ids"] == plain["output_ids"]
    assert ssr["output_ids"] == plain["output_ids"]
    assert "ssr" in ssr["meta"] and "ssr" not in ngram["meta"]
