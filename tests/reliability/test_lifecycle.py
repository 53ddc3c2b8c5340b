"""Every way a request ends leaves no SSR state; a failure in SSR code never fails a batch.

One SSR server for the module: a 2048-token KV pool, priority scheduling with preemption and a
short queue (so queued requests are evicted), ``SGLANG_TEST_RETRACT=1`` (SGLang's test switch: a
running request is retracted every few decode steps), and ``SSR_TEST_FAULTS`` armed at every point
where SSR code runs in the scheduler (a point raises only for requests whose rid contains
``fault-<point>``; see :mod:`ssr_sglang.srt.faults`).
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
def refs(tiny_qwen3, chat_prompts):
    """Plain decoding's greedy outputs (a plain server of its own, stopped before the SSR server starts:
    one server at a time): 128 tokens of every chat prompt, and 48 of ``TEXT``."""
    with start_server(tiny_qwen3, name="lifecycle-plain") as plain:
        outs = [plain.generate(input_ids=p, max_new_tokens=128)["output_ids"] for p in chat_prompts]
        text = plain.generate(text=TEXT, max_new_tokens=48)["output_ids"]
    return outs, text


@pytest.fixture(scope="module")
def plain_outputs(refs):
    return refs[0]


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
    assert log.count("InjectedFault") >= 2  # each kind of failure logged once with its traceback
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
