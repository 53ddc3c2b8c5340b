"""Every way a request ends leaves no SSR state; a failure in SSR code never fails a batch.

One SSR server for the module: a 2048-token KV pool, priority scheduling with preemption and a
short queue (so queued requests are evicted), ``SGLANG_TEST_RETRACT=1`` (SGLang's test switch: a
running request is retracted every few decode steps), and ``SSR_TEST_FAULTS`` armed at every point
where SSR code runs in the scheduler (a point raises only for requests whose rid contains
``fault-<point>``; see :mod:`ssr_sglang.srt.faults`). Also ``/flush_cache`` between and after requests
with drafts, and a request aborted when the pool runs out of KV.
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
import time

import pytest
import requests

from conftest import start_server

pytestmark = pytest.mark.server

ENV = {"SSR_CHECKPOINTS": "8,24,48", "SSR_MAX_DRAFT_TOKENS": "64", "SSR_MAX_BATCH": "32",
       "SGLANG_TEST_RETRACT": "1", "SSR_TEST_FAULTS": "fork,propose,step,finish"}
TEXT = "count the items then add"


@pytest.fixture(scope="module")
def refs(plain_server, plain_outputs):
    """Plain decoding's greedy outputs, from the session's plain server (the server this module once
    started for itself had the same arguments): 128 tokens of every chat prompt, and 48 of ``TEXT``."""
    return plain_outputs, plain_server.generate(text=TEXT, max_new_tokens=48)["output_ids"]


@pytest.fixture(scope="module")
def server(tiny_qwen3, refs):
    with start_server(tiny_qwen3, "--speculative-algorithm", "SSR", "--speculative-num-draft-tokens", "8",
                      "--max-total-tokens", "2048", "--enable-priority-scheduling", "--max-queued-requests", "16",
                      "--priority-scheduling-preemption-threshold", "5", env=ENV, name="lifecycle-ssr") as s:
        yield s


def ssr_info(server) -> dict:
    return server.server_info()["internal_states"][0]["ssr"]


def assert_no_state(server):
    """Nothing running or queued, no KV in use, no SSR state, no leak report."""
    load = server.wait_idle(90.0)
    assert load["num_used_tokens"] == 0 and load["num_running_reqs"] == 0 and load["num_waiting_reqs"] == 0, load
    deadline = time.time() + 10
    while True:  # the idle hook reconciles on the scheduler's next idle pass
        info = ssr_info(server)
        if (info["active_requests"], info["active_drafts"], info["active_disabled"]) == (0, 0, 0) \
                or time.time() > deadline:
            break
        time.sleep(0.2)
    assert (info["active_requests"], info["active_drafts"], info["active_disabled"]) == (0, 0, 0), info
    log = open(server.log_path, errors="replace").read()
    assert "leak" not in log.lower(), [ln for ln in log.splitlines() if "leak" in ln.lower()][:3]


def gen(server, rid, input_ids=None, text=None, max_new_tokens=64, custom_params=None, priority=None, sampling=None):
    body = {"rid": rid, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0, **(sampling or {})}}
    if custom_params:
        body["sampling_params"]["custom_params"] = custom_params
    if priority is not None:
        body["priority"] = priority
    body.update({"input_ids": list(input_ids)} if input_ids is not None else {"text": text})
    r = requests.post(server.url + "/generate", json=body, timeout=300)
    return r.status_code, r.json()


# -- contained failures --------------------------------------------------------------------------------
def test_faults_disable_ssr_for_the_request_only(server, refs, chat_prompts, plain_outputs):
    """Faults at fork, proposal building and finishing, among normal requests, all at once: every
    request completes with plain's output; a faulted request says why SSR was turned off for it."""
    draft = refs[1]
    jobs = []  # (rid, kwargs, expected output)
    for i in range(3):
        jobs.append((f"fault-fork-{i}-{time.time_ns()}", dict(input_ids=chat_prompts[i]), plain_outputs[i][:64]))
        jobs.append((f"fault-finish-{i}-{time.time_ns()}", dict(input_ids=chat_prompts[3 + i]),
                     plain_outputs[3 + i][:64]))
        jobs.append((f"fault-propose-{i}-{time.time_ns()}", dict(text=TEXT, max_new_tokens=48,
                                                                 custom_params={"ssr_draft": draft}), draft))
        jobs.append((f"ok-{i}-{time.time_ns()}", dict(input_ids=chat_prompts[6 + i]), plain_outputs[6 + i][:64]))
    with cf.ThreadPoolExecutor(6) as pool:  # the queue holds 16: none is turned away
        outs = list(pool.map(lambda j: gen(server, j[0], **j[1]), jobs))
    for (rid, _, expected), (status, out) in zip(jobs, outs):
        assert status == 200, (rid, out)
        assert out["output_ids"] == expected, rid
        ssr = out["meta_info"]["ssr"]
        if rid.startswith("fault-fork"):  # a draft was due at 8 reasoning tokens: the fork ran and failed
            assert "forking a draft failed" in ssr["disabled_reason"], (rid, ssr)
            assert ssr["drafts_started"] == 0, ssr
        elif rid.startswith("fault-propose"):
            assert "building proposals failed" in ssr["disabled_reason"], (rid, ssr)
        elif rid.startswith("fault-finish"):  # strikes a draft of it ending (the parent's SSR goes off) or
            # the request itself ending, after its output was built
            assert "settling the finished request failed" in ssr.get("disabled_reason", "settling the finished "
                                                                                  "request failed"), (rid, ssr)
        else:  # normal requests are untouched
            assert "disabled_reason" not in ssr, (rid, ssr)
    assert sum(o["meta_info"]["ssr"]["drafts_started"] for (rid, _, _), (_, o) in zip(jobs, outs)
               if rid.startswith("ok-")) >= 1, "no normal request forked a draft: the fork fault went untested"
    log = open(server.log_path, errors="replace").read()
    for point in ("fork", "propose", "finish"):  # each kind of failure logged once with its traceback
        assert f"injected fault at {point} (fault-{point}-" in log, point
    assert_no_state(server)


