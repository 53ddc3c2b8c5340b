"""``--speculative-algorithm SSR`` on a real CPU server: exactness, drafts, metrics, aborts, bad input."""

from __future__ import annotations

import concurrent.futures as cf
import time

import pytest
import requests

from conftest import check_client_draft, start_server
from ssr_sglang.testing.http import flush_cache

pytestmark = pytest.mark.server

CHECKPOINTS = [16, 48, 96]
# SSR_MAX_BATCH=32 (CPU default 4): drafts must also run, and stay exact, among 8 concurrent requests
# SSR_TEST_CHECK_TREES=1: the worker counts repeated sibling tokens in every tree it hands the verifier
SSR_ENV = {"SSR_CHECKPOINTS": ",".join(map(str, CHECKPOINTS)), "SSR_MAX_DRAFT_TOKENS": "48", "SSR_MAX_BATCH": "32",
           "SSR_TEST_CHECK_TREES": "1"}


@pytest.fixture(scope="module")
def ssr_server(tiny_qwen3):
    with start_server(tiny_qwen3, "--speculative-algorithm", "SSR", "--speculative-num-draft-tokens", "8",
                      env=SSR_ENV, name="ssr") as s:
        yield s


def test_greedy_identical_to_plain_batch_1(ssr_server, chat_prompts, plain_outputs):
    forked = 0
    for prompt, ref in zip(chat_prompts, plain_outputs):
        out = ssr_server.generate(input_ids=prompt, max_new_tokens=128)
        assert out["output_ids"] == ref
        ssr = out["meta_info"]["ssr"]
        assert ssr["phase"] in ("reasoning", "answer"), ssr
        # one draft per checkpoint passed (a checkpoint within 8 tokens of the end, one verify step, may not be)
        passed = ssr["reasoning_tokens"]
        due = sum(c + 8 <= passed for c in CHECKPOINTS), sum(c <= passed for c in CHECKPOINTS)
        assert due[0] <= ssr["drafts_started"] <= due[1], ssr
        forked += ssr["drafts_started"]
    assert forked >= 34, forked  # 37 measured (16 prompts, 2026-11-30): most prompts reason past all three


def test_auto_verify_width_keeps_outputs_and_measures(ssr_server, chat_prompts, plain_outputs):
    """The default SSR_VERIFY_WIDTH=auto on CPU: steps run at the widths the policy picks (probes at the widest
    and at half of it among them) and the outputs stay the target model's; the row cost gets fitted and
    the nodes rated per kind of proposal, and what choosing costs a step is timed. Whether narrower steps pay depends on the model and the machine
    (this test model's rows are nearly free): ``benchmarks/verify_width.py`` measures that."""
    with cf.ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda p: ssr_server.generate(input_ids=p, max_new_tokens=128), chat_prompts[:8]))
    assert [o["output_ids"] for o in outs] == plain_outputs[:8]
    width = ssr_server.server_info()["internal_states"][0]["ssr"]["verify_width"]
    assert width["steps"] > 100 and width["row_s"] >= 0 and width["token_s"] >= 0 and width["fixed_s"], width
    assert width["choice_s"] and all(0 < s < 0.01 for s in width["choice_s"].values()), width  # choosing is timed
    chosen = {int(w): n for w, n in width["widths"].items()}
    assert chosen.get(8, 0) > 0 and len(chosen) >= 2, width
    assert {"ngram-reasoning", "ngram-answer"} <= set(width["accepted_per_node"]), width


def test_greedy_identical_to_plain_8_concurrent(ssr_server, chat_prompts, plain_outputs):
    with cf.ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(lambda p: ssr_server.generate(input_ids=p, max_new_tokens=128), chat_prompts[:8]))
    assert [o["output_ids"] for o in outs] == plain_outputs[:8]
    assert ssr_server.wait_idle(30.0)["num_used_tokens"] == 0


