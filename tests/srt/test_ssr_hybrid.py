"""SSR on a hybrid Gated DeltaNet model (tiny ``Qwen3_5ForCausalLM``: three linear-attention layers and one
full-attention layer) on real CPU servers: plain serving matches transformers, NGRAM and SSR match plain
greedily (batch 1 and 8 concurrent), drafts forked mid-reasoning get the parent's recurrent state at the
fork, token trees verified through the recurrent layers accept long drafts exactly, and aborts leave
nothing held.

One server per configuration, one up at a time: plain and NGRAM serve their requests inside a fixture
and stop; the SSR server serves the rest of the module.
"""

from __future__ import annotations

import concurrent.futures as cf
import time

import pytest

from conftest import PROMPT_TOPICS, start_server
from ssr_sglang.testing.http import flush_cache
from test_ssr_server import _stream_then_abort

pytestmark = pytest.mark.server

# SGLang on CPU: the mamba radix cache without snapshot buffers (extra_buffer needs a GPU platform),
# which runs only without the overlap scheduler.
HYBRID_ARGS = ("--mamba-radix-cache-strategy", "no_buffer", "--disable-overlap-schedule")
SPEC_ARGS = ("--speculative-num-draft-tokens", "8")
CHECKPOINTS = [16, 48, 96]
# SSR_VERIFY_WIDTH=adaptive: every step narrowed to the widest proposal in the batch (auto's narrowing, without its
# timing-dependent choices), so trees are verified through the recurrent layers at several widths
SSR_ENV = {"SSR_CHECKPOINTS": ",".join(map(str, CHECKPOINTS)), "SSR_MAX_DRAFT_TOKENS": "48", "SSR_MAX_BATCH": "32",
           "SSR_TEST_DRAFT_TOKENS": "1", "SSR_TEST_CHECK_TREES": "1", "SSR_VERIFY_WIDTH": "adaptive"}
N_PROMPTS = 8
NEW_TOKENS = 100


@pytest.fixture(scope="module")
def hybrid_model():
    from ssr_sglang.testing.tiny_models import cached_tiny_model

    return cached_tiny_model("qwen3_5")


@pytest.fixture(scope="module")
def hybrid_tokenizer(hybrid_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(hybrid_model)


@pytest.fixture(scope="module")
def prompts(hybrid_tokenizer):
    tok = hybrid_tokenizer
    texts = [tok.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True, tokenize=False)
             for t in PROMPT_TOPICS[:N_PROMPTS]]
    return [tok(t, add_special_tokens=False).input_ids for t in texts]


def _serve(server, prompts, concurrent=True):
    """Greedy outputs of every prompt one at a time, then (``concurrent``) all at once."""
    single = [server.generate(input_ids=p, max_new_tokens=NEW_TOKENS)["output_ids"] for p in prompts]
    if not concurrent:
        return single, None
    with cf.ThreadPoolExecutor(len(prompts)) as pool:
        together = list(pool.map(lambda p: server.generate(input_ids=p, max_new_tokens=NEW_TOKENS)["output_ids"],
                                 prompts))
    return single, together


@pytest.fixture(scope="module")
def plain_run(hybrid_model, prompts):
    with start_server(hybrid_model, *HYBRID_ARGS, name="hybrid-plain") as s:
        single, _ = _serve(s, prompts, concurrent=False)  # plain batches are exact on CPU (tests/srt)
        return {"single": single, "load": s.wait_idle(30.0)}


@pytest.fixture(scope="module")
def ngram_run(hybrid_model, prompts, plain_run):
    with start_server(hybrid_model, *HYBRID_ARGS, "--speculative-algorithm", "NGRAM", *SPEC_ARGS,
                      name="hybrid-ngram") as s:
        single, together = _serve(s, prompts)
        return {"single": single, "together": together, "load": s.wait_idle(30.0)}


@pytest.fixture(scope="module")
def ssr_server(hybrid_model, plain_run, ngram_run):
    with start_server(hybrid_model, *HYBRID_ARGS, "--speculative-algorithm", "SSR", *SPEC_ARGS, env=SSR_ENV,
                      name="hybrid-ssr") as s:
        yield s