def test_step_bookkeeping_fault(server, chat_prompts, plain_outputs):
    """A failure in per-batch bookkeeping turns SSR off for the batch's requests; output unchanged."""
    jobs = [(f"fault-step-{time.time_ns()}", 0), (f"ok-step-{time.time_ns()}", 1)]
    with cf.ThreadPoolExecutor(2) as pool:
        outs = list(pool.map(lambda j: gen(server, j[0], input_ids=chat_prompts[j[1]]), jobs))
    for (rid, i), (status, out) in zip(jobs, outs):
        assert status == 200 and out["output_ids"] == plain_outputs[i][:64], rid
    assert "step bookkeeping failed" in outs[0][1]["meta_info"]["ssr"]["disabled_reason"]
    assert_no_state(server)


# -- every ending ------------------------------------------------------------------------------------------
def test_mixed_priority_aborts_retraction_eviction_leave_no_state(server, chat_prompts, plain_outputs):
    """24 concurrent reasoning requests of mixed priority (preemption), a queue of 16 (eviction of queued,
    possibly retracted, requests), forced retraction, and every other request aborted after 1.5 s. The
    aborted ones ask for 1024 tokens, so they are still running or queued when the abort comes, however
    fast the machine (with 128 they could all finish first: seen in CI)."""
    n = 24
    tag = time.time_ns()
    rids = [f"mix-{tag}-{i}" for i in range(n)]
    statuses = {}

    def client(i):
        try:
            status, out = gen(server, rids[i], input_ids=chat_prompts[i % len(chat_prompts)],
                              max_new_tokens=(1024 if i % 2 else 128),
                              priority=(20 if i % 3 == 0 else 0), sampling={"ignore_eos": True})
        except requests.RequestException as e:
            status, out = -1, {"error": repr(e)}
        statuses[i] = (status, out)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    time.sleep(1.5)
    for i in range(1, n, 2):
        requests.post(server.url + "/abort_request", json={"rid": rids[i]}, timeout=10)
    for t in threads:
        t.join(timeout=300)
    assert len(statuses) == n
    finished = [i for i, (s, o) in statuses.items() if s == 200 and o["meta_info"]["finish_reason"]["type"] == "length"]
    for i in finished:  # whatever else happened, a request that ran to its end is exact (up to plain's EOS)
        ref = plain_outputs[i % len(plain_outputs)]
        assert statuses[i][1]["output_ids"][:len(ref)] == ref, i
    ended_otherwise = n - len(finished)
    summary = sorted((s, o["meta_info"]["finish_reason"]["type"] if s == 200 else str(o.get("error", o))[:80])
                     for s, o in statuses.values())
    assert ended_otherwise >= 3, summary  # aborts did happen
    log = open(server.log_path, errors="replace").read()
    assert "retract" in log.lower()
    assert_no_state(server)
    info = ssr_info(server)
    print("lifecycle:", {k: info[k] for k in ("ended_by_abort_output", "reconciled")},
          "statuses:", sorted((s, o.get("meta_info", {}).get("finish_reason", {}).get("type") if isinstance(o, dict)
                               else None) for s, o in statuses.values()))
    # and the server still serves exactly
    out = server.generate(input_ids=chat_prompts[2], max_new_tokens=32)["output_ids"]
    assert out == plain_outputs[2][:32]


# -- cache flushes and KV exhaustion ----------------------------------------------------------------------
def flush(server, timeout: float = 0.0):
    return requests.post(server.url + "/flush_cache", params={"timeout": timeout}, timeout=timeout + 60)


def flush_when_idle(server) -> None:
    """``/flush_cache`` once the drafts a finished request left behind are gone (SGLang refuses it while
    anything runs or waits)."""
    deadline = time.time() + 60
    while (r := flush(server)).status_code != 200:
        assert time.time() < deadline, r.text
        time.sleep(0.2)