def test_drafts_fork_at_checkpoints_and_reuse_reasoning_kv(ssr_server, chat_prompts):
    out = ssr_server.generate(input_ids=chat_prompts[0], max_new_tokens=128, sampling={"ignore_eos": True})
    ssr = out["meta_info"]["ssr"]
    reasoning = ssr["reasoning_tokens"]
    due = [c for c in CHECKPOINTS if c <= reasoning]
    assert ssr["drafts_started"] + ssr["drafts_skipped"] == len(due), (ssr, out["output_ids"])
    assert ssr["drafts_started"] == len(due)  # nothing else runs, so nothing is skipped
    # A draft still running when its parent finishes is cancelled (aborted and freed).
    assert ssr["drafts_finished"] + ssr["drafts_cancelled"] == ssr["drafts_started"], ssr
    assert ssr["draft_tokens"] > 0
    # Each draft prefills only the forced think end (+ the last reasoning token, whose KV is not written yet).
    uncached = ssr["draft_prompt_tokens"] - ssr["draft_cached_tokens"]
    assert ssr["draft_cached_tokens"] >= ssr["draft_prompt_tokens"] - 8 * ssr["drafts_started"], ssr
    assert ssr["draft_cached_tokens"] >= 0.9 * ssr["draft_prompt_tokens"], ssr
    assert uncached >= 0


def test_client_draft_gives_long_acceptance(ssr_server, chat_prompts, tokenizer):
    check_client_draft(ssr_server, chat_prompts[1], tokenizer)


def test_suffix_decoding_recovers_after_mismatch(ssr_server, chat_prompts, plain_outputs, tokenizer):
    # A prompt whose output is varied: on a single repeated token every suffix match ends at an edit.
    varied = max(range(len(plain_outputs)), key=lambda i: len(set(plain_outputs[i])))
    closed = chat_prompts[varied] + tokenizer("\n</think>\n\n", add_special_tokens=False).input_ids
    ref = ssr_server.generate(input_ids=closed, max_new_tokens=96, sampling={"ignore_eos": True})["output_ids"]
    edited = list(ref)
    for i in (10, 40, 70):  # a few wrong tokens: prefix verification stops at the first, suffix re-anchors
        edited[i] = (edited[i] + 7) % 500
    out = ssr_server.generate(input_ids=closed, max_new_tokens=96, sampling={"ignore_eos": True},
                              custom_params={"ssr_draft": edited})
    assert out["output_ids"] == ref
    ssr = out["meta_info"]["ssr"]
    assert ssr["accepted_suffix"] > 0, ssr
    assert ssr["answer_accept_length"] > 2, ssr


def test_context_sources_keep_outputs_and_are_counted(ssr_server, chat_prompts, tokenizer):
    """ssr_context: the prompt (and, once the answer starts, the reasoning) become sources, indexed a
    bounded chunk per step (context_tokens); outputs stay those without drafts (``ssr: false``, itself
    plain's: see above); tokens accepted from them are a part of accepted_suffix (accepted_suffix_context)."""
    for i in range(4):
        ref = ssr_server.generate(input_ids=chat_prompts[i], max_new_tokens=128, custom_params={"ssr": False})
        out = ssr_server.generate(input_ids=chat_prompts[i], max_new_tokens=128, custom_params={"ssr_context": True})
        assert out["output_ids"] == ref["output_ids"]
        ssr = out["meta_info"]["ssr"]
        assert 0 <= ssr["accepted_suffix_context"] <= ssr["accepted_suffix"], ssr
        if ssr["drafts_started"]:
            assert ssr["context_tokens"] > 0, ssr
    closed = chat_prompts[1] + tokenizer("\n</think>\n\n", add_special_tokens=False).input_ids
    ref = ssr_server.generate(input_ids=closed, max_new_tokens=96, sampling={"ignore_eos": True})
    wrong = [(t + 1) % 500 for t in ref["output_ids"]]
    out = ssr_server.generate(input_ids=closed, max_new_tokens=96, sampling={"ignore_eos": True},
                              custom_params={"ssr_draft": wrong, "ssr_context": True})
    assert out["output_ids"] == ref["output_ids"]
    ssr = out["meta_info"]["ssr"]
    assert ssr["context_tokens"] == min(len(closed), 4096), ssr  # the whole prompt; no reasoning here
    assert "context_tokens" in ref["meta_info"]["ssr"] and ref["meta_info"]["ssr"]["context_tokens"] == 0