@pytest.fixture(scope="module")
def float32_scored(hybrid_model, prompts):
    """A float32 plain server (conv states in float32 too; SGLang keeps them in bf16 by default): greedy
    tokens with their log-probabilities."""
    with start_server(hybrid_model, *HYBRID_ARGS, "--dtype", "float32", "--disable-radix-cache",
                      env={"SGLANG_MAMBA_CONV_DTYPE": "float32"}, name="hybrid-float32") as s:
        return [s.generate(input_ids=prompts[i], max_new_tokens=48, return_logprob=True)["meta_info"]
                ["output_token_logprobs"] for i in (0, 1, 2)]


def test_plain_serving_matches_transformers(hybrid_model, prompts, float32_scored, plain_run):
    """The stand-in ops compute the model transformers computes: in float32, the same greedy tokens and
    log-probabilities within 1e-3. (In bf16 both round differently: their greedy outputs part where the
    top two logits of this random model are within bf16 rounding.)"""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(hybrid_model, dtype=torch.float32)
    for i, scored in enumerate(float32_scored):
        tokens = [t for _, t, _ in scored]
        ids = torch.tensor([prompts[i]])
        assert model.generate(ids, max_new_tokens=48, do_sample=False)[0, ids.shape[1]:].tolist() == tokens
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([prompts[i] + tokens])).logits[0, len(prompts[i]) - 1: -1], -1)
        for j, (lp, tok, _) in enumerate(scored):
            assert abs(logp[j, tok].item() - lp) < 1e-3, (i, j, logp[j, tok].item(), lp)
    assert plain_run["load"]["num_used_tokens"] == 0


def test_ngram_identical_to_plain(plain_run, ngram_run):
    assert ngram_run["single"] == plain_run["single"]
    assert ngram_run["together"] == plain_run["single"]
    assert ngram_run["load"]["num_used_tokens"] == 0


def test_ssr_identical_to_plain_batch_1(ssr_server, prompts, plain_run):
    forked = cached = prompt_tokens = steps = nodes = 0
    for prompt, ref in zip(prompts, plain_run["single"]):
        out = ssr_server.generate(input_ids=prompt, max_new_tokens=NEW_TOKENS)
        assert out["output_ids"] == ref
        ssr = out["meta_info"]["ssr"]
        steps, nodes = steps + ssr["verify_steps"], nodes + ssr["verify_nodes"]
        if ssr["reasoning_tokens"] >= CHECKPOINTS[0] + 8:
            assert ssr["drafts_started"] >= 1, ssr
        forked += ssr["drafts_started"]
        cached += ssr["draft_cached_tokens"]
        prompt_tokens += ssr["draft_prompt_tokens"]
    assert forked >= len(prompts)
    # A draft reuses the parent's KV and recurrent state up to the fork (a cache hit needs both on a
    # hybrid model): it prefills only the forced think end and the last reasoning token.
    assert cached >= 0.9 * prompt_tokens, (cached, prompt_tokens)
    assert nodes < int(SPEC_ARGS[1]) * steps, (nodes, steps)  # narrowed steps through the recurrent layers


def test_ssr_identical_to_plain_8_concurrent(ssr_server, prompts, plain_run):
    with cf.ThreadPoolExecutor(len(prompts)) as pool:
        outs = list(pool.map(lambda p: ssr_server.generate(input_ids=p, max_new_tokens=NEW_TOKENS), prompts))
    assert [o["output_ids"] for o in outs] == plain_run["single"]
    assert sum(o["meta_info"]["ssr"]["drafts_started"] for o in outs) >= 1
    assert ssr_server.wait_idle(30.0)["num_used_tokens"] == 0


