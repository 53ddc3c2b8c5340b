"""SSR under SGLang's overlap scheduler, on CPU (``SSR_TEST_FORCE_OVERLAP_CPU=1``, tests only).

SGLang turns overlap scheduling off for speculative decoding on CPU, and so does SSR by default. Its
overlap loop (``Scheduler.event_loop_overlap``) runs on CPU all the same (the forward is synchronous there,
but results are still processed one step late and relayed through the future map), so this is the
one-step-late path a GPU server takes: proposals built before the previous step's tokens reach
``req.output_ids``, drafts forked and ended while the next batch is in flight, a finished draft in the
batch after it ended.
"""

from __future__ import annotations

import concurrent.futures as cf
import time

import pytest

from conftest import check_client_draft, start_server

pytestmark = pytest.mark.server

CHECKPOINTS = [16, 48, 96]
SSR_ENV = {"SSR_CHECKPOINTS": ",".join(map(str, CHECKPOINTS)), "SSR_MAX_DRAFT_TOKENS": "48", "SSR_MAX_BATCH": "32",
           "SSR_TEST_CHECK_TREES": "1", "SSR_TEST_FORCE_OVERLAP_CPU": "1"}


@pytest.fixture(scope="module")
def overlap_server(tiny_qwen3):
    with start_server(tiny_qwen3, "--speculative-algorithm", "SSR", "--speculative-num-draft-tokens", "8",
                      env=SSR_ENV, name="ssr-overlap") as s:
        yield s


def _ssr_info(server) -> dict:
    return server.server_info()["internal_states"][0]["ssr"]


def test_the_overlap_loop_serves_ssr(overlap_server):
    info = overlap_server.server_info()
    assert info["disable_overlap_schedule"] is False, info["disable_overlap_schedule"]
    assert _ssr_info(overlap_server)["overlap"]["schedule"] is True


def test_greedy_identical_to_plain_with_drafts(overlap_server, chat_prompts, plain_outputs):
    before = _ssr_info(overlap_server)
    outs = [overlap_server.generate(input_ids=p, max_new_tokens=128) for p in chat_prompts[:8]]
    assert [o["output_ids"] for o in outs] == plain_outputs[:8]
    metas = [o["meta_info"]["ssr"] for o in outs]
    assert sum(m["drafts_started"] for m in metas) >= 8, metas
    assert all(m["drafts_finished"] + m["drafts_cancelled"] == m["drafts_started"] for m in metas), metas
    after = _ssr_info(overlap_server)
    # proposals were built from tokens still pending in the relay (the one-step-late path ran)
    assert after["overlap"]["pending_steps"] > before["overlap"]["pending_steps"] + 100, after["overlap"]
    assert after["duplicate_siblings_seen"] == 0, after


def test_greedy_identical_to_plain_8_concurrent(overlap_server, chat_prompts, plain_outputs):
    with cf.ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(lambda p: overlap_server.generate(input_ids=p, max_new_tokens=128), chat_prompts[8:16]))
    assert [o["output_ids"] for o in outs] == plain_outputs[8:16]
    assert overlap_server.wait_idle(30.0)["num_used_tokens"] == 0


def test_a_draft_is_accepted_from_the_right_root(overlap_server, chat_prompts, tokenizer):
    """Under overlap, long acceptance needs the tree root to be the token the previous (not yet processed)
    step ended with."""
    check_client_draft(overlap_server, chat_prompts[1], tokenizer)


def test_forked_drafts_are_accounted_once(overlap_server, chat_prompts):
    """Drafts forked at checkpoints while the next batch is in flight each end once (finished or cancelled),
    one per checkpoint passed, at the step that passed it (as in the synchronous loop)."""
    metas = [overlap_server.generate(input_ids=p, max_new_tokens=128, sampling={"ignore_eos": True})["meta_info"]["ssr"]
             for p in chat_prompts[:4]]
    for m in metas:
        due = sum(c <= m["reasoning_tokens"] for c in CHECKPOINTS)
        assert m["drafts_started"] + m["drafts_skipped"] == due, m
        assert m["drafts_finished"] + m["drafts_cancelled"] == m["drafts_started"], m
        # forked at the first step past its checkpoint (a verify step writes at most 8 tokens)
        assert all(c <= d["checkpoint"] < c + 8 for c, d in zip(CHECKPOINTS, m["drafts"])), m


def test_abort_while_a_draft_runs_leaks_nothing(overlap_server, chat_prompts):
    import requests

    rid = f"overlap-abort-{time.time_ns()}"
    body = {"rid": rid, "input_ids": chat_prompts[6], "stream": True,
            "sampling_params": {"max_new_tokens": 400, "temperature": 0, "ignore_eos": True,
                                "custom_params": {"ssr_checkpoints": [16], "ssr_max_draft_tokens": 200}}}
    seen = 0
    with requests.post(overlap_server.url + "/generate", json=body, stream=True, timeout=120) as r:
        for line in r.iter_lines():
            if line.startswith(b"data:") and line != b"data: [DONE]":
                seen += 1
                if seen == 25:
                    requests.post(overlap_server.url + "/abort_request", json={"rid": rid}, timeout=10)
    assert seen >= 25


def test_no_state_or_kv_left_and_no_draft_output_reached_a_client(overlap_server, chat_prompts):
    load = overlap_server.wait_idle(30.0)
    assert load["num_used_tokens"] == 0 and load["num_running_reqs"] == 0, load
    info = _ssr_info(overlap_server)
    assert info["active_requests"] == info["active_drafts"] == info["active_disabled"] == 0, info
    assert info["drafts_started"] >= 12, info
    assert len(overlap_server.generate(input_ids=chat_prompts[0], max_new_tokens=16)["output_ids"]) == 16
    time.sleep(2)  # SGLang's idle leak check runs at least once a second
    log = open(overlap_server.log_path).read()
    assert "leak" not in log.lower()
    # a finished draft is in the batch after it ended; its output must not be sent again (SGLang's
    # tokenizer manager warns about output for a rid it does not know)
    assert "Received output for" not in log, [ln for ln in log.splitlines() if "Received output for" in ln][:3]
    # (SGLang's own start-up logs a traceback when its post-warmup gc freeze finds no server yet, plain too)
    assert "hit an exception" not in log and "SSR disabled" not in log