def test_every_verified_tree_has_distinct_siblings(ssr_server, chat_prompts, tokenizer):
    """Reasoning with drafts, n-gram rows, padding-only rows and branching suffix proposals, seven at a
    time: no tree handed to the verifier has two siblings with the same token. SGLang's n-gram corpus
    pads with token 0 under the root, so some padding was renamed (the check had something to catch).
    The corpus starts empty (``/flush_cache``): one that earlier tests filled has few contexts left without
    a full tree, so nothing would be padded."""
    flush_cache(ssr_server.url)
    before = ssr_server.server_info()["internal_states"][0]["ssr"]
    closed = chat_prompts[2] + tokenizer("\n</think>\n\n", add_special_tokens=False).input_ids
    ref = ssr_server.generate(input_ids=closed, max_new_tokens=64, sampling={"ignore_eos": True})["output_ids"]
    draft = (ref[:8] + ref[4:12]) * 3 + ref  # repeats: suffix matches with several continuations
    jobs = [dict(input_ids=chat_prompts[i], max_new_tokens=96) for i in (0, 3)]
    jobs += [dict(input_ids=closed, max_new_tokens=64, sampling={"ignore_eos": True},
                  custom_params={"ssr_draft": draft}), dict(input_ids=chat_prompts[4], max_new_tokens=64,
                                                           custom_params={"ssr": False})]
    # three more without drafts: from 6 n-gram rows on, the padding is renamed in one vectorised pass
    jobs += [dict(input_ids=chat_prompts[i % len(chat_prompts)], max_new_tokens=48, custom_params={"ssr": False})
             for i in (1, 5, 6)]
    with cf.ThreadPoolExecutor(len(jobs)) as pool:
        outs = list(pool.map(lambda j: ssr_server.generate(**j), jobs))
    assert sum(o["meta_info"]["ssr"]["drafts_started"] for o in outs[:2]) >= 1
    assert outs[2]["output_ids"] == ref
    after = ssr_server.server_info()["internal_states"][0]["ssr"]
    assert after["tree_checks"] - before["tree_checks"] >= 16, after  # requests x verify steps
    assert after["duplicate_siblings_seen"] == 0, after
    assert after["siblings_renamed"] > before["siblings_renamed"], after


def test_per_request_disable(ssr_server, chat_prompts, plain_outputs):
    out = ssr_server.generate(input_ids=chat_prompts[3], max_new_tokens=128, custom_params={"ssr": False})
    assert out["output_ids"] == plain_outputs[3]
    assert out["meta_info"]["ssr"]["drafts_started"] == 0
    meta = out["meta_info"]["ssr"]
    assert meta["enabled"] is False and meta["phase"] in ("reasoning", "answer")  # tracked, for stage times
    assert meta["reasoning_time_s"] > 0 and meta["reasoning_draft_steps"] == 0 and meta["draft_overhead_s"] == 0


@pytest.mark.parametrize("sampling,field", [
    ({"frequency_penalty": 0.5}, "frequency_penalty"), ({"presence_penalty": 0.3}, "presence_penalty"),
    ({"repetition_penalty": 1.2}, "repetition_penalty"), ({"min_p": 0.1, "temperature": 0.6}, "min_p"),
    ({"min_new_tokens": 4}, "min_new_tokens"), ({"logit_bias": {"5": 2.0}}, "logit_bias"),
])
def test_sampling_speculation_cannot_keep_exact_is_served_as_ngram(ssr_server, chat_prompts, sampling, field):
    """Penalties, min_p, min_new_tokens and logit_bias: no drafts, the reason in meta_info (docs/correctness.md).
    Sampled, a reasoning may end before the first checkpoint (no draft was due): up to 4 tries for one that
    reasons past it, each refused."""
    for _ in range(4):
        out = ssr_server.generate(input_ids=chat_prompts[0], max_new_tokens=128, sampling=sampling)
        ssr = out["meta_info"]["ssr"]
        assert ssr["drafts_started"] == 0 and field in ssr["disabled_reason"], ssr
        if ssr["reasoning_tokens"] > CHECKPOINTS[0]:
            break
    assert ssr["reasoning_tokens"] > CHECKPOINTS[0], ssr  # it reasoned past a checkpoint: a draft was due
    plain = ssr_server.generate(input_ids=chat_prompts[0], max_new_tokens=128, custom_params={"ssr": True})
    assert "disabled_reason" not in plain["meta_info"]["ssr"]