def test_draft_starts_from_the_parents_recurrent_state(ssr_server, prompts):
    """Each draft's tokens are what a plain request with the draft's prompt writes from an empty cache:
    the fork handed the draft the conv and recurrent state (and KV) the parent had at that point."""
    out = ssr_server.generate(input_ids=prompts[2], max_new_tokens=NEW_TOKENS, sampling={"ignore_eos": True})
    drafts = [d for d in out["meta_info"]["ssr"]["drafts"] if len(d.get("output_ids") or ()) >= 4]
    assert drafts, out["meta_info"]["ssr"]
    compared = 0
    for d in drafts:
        assert d["input_ids"][: len(prompts[2])] == prompts[2]
        flush_cache(ssr_server.url)
        n = len(d["output_ids"])
        ref = ssr_server.generate(input_ids=d["input_ids"], max_new_tokens=n, sampling={"ignore_eos": True},
                                  custom_params={"ssr": False})
        assert ref["meta_info"]["cached_tokens"] == 0  # computed from scratch, not from the draft's cache
        assert d["output_ids"] == ref["output_ids"], (d["checkpoint"], d["seeded"])
        compared += n
    assert compared >= 16


def test_tree_verify_through_recurrent_layers_is_exact(ssr_server, prompts, hybrid_tokenizer):
    """A client draft that is the answer is accepted many tokens per step; one with wrong tokens makes the
    verifier branch (suffix re-anchoring, several siblings per level), and the output stays plain's."""
    before = ssr_server.server_info()["internal_states"][0]["ssr"]
    closed = prompts[1] + hybrid_tokenizer("\n</think>\n\n", add_special_tokens=False).input_ids
    ref = ssr_server.generate(input_ids=closed, max_new_tokens=96, sampling={"ignore_eos": True},
                              custom_params={"ssr": False})["output_ids"]
    good = ssr_server.generate(input_ids=closed, max_new_tokens=96, sampling={"ignore_eos": True},
                               custom_params={"ssr_draft": ref})
    assert good["output_ids"] == ref
    ssr = good["meta_info"]["ssr"]
    assert ssr["answer_accept_length"] > 3 and ssr["accepted_prefix"] > 48, ssr
    edited = list(ref)
    for i in (10, 40, 70):
        edited[i] = (edited[i] + 7) % 500
    draft = (edited[:8] + edited[4:12]) * 2 + edited  # repeats: suffix matches with several continuations
    out = ssr_server.generate(input_ids=closed, max_new_tokens=96, sampling={"ignore_eos": True},
                              custom_params={"ssr_draft": draft})
    assert out["output_ids"] == ref
    assert out["meta_info"]["ssr"]["accepted_suffix"] > 0, out["meta_info"]["ssr"]
    after = ssr_server.server_info()["internal_states"][0]["ssr"]
    assert after["duplicate_siblings_seen"] == before["duplicate_siblings_seen"] == 0, after


@pytest.mark.parametrize("phase", ["draft", "answer"])
def test_abort_leaves_no_state_held(ssr_server, prompts, hybrid_tokenizer, phase):
    rid = f"hybrid-abort-{phase}-{time.time_ns()}"
    sp = {"max_new_tokens": 300, "temperature": 0, "ignore_eos": True}
    if phase == "draft":
        body = {"rid": rid, "input_ids": prompts[3],
                "sampling_params": {**sp, "custom_params": {"ssr_checkpoints": [16], "ssr_max_draft_tokens": 200}}}
        _stream_then_abort(ssr_server, body, after_chunks=25)
    else:
        closed = prompts[4] + hybrid_tokenizer("\n</think>\n\n", add_special_tokens=False).input_ids
        body = {"rid": rid, "input_ids": closed,
                "sampling_params": {**sp, "custom_params": {"ssr_draft": list(range(5, 300))}}}
        _stream_then_abort(ssr_server, body, after_chunks=5)
    load = ssr_server.wait_idle(30.0)
    assert load["num_used_tokens"] == 0 and load["num_running_reqs"] == 0, load
    info = ssr_server.server_info()["internal_states"][0]["ssr"]
    assert info["active_drafts"] == 0 and info["active_requests"] == 0, info
    # Every mamba slot is free or held by the radix cache (SGLang's idle invariant check logs a leak
    # otherwise); flushing the cache must succeed and the server keeps serving.
    flush_cache(ssr_server.url)
    assert len(ssr_server.generate(input_ids=prompts[0], max_new_tokens=16)["output_ids"]) == 16
    assert "leak" not in open(ssr_server.log_path).read().lower()
