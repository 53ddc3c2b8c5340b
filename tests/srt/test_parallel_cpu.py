"""Tensor and data parallelism on real CPU servers (issue 16): ``--tp-size 2`` and ``--dp-size 2``.

Greedy outputs of plain decoding and SSR with TP=2, and of SSR with DP=2, are compared token for
token with a TP=1 plain server on the same prompts (batch 1 and 8 concurrent); under TP=2 drafts are
forked and the ranks' decision digests (ssr_sglang.srt.consensus: draft rids, fork points, skips,
decision reasons, proposal trees, accepted lengths) are compared after every scheduler step. One server
per configuration, each stopped before the next starts (a class-scoped fixture): this 2-core machine
runs one TP group at a time. NGRAM under TP is SGLang's own algorithm, so it has no server here (the
upstream fixes the plugin applies to every speculative server are tested in tests/srt/test_sglang_fixes.py).
"""

from __future__ import annotations

import concurrent.futures as cf
import random

import pytest

from conftest import start_server

pytestmark = pytest.mark.server

MAX_NEW = 128
BATCH1 = 4  # prompts served one at a time (the 8 concurrent ones are the first 8)
SSR_ENV = {"SSR_CHECKPOINTS": "16,48,96", "SSR_MAX_DRAFT_TOKENS": "48", "SSR_MAX_BATCH": "32"}
BUNDLED_ENV = {"SSR_EVERY": "16", "SSR_MAX_DRAFTS": "8", "SSR_MAX_DRAFT_TOKENS": "112"}
BUNDLED_NEW = 512
# float32: in bf16 a TP=2 row-parallel layer rounds each rank's partial sum before the all-reduce, so
# plain TP=2 decoding itself leaves TP=1's greedy path at the first near-tie (on the test model within a
# few tokens); in float32 the summation order is the only difference. SSR's own guarantee, output
# identical to plain decoding at the same TP size, is checked here through both equalling TP=1.
FP32 = "float32"


@pytest.fixture(scope="module")
def bundled_prompts():
    from transformers import AutoTokenizer

    from ssr_sglang.models import bundled_model_path, tasks

    tok = AutoTokenizer.from_pretrained(bundled_model_path())
    rng = random.Random(1616)
    return [tok(tasks.format_chat(tasks.make_example(rng)["prompt"]), add_special_tokens=False).input_ids
            for _ in range(4)]


@pytest.fixture(scope="module")
def references(tiny_qwen3, chat_prompts, bundled_prompts):
    """TP=1 plain decoding: the test model's first 8 chat prompts and the bundled model's 4 tasks."""
    from ssr_sglang.models import bundled_model_path

    with _server(tiny_qwen3, name="parallel-tp1-plain") as s:
        tiny = [s.generate(input_ids=p, max_new_tokens=MAX_NEW)["output_ids"] for p in chat_prompts[:8]]
    with _server(bundled_model_path(), name="parallel-tp1-bundled") as s:
        bundled = [s.generate(input_ids=p, max_new_tokens=BUNDLED_NEW)["output_ids"] for p in bundled_prompts]
    return {"tiny": tiny, "bundled": bundled}


def _concurrent(server, prompts, **kw):
    with cf.ThreadPoolExecutor(len(prompts)) as pool:
        return list(pool.map(lambda p: server.generate(input_ids=p, max_new_tokens=MAX_NEW, **kw), prompts))


def _check_identical(server, prompts, refs) -> list:
    outs = [server.generate(input_ids=p, max_new_tokens=MAX_NEW) for p in prompts[:BATCH1]]
    assert [o["output_ids"] for o in outs] == refs[:BATCH1]  # batch 1
    together = _concurrent(server, prompts[:8])
    assert [o["output_ids"] for o in together] == refs[:8]  # 8 concurrent
    return outs + together


def _consensus(server) -> dict:
    return server.server_info()["internal_states"][0]["ssr"]["consensus"]


def _server(model, *args, name, env=None):
    return start_server(model, "--dtype", FP32, *args, env=env, name=name)


@pytest.fixture(scope="class")
def tp2_plain(tiny_qwen3, references):
    with _server(tiny_qwen3, "--tp-size", "2", name="parallel-tp2-plain") as s:
        yield s


@pytest.fixture(scope="class")
def tp2_ssr(tiny_qwen3, references):
    with _server(tiny_qwen3, "--tp-size", "2", "--speculative-algorithm", "SSR", "--speculative-num-draft-tokens",
                 "8", env=SSR_ENV, name="parallel-tp2-ssr") as s:
        yield s


@pytest.fixture(scope="class")
def tp2_bundled(references):
    from ssr_sglang.models import bundled_model_path

    with _server(bundled_model_path(), "--tp-size", "2", "--speculative-algorithm", "SSR", "--reasoning-parser",
                 "qwen3", env=BUNDLED_ENV, name="parallel-tp2-bundled") as s:
        yield s