def test_per_request_schedule(ssr_server, chat_prompts):
    out = ssr_server.generate(input_ids=chat_prompts[4], max_new_tokens=128, sampling={"ignore_eos": True},
                              custom_params={"ssr_every": 20, "ssr_max_drafts": 3, "ssr_max_draft_tokens": 8})
    ssr = out["meta_info"]["ssr"]
    assert ssr["reasoning_tokens"] >= 60, ssr  # three checkpoints (20, 40, 60) are passed
    assert ssr["drafts_started"] == 3, ssr
    assert ssr["draft_tokens"] <= 3 * (8 + 7)  # a verify step may overshoot the cap by N-1 tokens


def test_non_reasoning_prompt_is_plain(ssr_server, plain_server):
    ref = plain_server.generate(text="count the items", max_new_tokens=48)
    out = ssr_server.generate(text="count the items", max_new_tokens=48)
    assert out["output_ids"] == ref["output_ids"]
    assert out["meta_info"]["ssr"]["drafts_started"] == 0


@pytest.mark.parametrize("params,field", [
    ({"ssr_every": -5, "ssr_max_drafts": 2}, "ssr_every"),
    ({"ssr_every": 10}, "ssr_max_drafts"),
    ({"ssr_checkpoints": ["a"]}, "ssr_checkpoints"),
    ({"ssr_checkpoints": [10**9]}, "ssr_checkpoints"),
    ({"ssr_max_draft_tokens": 0}, "ssr_max_draft_tokens"),
    ({"ssr": "yes"}, "ssr"),
    ({"ssr_fractions": [0.5]}, "ssr_thinking_budget"),
    ({"ssr_fractions": [1.5], "ssr_thinking_budget": 100}, "ssr_fractions"),
    ({"ssr_unknown": 1}, "ssr_unknown"),
    ({"ssr_draft": [1, -2]}, "ssr_draft"),
    ({"ssr_draft": [10**7]}, "ssr_draft"),
    ({"ssr_draft_x": [1]}, "ssr_draft_x"),
    ({"ssr_draft": []}, "ssr_draft"),
])
def test_bad_per_request_values_give_400(ssr_server, params, field):
    r = requests.post(ssr_server.url + "/generate", timeout=30,
                      json={"text": "hi", "sampling_params": {"max_new_tokens": 4, "custom_params": params}})
    assert r.status_code == 400, r.text
    assert field in r.json()["error"]["message"]


def test_bad_values_through_openai_extra_body(ssr_server):
    from openai import BadRequestError, OpenAI

    client = OpenAI(base_url=ssr_server.url + "/v1", api_key="none")
    model = client.models.list().data[0].id
    with pytest.raises(BadRequestError) as e:
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=4,
                                       extra_body={"custom_params": {"ssr_every": "often"}})
    assert "ssr_every" in str(e.value)
    ok = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=8,
                                        temperature=0, extra_body={"custom_params": {"ssr_checkpoints": [4]}})
    assert ok.choices[0].message.content and 1 <= ok.usage.completion_tokens <= 8, ok  # served, with the checkpoint


