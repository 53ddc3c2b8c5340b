"""Exact mode (``SSR_CPU_EXACT_VERIFY=1``) on a real pretrained model: SmolLM2-135M-Instruct in bf16,
8 prompts x 192 greedy tokens, all at once; SSR's outputs (and, on the first 2 x 128, those of requests with SSR off:
SGLang's n-gram proposals, as under NGRAM) token-identical to plain's.

SSR gets plain's output with every 40th token changed as each prompt's client draft, so its answer is
verified from draft proposals (prefix and suffix), not only n-gram ones. One server works at a time (the SmolLM2 SSR
server waits, idle, while the reasoner's two run).
A difference is reported with the position and plain's own top-2 log-probability gap there.
"""

from __future__ import annotations

import pytest

pytest.importorskip("gguf")
pytest.importorskip("accelerate")

from conftest import start_server  # noqa: E402

from ssr_sglang.testing.exactness import chat_prompts, edited, first_differences, run  # noqa: E402

pytestmark = pytest.mark.server

EXACT = {"SSR_CPU_EXACT_VERIFY": "1"}
SPEC = ("--speculative-num-draft-tokens", "8")
TOKENS = 192  # every 40th token of the client draft changed: 4 edits a prompt
PROMPTS = 8  # one wave: with 16, the NGRAM test alone ran over 20 minutes in a fresh-clone CI on a 2-core EPYC (2026-12-07)
# The reasoner's first 2 held-out prompts (a code and a word problem) think for 141 and 162 tokens and end (EOS)
# after 217 and 246 (2026-12-07): 208 tokens cover both think blocks, with 5 and 6 drafts (one every 24 reasoning
# tokens), and 67 and 46 answer tokens verified from them.
REASONER_PROMPTS, REASONER_TOKENS = 2, 208
CONCURRENCY = 8  # 8 requests x 8 tree nodes: verify steps stay within exact mode's one-row-at-a-time bound
NGRAM_PROMPTS, NGRAM_TOKENS = 2, 128  # n-gram trees verify every node: the costliest steps in exact mode


@pytest.fixture(scope="module")
def smollm2():
    from ssr_sglang.testing.smollm2 import cached_smollm2

    return str(cached_smollm2())


@pytest.fixture(scope="module")
def prompts(smollm2):
    from transformers import AutoTokenizer

    return chat_prompts(AutoTokenizer.from_pretrained(smollm2), PROMPTS)


@pytest.fixture(scope="module")
def plain(smollm2, prompts):
    with start_server(smollm2, env=EXACT, name="smollm2-plain-exact") as s:
        return run(s.url, prompts, TOKENS, CONCURRENCY, top2=True)


@pytest.fixture(scope="module")
def ssr_server(smollm2):
    with start_server(smollm2, "--speculative-algorithm", "SSR", *SPEC, env=EXACT, name="smollm2-ssr-exact") as s:
        yield s


def test_ssr_with_drafts_identical_to_plain(ssr_server, prompts, plain):
    drafts = [edited(p["output_ids"]) for p in plain]
    out = run(ssr_server.url, prompts, TOKENS, CONCURRENCY, drafts=drafts)
    assert first_differences(plain, out) == []
    ssr = [o["meta_info"]["ssr"] for o in out]
    assert all(m["phase"] == "answer" for m in ssr), ssr
    assert sum(m["accepted_prefix"] for m in ssr) > 0 and sum(m["accepted_suffix"] for m in ssr) > 0, ssr


def test_ngram_proposals_identical_to_plain(ssr_server, prompts, plain):
    """The first NGRAM_PROMPTS prompts, NGRAM_TOKENS each, with SSR off per request (``{"ssr": false}``: served
    with SGLang's n-gram proposals, as under NGRAM): every node of every tree verified, one row at a time in exact
    mode, several times the cost of SSR's narrowed steps. Plain's longer outputs are cut to match."""
    out = run(ssr_server.url, prompts[:NGRAM_PROMPTS], NGRAM_TOKENS, NGRAM_PROMPTS, custom={"ssr": False})
    ref = [{**p, "output_ids": p["output_ids"][:NGRAM_TOKENS]} for p in plain[:NGRAM_PROMPTS]]
    assert first_differences(ref, out) == []
    assert sum(len(o["output_ids"]) for o in out) >= NGRAM_PROMPTS * 64  # real answers, not early stops
    assert sum(o["meta_info"]["spec_accept_length"] > 1.0 for o in out) >= 1, [o["meta_info"] for o in out]


def test_ssr_forking_its_own_drafts_on_the_reasoner_identical_to_plain():
    """The SmolLM2 reasoner, which closes its think block: SSR forks drafts itself (a draft every 24
    reasoning tokens, several per request), and its output still equals plain's. A fork's prefill
    recomputes its parent's newest token; were that KV published in the tree, the parent's next
    checkpoint would take it in place of its own (found on the main job: 7 of 10 identical). The prompts
    are prefilled together in one run and apart in the other, after a shared prefix was cached or not:
    exact mode computes every prompt row alone, so their KV is the same."""
    from transformers import AutoTokenizer

    from ssr_sglang.main_job import reasoner_tasks
    from ssr_sglang.models.smollm2_reasoner.build import SSR_ENV, cached_reasoner

    model = str(cached_reasoner())
    prompts = [t["input_ids"] for t in reasoner_tasks(AutoTokenizer.from_pretrained(model), REASONER_PROMPTS, skip=0)]
    with start_server(model, env=EXACT, name="reasoner-plain-exact") as s:
        plain = run(s.url, prompts, REASONER_TOKENS, REASONER_PROMPTS, top2=True)
    forced = {**EXACT, **SSR_ENV, "SSR_POLICY": "fixed", "SSR_EVERY": "24", "SSR_MAX_DRAFTS": "6",
              "SSR_MAX_BATCH": "16"}  # drafts beside the running requests
    with start_server(model, "--speculative-algorithm", "SSR", *SPEC, env=forced, name="reasoner-ssr-exact") as s:
        out = run(s.url, prompts, REASONER_TOKENS, REASONER_PROMPTS)
    assert first_differences(plain, out) == []
    started = [o["meta_info"]["ssr"]["drafts_started"] for o in out]
    assert max(started) >= 2, started  # a checkpoint after a draft finished: where the tree could mix them up
    assert all(o["meta_info"]["ssr"]["phase"] == "answer" for o in out), [o["meta_info"]["ssr"] for o in out]
