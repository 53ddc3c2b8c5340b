"""Faults and bad input on a real SSR server with a tiny KV pool, a short context and forced retraction.

The server runs with ``--max-total-tokens 1024`` (a few requests fill it: drafts must be skipped and
requests retracted), ``--context-length 320`` and ``SGLANG_TEST_RETRACT=1`` (SGLang's own test switch:
every third decode step retracts the least-advanced running request, which is a freshly forked hidden
draft whenever one runs).  After every fault the server must be clean: SGLang's idle leak check silent,
no KV tokens in use, no request or SSR state left behind, and the next request served exactly.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import threading
import time

import pytest
import requests

from conftest import start_server

pytestmark = pytest.mark.server

CONTEXT = 320
ENV = {"SSR_CHECKPOINTS": "8,24,48", "SSR_MAX_DRAFT_TOKENS": "64", "SGLANG_TEST_RETRACT": "1",
       "SSR_MAX_BATCH": "32"}  # drafts under concurrency too (CPU default: none from 4 running requests)


@pytest.fixture(scope="module")
def fault_server(tiny_qwen3):
    with start_server(tiny_qwen3, "--speculative-algorithm", "SSR", "--speculative-num-draft-tokens", "8",
                      "--max-total-tokens", "1024", "--context-length", str(CONTEXT), env=ENV,
                      name="faults-ssr") as s:
        yield s


def assert_clean(server, chat_prompts, plain_outputs):
    """No stuck request, no used KV, no SSR state, no leak report; the next request is exact."""
    load = server.wait_idle()
    assert load["num_used_tokens"] == 0 and load["num_running_reqs"] == 0 and load["num_waiting_reqs"] == 0, load
    info = server.server_info()["internal_states"][0]["ssr"]
    assert info["active_drafts"] == 0 and info["active_requests"] == 0, info
    log = open(server.log_path, errors="replace").read()
    assert "leak" not in log.lower(), [ln for ln in log.splitlines() if "leak" in ln.lower()][:3]
    assert "#ssr-" not in log, "a draft rid surfaced in the server log"
    out = server.generate(input_ids=chat_prompts[2], max_new_tokens=32)["output_ids"]
    assert out == plain_outputs[2][:32]


def ssr_totals(server) -> dict:
    return server.server_info()["internal_states"][0]["ssr"]


def stream_generate(server, body) -> list:
    """Stream ``/generate``; return the output ids of every chunk."""
    chunks = []
    with requests.post(server.url + "/generate", json={**body, "stream": True}, stream=True, timeout=300) as r:
        assert r.status_code == 200, r.text
        for line in r.iter_lines():
            if line.startswith(b"data:") and line != b"data: [DONE]":
                chunks.append(json.loads(line[5:]))
    return chunks


# -- faults ---------------------------------------------------------------------------
def test_retracted_draft_is_hidden_and_freed(fault_server, chat_prompts, plain_outputs):
    """Parent + its draft run; forced retraction takes the draft (fewest output tokens) again and again."""
    before = ssr_totals(fault_server)
    body = {"rid": f"retract-{time.time_ns()}", "input_ids": chat_prompts[0],
            "sampling_params": {"max_new_tokens": 128, "temperature": 0,
                                "custom_params": {"ssr_checkpoints": [8, 16], "ssr_max_draft_tokens": 100}}}
    chunks = stream_generate(fault_server, body)
    ids = [c["output_ids"] for c in chunks]
    final = ids[-1]
    assert final == plain_outputs[0]
    assert all(final[:len(x)] == x for x in ids), "a streamed chunk is not a prefix of the final output"
    assert {c["meta_info"]["id"] for c in chunks} == {body["rid"]}
    ssr = chunks[-1]["meta_info"]["ssr"]
    assert ssr["drafts_started"] >= 1, ssr
    log = open(fault_server.log_path, errors="replace").read()
    assert "Testing retraction" in log
    after = ssr_totals(fault_server)
    assert after["drafts_started"] > before["drafts_started"]
    assert_clean(fault_server, chat_prompts, plain_outputs)


def test_parent_finishes_while_its_drafts_run(fault_server, chat_prompts, plain_outputs):
    out = fault_server.generate(input_ids=chat_prompts[1], max_new_tokens=20,
                                custom_params={"ssr_checkpoints": [8], "ssr_max_draft_tokens": 64})
    assert out["output_ids"] == plain_outputs[1][:20]
    ssr = out["meta_info"]["ssr"]
    assert ssr["drafts_started"] == 1 and ssr["drafts_cancelled"] == 1, ssr
    assert_clean(fault_server, chat_prompts, plain_outputs)


def test_kv_pool_exhaustion_retracts_and_skips_drafts_exactly(fault_server, chat_prompts, plain_outputs):
    """16 x (prompt + 128) tokens do not fit in 1024: drafts skipped, real requests retracted, output exact."""
    before = ssr_totals(fault_server)
    n = 16
    with cf.ThreadPoolExecutor(n) as pool:
        outs = list(pool.map(lambda p: fault_server.generate(input_ids=p, max_new_tokens=128), chat_prompts[:n]))
    assert [o["output_ids"] for o in outs] == plain_outputs[:n]
    after = ssr_totals(fault_server)
    assert after["drafts_skipped"] > before["drafts_skipped"], (before, after)
    log = open(fault_server.log_path, errors="replace").read()
    assert "retract" in log.lower()
    assert_clean(fault_server, chat_prompts, plain_outputs)


def test_max_tokens_and_context_length(fault_server, chat_prompts, plain_outputs, tokenizer):
    # max_new_tokens reached mid-reasoning and mid-draft.
    out = fault_server.generate(input_ids=chat_prompts[3], max_new_tokens=9, custom_params={"ssr_checkpoints": [8]})
    assert out["output_ids"] == plain_outputs[3][:9] and out["meta_info"]["finish_reason"]["type"] == "length"
    # A prompt that leaves little room: the request runs up to the context length; drafts near the end
    # have no room and are skipped, not admitted past the context.
    long_prompt = chat_prompts[4] * (CONTEXT // len(chat_prompts[4]))
    long_prompt = long_prompt[: CONTEXT - 60]
    out = fault_server.generate(input_ids=long_prompt, max_new_tokens=60, sampling={"ignore_eos": True},
                                custom_params={"ssr_every": 4, "ssr_max_drafts": 40})
    # SGLang stops a request a token or two short of the context when speculation reserves room.
    assert 50 <= len(out["output_ids"]) <= 60 and out["meta_info"]["finish_reason"]["type"] == "length", out["meta_info"]
    assert len(long_prompt) + len(out["output_ids"]) <= CONTEXT
    # Over the context: a 400 naming it, before anything is scheduled.
    for ids, mnt in ((long_prompt, 61), (chat_prompts[0] * 40, 4)):
        r = requests.post(fault_server.url + "/generate", timeout=30,
                          json={"input_ids": ids, "sampling_params": {"max_new_tokens": mnt}})
        assert r.status_code == 400 and "context length" in r.json()["error"]["message"], r.text
    assert_clean(fault_server, chat_prompts, plain_outputs)


def test_disconnects_and_abort_all_under_pressure(fault_server, chat_prompts, plain_outputs):
    """Half the clients go away mid-stream, then everything left is aborted at once."""
    sp = {"max_new_tokens": 200, "temperature": 0, "ignore_eos": True,
          "custom_params": {"ssr_checkpoints": [8, 16], "ssr_max_draft_tokens": 100}}
    started = threading.Barrier(9)

    def client(i):
        body = {"input_ids": chat_prompts[i], "sampling_params": sp, "stream": True}
        seen = 0
        try:
            with requests.post(fault_server.url + "/generate", json=body, stream=True, timeout=120) as r:
                for line in r.iter_lines():
                    seen += line.startswith(b"data:")
                    if seen == 3:
                        started.wait(timeout=60)
                    if i % 2 and seen > 12:
                        return "disconnected"
        except threading.BrokenBarrierError:
            pass
        return "ended"

    with cf.ThreadPoolExecutor(8) as pool:
        futs = [pool.submit(client, i) for i in range(8)]
        started.wait(timeout=120)
        time.sleep(1.0)
        requests.post(fault_server.url + "/abort_request", json={"abort_all": True}, timeout=10)
        results = [f.result(timeout=180) for f in futs]
    assert results.count("ended") >= 4
    assert_clean(fault_server, chat_prompts, plain_outputs)


def test_sampled_requests_under_retraction(fault_server, chat_prompts, plain_outputs):
    with cf.ThreadPoolExecutor(6) as pool:
        outs = list(pool.map(lambda p: fault_server.generate(input_ids=p, max_new_tokens=64, temperature=0.9,
                                                             sampling={"top_p": 0.9}), chat_prompts[:6]))
    assert all(1 <= len(o["output_ids"]) <= 64 for o in outs)
    assert_clean(fault_server, chat_prompts, plain_outputs)


# -- bad input ------------------------------------------------------------------------------
def _g(**sp):
    return {"text": "count the items", "sampling_params": {"max_new_tokens": 4, **sp}}


def _cp(params):
    return _g(custom_params=params)


def _chat(**kw):
    return {"model": "default", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **kw}


GEN, CHAT = "/generate", "/v1/chat/completions"
BAD_INPUT = [  # (id, path, JSON body or raw bytes, text the 4xx error must contain)
    # SSR per-request parameters: wrong types and ranges (beyond tests/srt's 12 cases)
    ("ssr-int2", GEN, _cp({"ssr": 2}), "custom_params.ssr "),
    ("ssr-null", GEN, _cp({"ssr": None}), "custom_params.ssr "),
    ("ssr-list", GEN, _cp({"ssr": [True]}), "custom_params.ssr "),
    ("ssr-float", GEN, _cp({"ssr": 1.0}), "custom_params.ssr "),
    ("checkpoints-empty", GEN, _cp({"ssr_checkpoints": []}), "ssr_checkpoints"),
    ("checkpoints-str", GEN, _cp({"ssr_checkpoints": "10,20"}), "ssr_checkpoints"),
    ("checkpoints-float", GEN, _cp({"ssr_checkpoints": [1.5]}), "ssr_checkpoints"),
    ("checkpoints-neg", GEN, _cp({"ssr_checkpoints": [-1]}), "ssr_checkpoints"),
    ("checkpoints-zero", GEN, _cp({"ssr_checkpoints": [0]}), "ssr_checkpoints"),
    ("checkpoints-bool", GEN, _cp({"ssr_checkpoints": [True]}), "ssr_checkpoints"),
    ("checkpoints-mixed", GEN, _cp({"ssr_checkpoints": [10, "x"]}), "ssr_checkpoints"),
    ("checkpoints-dict", GEN, _cp({"ssr_checkpoints": {"a": 1}}), "ssr_checkpoints"),
    ("checkpoints-huge", GEN, _cp({"ssr_checkpoints": 10**12}), "ssr_checkpoints"),
    ("every-zero", GEN, _cp({"ssr_every": 0, "ssr_max_drafts": 2}), "ssr_every"),
    ("every-float", GEN, _cp({"ssr_every": 1.5, "ssr_max_drafts": 2}), "ssr_every"),
    ("every-str", GEN, _cp({"ssr_every": "5", "ssr_max_drafts": 2}), "ssr_every"),
    ("every-bool", GEN, _cp({"ssr_every": True, "ssr_max_drafts": 2}), "ssr_every"),
    ("every-huge", GEN, _cp({"ssr_every": 10**15, "ssr_max_drafts": 2}), "ssr_every"),
    ("max-drafts-neg", GEN, _cp({"ssr_every": 5, "ssr_max_drafts": -1}), "ssr_max_drafts"),
    ("max-drafts-str", GEN, _cp({"ssr_every": 5, "ssr_max_drafts": "3"}), "ssr_max_drafts"),
    ("budget-neg", GEN, _cp({"ssr_fractions": [0.5], "ssr_thinking_budget": -100}), "ssr_thinking_budget"),
    ("budget-zero", GEN, _cp({"ssr_fractions": [0.5], "ssr_thinking_budget": 0}), "ssr_thinking_budget"),
    ("budget-huge", GEN, _cp({"ssr_fractions": [0.5], "ssr_thinking_budget": 10**12}), "ssr_thinking_budget"),
    ("budget-str", GEN, _cp({"ssr_fractions": [0.5], "ssr_thinking_budget": "1k"}), "ssr_thinking_budget"),
    ("fractions-empty", GEN, _cp({"ssr_fractions": [], "ssr_thinking_budget": 100}), "ssr_fractions"),
    ("fractions-neg", GEN, _cp({"ssr_fractions": [-0.1], "ssr_thinking_budget": 100}), "ssr_fractions"),
    ("fractions-str", GEN, _cp({"ssr_fractions": ["half"], "ssr_thinking_budget": 100}), "ssr_fractions"),
    ("draft-tokens-neg", GEN, _cp({"ssr_max_draft_tokens": -1}), "ssr_max_draft_tokens"),
    ("draft-tokens-huge", GEN, _cp({"ssr_max_draft_tokens": 10**9}), "ssr_max_draft_tokens"),
    ("draft-tokens-float", GEN, _cp({"ssr_max_draft_tokens": 1.5}), "ssr_max_draft_tokens"),
    ("draft-tokens-null", GEN, _cp({"ssr_max_draft_tokens": None}), "ssr_max_draft_tokens"),
    ("prefix-str", GEN, _cp({"ssr_prefix": "no"}), "ssr_prefix"),
    ("suffix-int", GEN, _cp({"ssr_suffix": 3}), "ssr_suffix"),
    ("draft-str", GEN, _cp({"ssr_draft": "abc"}), "ssr_draft"),
    ("draft-float", GEN, _cp({"ssr_draft": [1.5]}), "ssr_draft"),
    ("draft-bool", GEN, _cp({"ssr_draft": [True]}), "ssr_draft"),
    ("draft-null-id", GEN, _cp({"ssr_draft": [None]}), "ssr_draft"),
    ("draft-nested", GEN, _cp({"ssr_draft": [[1]]}), "ssr_draft"),
    ("draft-huge", GEN, _cp({"ssr_draft": [5] * 70000}), "ssr_draft"),
    ("draft-too-many", GEN, _cp({f"ssr_draft_{i}": [5] for i in range(17)}), "ssr_draft"),
    ("draft-k-neg-id", GEN, _cp({"ssr_draft_1": [-1]}), "ssr_draft_1"),
    ("unknown-ssrx", GEN, _cp({"ssrx": 1}), "ssrx"),
    ("unknown-ssr-typo", GEN, _cp({"ssr_checkpoint": [10]}), "ssr_checkpoint"),
    # the same through the OpenAI API (custom_params in the body = the client's extra_body)
    ("chat-every-zero", CHAT, _chat(custom_params={"ssr_every": 0, "ssr_max_drafts": 2}), "ssr_every"),
    ("chat-unknown", CHAT, _chat(custom_params={"ssr_foo": 1}), "ssr_foo"),
    ("chat-draft-oov", CHAT, _chat(custom_params={"ssr_draft": [10**6]}), "ssr_draft"),
    ("chat-budget-neg", CHAT, _chat(custom_params={"ssr_fractions": [0.5], "ssr_thinking_budget": -1}),
     "ssr_thinking_budget"),
    # SGLang-level malformed requests on an SSR server
    ("max-new-neg", GEN, _g(max_new_tokens=-1), "max_new_tokens"),
    ("max-new-huge", GEN, _g(max_new_tokens=10**12), "context length"),
    ("temperature-neg", GEN, _g(temperature=-1), "temperature"),
    ("top-p-2", GEN, _g(top_p=2), "top_p"),
    ("empty-text", GEN, {"text": "", "sampling_params": {"max_new_tokens": 4}}, "empty"),
    ("empty-ids", GEN, {"input_ids": [], "sampling_params": {"max_new_tokens": 4}}, "empty"),
    ("ids-negative", GEN, {"input_ids": [5, -3], "sampling_params": {"max_new_tokens": 4}}, "input_ids"),
    ("ids-oov", GEN, {"input_ids": [5, 10**6], "sampling_params": {"max_new_tokens": 4}}, "input_ids"),
    ("chat-max-tokens-neg", CHAT, _chat(max_tokens=-5), "max_new_tokens"),  # SGLang names it so
    ("chat-no-messages", CHAT, _chat(messages=[]), "messages"),
    ("chat-messages-str", CHAT, _chat(messages="hi"), "messages"),
    ("bad-json", GEN, b"{not json", "json"),
    ("chat-bad-json", CHAT, b"[", "json"),
    ("bad-utf8", GEN, b'{"text": "\xff\xfe", "sampling_params": {"max_new_tokens": 4}}', "json decode"),
    ("chat-bad-utf8", CHAT, b'{"model": "default", "messages": [{"role": "user", "content": "\xc3\x28"}]}', "json decode"),
]


@pytest.mark.parametrize("path,body,needle", [c[1:] for c in BAD_INPUT], ids=[c[0] for c in BAD_INPUT])
def test_bad_input_gets_4xx_naming_the_problem(fault_server, path, body, needle):
    if isinstance(body, bytes):
        r = requests.post(fault_server.url + path, data=body, headers={"Content-Type": "application/json"}, timeout=30)
    else:
        r = requests.post(fault_server.url + path, json=body, timeout=30)
    assert 400 <= r.status_code < 500, (r.status_code, r.text[:300])
    assert needle.lower() in r.text.lower(), r.text[:300]


def test_bad_input_count():
    assert len(BAD_INPUT) >= 50


@pytest.mark.parametrize("text", ["<think></think><think>", "<think>", "</think>", "</think></think> count </think>",
                                  "<think> fake </think> count the items <think>"])
def test_think_tags_in_prompts_are_served_exactly(fault_server, plain_server, text):
    """Prompts made of fake or only think tags are valid input: served, and greedy output is plain's."""
    ref = plain_server.generate(text=text, max_new_tokens=24)
    out = fault_server.generate(text=text, max_new_tokens=24)
    assert out["output_ids"] == ref["output_ids"]
    msgs = [{"role": "user", "content": text}]
    r = requests.post(fault_server.url + CHAT, json={"model": "default", "messages": msgs, "max_tokens": 24,
                                                       "temperature": 0}, timeout=120)
    ref = requests.post(plain_server.url + CHAT, json={"model": "default", "messages": msgs, "max_tokens": 24,
                                                         "temperature": 0}, timeout=120)
    assert r.status_code == 200 and r.json()["choices"][0]["message"] == ref.json()["choices"][0]["message"]


def test_serves_correctly_after_bad_input(fault_server, chat_prompts, plain_outputs):
    assert_clean(fault_server, chat_prompts, plain_outputs)