def _stream_then_abort(server, body, after_chunks):
    """Stream a request, abort it by rid after some chunks, return the number of chunks seen."""
    seen = 0
    with requests.post(server.url + "/generate", json={**body, "stream": True}, stream=True, timeout=120) as r:
        for line in r.iter_lines():
            if line.startswith(b"data:") and line != b"data: [DONE]":
                seen += 1
                if seen == after_chunks:
                    requests.post(server.url + "/abort_request", json={"rid": body["rid"]}, timeout=10)
    return seen


def ssr_totals(server) -> dict:
    return server.server_info()["internal_states"][0]["ssr"]


@pytest.mark.parametrize("phase", ["reasoning", "draft", "answer", "disconnect"])
def test_abort_in_each_phase_leaks_nothing(ssr_server, chat_prompts, tokenizer, phase):
    rid = f"abort-{phase}-{time.time_ns()}"
    before = ssr_totals(ssr_server)
    sp = {"max_new_tokens": 400, "temperature": 0, "ignore_eos": True}
    if phase == "reasoning":
        body = {"rid": rid, "input_ids": chat_prompts[5], "sampling_params": {**sp, "custom_params": {"ssr_checkpoints": [300]}}}
        _stream_then_abort(ssr_server, body, after_chunks=3)
    elif phase == "draft":  # a draft forks at 16 reasoning tokens and runs for up to 200 tokens
        body = {"rid": rid, "input_ids": chat_prompts[6],
                "sampling_params": {**sp, "custom_params": {"ssr_checkpoints": [16], "ssr_max_draft_tokens": 200}}}
        _stream_then_abort(ssr_server, body, after_chunks=25)
    elif phase == "answer":
        closed = chat_prompts[7] + tokenizer("\n</think>\n\n", add_special_tokens=False).input_ids
        body = {"rid": rid, "input_ids": closed, "sampling_params": {**sp, "custom_params": {"ssr_draft": list(range(5, 300))}}}
        _stream_then_abort(ssr_server, body, after_chunks=5)
    else:  # the client goes away mid-stream while a draft runs
        body = {"rid": rid, "input_ids": chat_prompts[8], "stream": True,
                "sampling_params": {**sp, "custom_params": {"ssr_checkpoints": [16], "ssr_max_draft_tokens": 200}}}
        with requests.post(ssr_server.url + "/generate", json=body, stream=True, timeout=60) as r:
            for i, _ in enumerate(r.iter_lines()):
                if i > 40:
                    break
    load = ssr_server.wait_idle(30.0)
    assert load["num_used_tokens"] == 0 and load["num_running_reqs"] == 0, load
    info = ssr_totals(ssr_server)
    assert info["active_drafts"] == 0 and info["active_requests"] == 0, info
    assert info["requests"] == before["requests"] + 1, (before, info)
    if phase in ("draft", "disconnect"):  # the draft was running when its parent ended: it was cancelled
        started = info["drafts_started"] - before["drafts_started"]
        assert started == 1 and info["drafts_cancelled"] - before["drafts_cancelled"] == 1, (before, info)
    out = ssr_server.generate(input_ids=chat_prompts[0], max_new_tokens=16)
    assert len(out["output_ids"]) == 16
    log = open(ssr_server.log_path).read()
    assert "leak" not in log.lower()


def test_server_info_totals(ssr_server, chat_prompts):
    before = ssr_totals(ssr_server)
    out = ssr_server.generate(input_ids=chat_prompts[0], max_new_tokens=128, sampling={"ignore_eos": True})
    meta = out["meta_info"]["ssr"]
    assert meta["drafts_started"] >= 1, meta
    info = ssr_totals(ssr_server)
    assert info["requests"] == before["requests"] + 1, (before, info)
    for key in ("drafts_started", "draft_tokens", "answer_tokens", "reasoning_tokens"):
        assert info[key] == before[key] + meta[key], (key, before, info, meta)
    assert info["active_requests"] == info["active_drafts"] == info["active_disabled"] == 0, info
    assert info["tree_checks"] > before["tree_checks"], info

# The SSR Engine (sglang.Engine, not a server): tests/srt/test_cpu_serving.py, beside the plain and NGRAM ones.