def test_flush_cache_between_and_after_requests_with_drafts(server, refs, chat_prompts, plain_outputs,
                                                            tokenizer):
    """A flush after each request with drafts, a flush asked for while requests with drafts run (refused
    at once; deferred until idle with a timeout), a flush after a client-draft request: no SSR state is
    left, and the next requests, from a cold cache, are still exact."""
    tag = time.time_ns()
    for i in (0, 1, 0):  # the same prompt again after the flush: a cold cache
        status, out = gen(server, f"flush-{tag}-{i}-{time.time_ns()}", input_ids=chat_prompts[i])
        assert status == 200 and out["output_ids"] == plain_outputs[i][:64], i
        assert out["meta_info"]["ssr"]["drafts_started"] >= 1, out["meta_info"]["ssr"]
        flush_when_idle(server)
        assert_no_state(server)

    outs, deferred = {}, {}

    def client(i):
        outs[i] = gen(server, f"flush-{tag}-together-{i}", input_ids=chat_prompts[i], max_new_tokens=128)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(2, 6)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    refused = flush(server)
    waiter = threading.Thread(target=lambda: deferred.setdefault("r", flush(server, timeout=120)))
    waiter.start()
    for t in threads + [waiter]:
        t.join(timeout=300)
    assert refused.status_code == 400, refused.text  # requests were running
    assert deferred["r"].status_code == 200, deferred["r"].text  # flushed once they were done
    for i in range(2, 6):
        assert outs[i][0] == 200 and outs[i][1]["output_ids"] == plain_outputs[i], i
    assert sum(outs[i][1]["meta_info"]["ssr"]["drafts_started"] for i in outs) >= 2
    assert_no_state(server)

    closed = chat_prompts[1] + tokenizer("\n</think>\n\n", add_special_tokens=False).input_ids
    first = server.generate(input_ids=closed, max_new_tokens=48, sampling={"ignore_eos": True})["output_ids"]
    status, out = gen(server, f"flush-{tag}-client-draft", input_ids=closed, max_new_tokens=48,
                      custom_params={"ssr_draft": first}, sampling={"ignore_eos": True})
    assert status == 200 and out["output_ids"] == first and out["meta_info"]["ssr"]["accepted_prefix"] > 24
    flush_when_idle(server)
    assert_no_state(server)
    assert server.generate(input_ids=chat_prompts[2], max_new_tokens=32)["output_ids"] == plain_outputs[2][:32]


def test_kv_exhaustion_abort_leaves_no_state(server, chat_prompts, plain_outputs):
    """A reasoning request as long as the 2048-token KV pool allows (SGLang caps its max_new_tokens so
    that prompt + output fit, but a speculative decode step also reserves 2 x 8 slots past its length)
    runs out of KV near its end: ``retract_decode`` retracts whatever else runs, then aborts it. Beside
    it, reasoning requests with drafts (retracted, resumed); and a prompt longer than the pool, refused.
    Afterwards no SSR state, no KV in use, no leak, and exact output (also after a flush)."""
    tag = time.time_ns()
    filler = [t for p in chat_prompts for t in p]
    long_prompt = (filler * 20)[: 1900 - len(chat_prompts[7])] + chat_prompts[7]  # ends in an open think block
    too_long = (filler * 20)[:2100]
    results = {}
    ended_by_abort = ssr_info(server)["ended_by_abort_output"]

    def client(key, **kw):
        try:
            results[key] = gen(server, f"oom-{tag}-{key}", **kw)
        except requests.RequestException as e:
            results[key] = (-1, {"error": repr(e)})

    threads = [threading.Thread(target=client, args=(i,), kwargs=dict(input_ids=chat_prompts[i], max_new_tokens=128))
               for i in range(3, 6)]
    threads.append(threading.Thread(target=client, args=("long",), kwargs=dict(
        input_ids=long_prompt, max_new_tokens=1024, sampling={"ignore_eos": True})))
    threads.append(threading.Thread(target=client, args=("too-long",), kwargs=dict(input_ids=too_long)))
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    status, out = results["too-long"]
    assert status == 400, (status, out)
    status, out = results["long"]
    reason = out.get("meta_info", {}).get("finish_reason", {}) if isinstance(out, dict) else {}
    assert status != 200 or reason.get("type") == "abort", (status, reason, len(out.get("output_ids", [])))
    for i in range(3, 6):
        assert results[i][0] == 200 and results[i][1]["output_ids"] == plain_outputs[i], i
    log = open(server.log_path, errors="replace").read()
    assert any("retract_decode: aborted" in ln and f"oom-{tag}-long" in ln for ln in log.splitlines()), \
        "the long request was not aborted for lack of KV"
    assert_no_state(server)
    # SGLang ended it through send_abort_output, where SSR settles its state (not left to the idle sweep)
    assert ssr_info(server)["ended_by_abort_output"] > ended_by_abort
    flush_when_idle(server)
    assert_no_state(server)
    assert server.generate(input_ids=chat_prompts[2], max_new_tokens=32)["output_ids"] == plain_outputs[2][:32]