@pytest.fixture(scope="class")
def dp2_ssr(tiny_qwen3, references):
    with _server(tiny_qwen3, "--dp-size", "2", "--speculative-algorithm", "SSR", "--speculative-num-draft-tokens",
                 "8", env=SSR_ENV, name="parallel-dp2-ssr") as s:
        yield s


class TestTP2Plain:
    def test_greedy_identical_to_tp1(self, tp2_plain, chat_prompts, references):
        _check_identical(tp2_plain, chat_prompts, references["tiny"])


class TestTP2SSR:

    def test_greedy_identical_to_tp1_with_drafts_and_rank_consensus(self, tp2_ssr, chat_prompts, references):
        outs = _check_identical(tp2_ssr, chat_prompts, references["tiny"])
        metas = [o["meta_info"]["ssr"] for o in outs]
        assert sum(m["drafts_started"] for m in metas) >= 4, metas
        con = _consensus(tp2_ssr)
        # every scheduler step compared both ranks' digests; a mismatch would have stopped the server
        assert con["ranks"] == 2 and con["every"] == 1 and con["checks"] == con["steps"] > 100, con
        assert con["agreed"] and len(con["rank_digests"]) == 2, con
        assert con["records"] > con["checks"], con  # trees and decisions were folded, not just steps
        assert tp2_ssr.wait_idle(30.0)["num_used_tokens"] == 0

    def test_cost_aware_policy_follows_the_fixed_schedule_under_tp(self, tp2_ssr, chat_prompts):
        """The policy's inputs are per-rank timers: under TP every request follows its schedule."""
        out = tp2_ssr.generate(input_ids=chat_prompts[0], max_new_tokens=MAX_NEW, sampling={"ignore_eos": True},
                              custom_params={"ssr_policy": "auto"})
        meta = out["meta_info"]["ssr"]
        assert meta["policy"] == "auto" and meta["decisions"], meta
        forks = [d for d in meta["decisions"] if d["fork"]]
        assert forks and all(d["reason"].startswith("tensor parallel: fixed schedule") for d in forks), meta
        assert "policy" not in tp2_ssr.server_info()["internal_states"][0]["ssr"]
        assert _consensus(tp2_ssr)["agreed"]


class TestTP2Bundled:
    """The bundled reasoning model under TP=2: SSR output identical to TP=1 plain, drafts accepted."""

    def test_ssr_identical_to_tp1_plain(self, tp2_bundled, bundled_prompts, references):
        outs = [tp2_bundled.generate(input_ids=p, max_new_tokens=BUNDLED_NEW) for p in bundled_prompts[:2]]
        with cf.ThreadPoolExecutor(4) as pool:
            outs += list(pool.map(lambda p: tp2_bundled.generate(input_ids=p, max_new_tokens=BUNDLED_NEW),
                                  bundled_prompts))
        assert [o["output_ids"] for o in outs] == references["bundled"][:2] + references["bundled"]
        metas = [o["meta_info"]["ssr"] for o in outs]
        assert all(m["phase"] == "answer" for m in metas), metas
        # one at a time every request drafts; 4 at once some checkpoints are skipped (requests waiting)
        assert all(m["drafts_started"] >= 1 for m in metas[:2]) and sum(m["drafts_started"] for m in metas[2:]), metas
        assert sum(m["accepted_prefix"] for m in metas) > 0, metas
        con = _consensus(tp2_bundled)
        assert con["agreed"] and con["checks"] == con["steps"] > 0, con


class TestDP2SSR:
    """``--dp-size 2``: two replicas behind SGLang's DP controller; a draft runs on its parent's replica."""

    def test_greedy_identical_and_drafts_stay_on_their_replica(self, dp2_ssr, chat_prompts, references):
        def replicas():  # /server_info lists one state per replica, in no fixed order
            states = {st["ssr"]["dp_rank"]: st["ssr"] for st in dp2_ssr.server_info()["internal_states"]}
            assert sorted(states) == [0, 1], states.keys()
            return states

        before = replicas()
        outs = _check_identical(dp2_ssr, chat_prompts, references["tiny"])
        after = replicas()
        by_replica = {0: [], 1: []}
        for o in outs:
            by_replica[o["meta_info"]["dp_rank"]].append(o["meta_info"]["ssr"])
        assert by_replica[0] and by_replica[1], "round robin sends requests to both replicas"
        for r in (0, 1):
            started = sum(m["drafts_started"] for m in by_replica[r])
            # a replica's totals count the drafts of the requests it served, and each of them ended on
            # that replica: a draft that ran elsewhere would find no parent there to settle with
            assert after[r]["drafts_started"] - before[r]["drafts_started"] == started, (r, after[r])
            assert after[r]["requests"] - before[r]["requests"] == len(by_replica[r]), (r, after[r])
            assert after[r]["active_drafts"] == 0 and after[r]["active_requests"] == 0, (r, after[r])
        assert sum(m["drafts_started"] for m in by_replica[0] + by_replica[1]) >= 4
        for m in by_replica[0] + by_replica[1]:
            assert m["drafts_finished"] + m["drafts_cancelled"] == m["drafts_started"], m
