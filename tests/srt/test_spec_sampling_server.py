"""Sampled requests on speculative CPU servers get plain decoding's distribution (#13 items 2 and 4).

A chat prompt closed with ``</think>`` (so SSR serves its answer from the start) and, for SSR, the greedy
answer as a client draft (``ssr_draft``), so its proposals are accepted or rejected by the coins of the
tree sampling walk. For two sampling settings (temperature 0.6 with top-k 20 and top-p 0.95;
temperature 1.0 with top-p 0.9) the first 3 generated tokens are sampled thousands of times from the
plain server, an SSR server and an NGRAM server. Chi-square tests of homogeneity compare each
speculative server's samples with plain decoding's: the 3-token sequences (each as its longest prefix seen
at least 10 times in both samples together), and the 2nd and the 3rd token on their own (tokens seen
fewer than 10 times pooled). The first token comes from the prefill's sampler; the second and third from
the first verify step, which before the fix committed the argmax.

Significance fixed in advance: a family-wise alpha of 0.001, Bonferroni over the 12 tests (2 servers,
2 settings, 3 statistics). The control: samples with SGLang's old CPU verify (the first token sampled,
then the argmax continuation, obtained from the plain server) are rejected at the same level.

Whole answers (up to 96 tokens, temperature 0.6, top-k 20, top-p 0.95; SSR with the greedy 96-token answer
as its client draft): a second family at alpha 0.001, Bonferroni over 4 tests: the answer length
(Mann-Whitney U) and the token at answer positions 4, 8 and 16 (one category per answer, -1 for
answers that stopped before; chi-square of homogeneity).

Sampling is not seeded (per-request seeds need ``--enable-deterministic-inference``), so a correct
server fails this module with probability at most 0.001. One speculative server runs at a time.
"""

from __future__ import annotations

import collections

import pytest
import requests
from scipy import stats

from conftest import start_server

pytestmark = pytest.mark.server

FAMILY_ALPHA = 1e-3
SETTINGS = {
    "t0.6-k20-p0.95": {"temperature": 0.6, "top_k": 20, "top_p": 0.95},
    "t1.0-p0.9": {"temperature": 1.0, "top_p": 0.9},
}
NEW_TOKENS = 3
TESTS = 2 * len(SETTINGS) * NEW_TOKENS  # SSR and NGRAM against plain, per setting: NEW_TOKENS statistics
ALPHA = FAMILY_ALPHA / TESTS
N_PLAIN, N_SSR, N_NGRAM, N_CONTROL = 2400, 2000, 1600, 800
BATCH = 100
WHOLE = {"setting": "t0.6-k20-p0.95", "n": 400, "tokens": 96, "positions": (4, 8, 16)}
WHOLE_ALPHA = FAMILY_ALPHA / (1 + len(WHOLE["positions"]))


def sample(server, prompt, n, setting, custom_params=None, new_tokens=NEW_TOKENS, ignore_eos=True):
    """``n`` sampled continuations of ``prompt`` (batched requests): token tuples and meta_info dicts."""
    sp = {"max_new_tokens": new_tokens, "ignore_eos": ignore_eos, **setting}
    if custom_params is not None:
        sp["custom_params"] = custom_params
    seqs, metas = [], []
    for start in range(0, n, BATCH):
        k = min(BATCH, n - start)
        r = requests.post(server.url + "/generate", json={"input_ids": [prompt] * k, "sampling_params": sp},
                          timeout=600)
        r.raise_for_status()
        for out in r.json():
            seqs.append(tuple(out["output_ids"]))
            metas.append(out["meta_info"])
    return seqs, metas


def homogeneity_p(a: list, b: list, min_count: int = 10) -> float:
    """Chi-square test that two samples of categories come from one distribution (categories seen
    fewer than ``min_count`` times in both together pooled into one)."""
    ca, cb = collections.Counter(a), collections.Counter(b)
    keys = sorted(k for k in set(ca) | set(cb) if ca[k] + cb[k] >= min_count)
    row_a = [ca[k] for k in keys] + [len(a) - sum(ca[k] for k in keys)]
    row_b = [cb[k] for k in keys] + [len(b) - sum(cb[k] for k in keys)]
    if row_a[-1] + row_b[-1] == 0:
        row_a, row_b = row_a[:-1], row_b[:-1]
    assert len(row_a) >= 2, "too few distinct categories to compare"
    return stats.chi2_contingency([row_a, row_b]).pvalue


def by_prefix(a: list, b: list, min_count: int = 10):
    """Each sequence as its longest prefix seen at least ``min_count`` times in both samples together
    (the whole sequence when it is that common; ``()`` when not even its first token is)."""
    seen = collections.Counter(seq[:n] for seq in a + b for n in range(1, len(seq) + 1))

    def cat(seq):
        return next((seq[:n] for n in range(len(seq), 0, -1) if seen[seq[:n]] >= min_count), ())

    return [cat(s) for s in a], [cat(s) for s in b]


def p_values(plain: list, other: list) -> dict:
    """The statistics compared: the sequences (by common prefix) and the 2nd and 3rd tokens on their own
    (the tokens a verify step commits)."""
    out = {"sequence": homogeneity_p(*by_prefix(plain, other))}
    for i in range(1, NEW_TOKENS):
        out[f"token {i + 1}"] = homogeneity_p([s[i] for s in plain], [s[i] for s in other])
    return out


@pytest.fixture(scope="module")
def prompt(chat_prompts, tokenizer):
    return chat_prompts[0] + tokenizer("\n</think>\n\n", add_special_tokens=False).input_ids


@pytest.fixture(scope="module")
def draft(plain_server, prompt):
    return plain_server.generate(input_ids=prompt, max_new_tokens=16, sampling={"ignore_eos": True})["output_ids"]


@pytest.fixture(scope="module")
def plain_samples(plain_server, prompt):
    return {name: sample(plain_server, prompt, N_PLAIN, s)[0] for name, s in SETTINGS.items()}


def whole_answers(server, prompt, custom_params=None):
    """``WHOLE["n"]`` sampled answers, each ending at EOS or after ``WHOLE["tokens"]`` tokens."""
    return sample(server, prompt, WHOLE["n"], SETTINGS[WHOLE["setting"]], custom_params,
                  new_tokens=WHOLE["tokens"], ignore_eos=False)


@pytest.fixture(scope="module")
def long_draft(plain_server, prompt):
    return plain_server.generate(input_ids=prompt, max_new_tokens=WHOLE["tokens"])["output_ids"]


@pytest.fixture(scope="module")
def plain_whole(plain_server, prompt):
    return whole_answers(plain_server, prompt)[0]


@pytest.fixture(scope="module")
def old_verify_samples(plain_server, prompt):
    """SGLang's CPU verify before the fix: the first token sampled (prefill), the rest the argmax."""
    out = {}
    for name, s in SETTINGS.items():
        firsts = [seq[0] for seq in sample(plain_server, prompt, N_CONTROL, s, new_tokens=1)[0]]
        greedy = {}
        for t in sorted(set(firsts)):
            greedy[t] = plain_server.generate(input_ids=prompt + [t], max_new_tokens=NEW_TOKENS - 1,
                                              sampling={"ignore_eos": True})["output_ids"]
        out[name] = [tuple([t] + greedy[t]) for t in firsts]
    return out


@pytest.fixture(scope="module")
def ssr_samples(tiny_qwen3, prompt, draft, long_draft):
    # the full verify width: at temperature 1.0 the default (auto) may measure that the draft rarely pays and
    # verify it only in probe steps, and these samples must come from verified draft proposals
    with start_server(tiny_qwen3, "--speculative-algorithm", "SSR", "--speculative-num-draft-tokens", "8",
                      env={"SSR_VERIFY_WIDTH": "full"}, name="ssr-sampling") as s:
        greedy = s.generate(input_ids=prompt, max_new_tokens=16, sampling={"ignore_eos": True},
                            custom_params={"ssr_draft": draft})["output_ids"]
        samples = {name: sample(s, prompt, N_SSR, st, custom_params={"ssr_draft": draft})
                   for name, st in SETTINGS.items()}
        samples["whole"] = whole_answers(s, prompt, {"ssr_draft": long_draft})
    return greedy, samples


@pytest.fixture(scope="module")
def ngram_run(tiny_qwen3, prompt, chat_prompts, ssr_samples):  # after the SSR server: one speculative server at a time
    """One NGRAM server: first (fresh) the greedy outputs of 8 chat prompts, 128 tokens each; then the samples."""
    with start_server(tiny_qwen3, "--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "8",
                      name="ngram-sampling") as s:
        greedy = [s.generate(input_ids=p, max_new_tokens=128) for p in chat_prompts[:8]]
        return greedy, {name: sample(s, prompt, N_NGRAM, st) for name, st in SETTINGS.items()}


@pytest.fixture(scope="module")
def ngram_samples(ngram_run):
    return ngram_run[1]


def test_ngram_greedy_identical_to_plain(ngram_run, plain_outputs):
    """NGRAM on the CPU engine: greedy outputs token-identical to plain decoding's, with drafts accepted."""
    outs = ngram_run[0]
    assert [o["output_ids"] for o in outs] == plain_outputs[:8]
    accept = [o["meta_info"]["spec_accept_length"] for o in outs]
    assert sum(accept) / len(accept) > 1.0, accept


@pytest.mark.parametrize("setting", SETTINGS)
def test_control_old_argmax_verify_is_rejected(setting, plain_samples, old_verify_samples):
    p = p_values(plain_samples[setting], old_verify_samples[setting])
    print("old argmax verify", setting, p)
    assert min(p.values()) < ALPHA, p


@pytest.mark.parametrize("setting", SETTINGS)
def test_ssr_samples_like_plain_decoding(setting, plain_samples, ssr_samples, draft):
    greedy, samples = ssr_samples
    assert greedy == draft  # greedy requests: unchanged
    seqs, metas = samples[setting]
    # the draft was proposed and verified: some sequences accepted its tokens
    assert sum(m["ssr"]["accepted_prefix"] for m in metas) > 0
    assert all(m["ssr"]["phase"] == "answer" for m in metas)
    assert len(set(seqs)) > 20  # sampled, not collapsed onto the greedy answer
    p = p_values(plain_samples[setting], seqs)
    print("SSR", setting, p, "accepted draft tokens", sum(m["ssr"]["accepted_prefix"] for m in metas))
    assert min(p.values()) > ALPHA, p


@pytest.mark.parametrize("setting", SETTINGS)
def test_ngram_samples_like_plain_decoding(setting, plain_samples, ngram_samples):
    seqs, metas = ngram_samples[setting]
    assert len(set(seqs)) > 20
    p = p_values(plain_samples[setting], seqs)
    print("NGRAM", setting, p, "mean spec_accept_length", sum(m["spec_accept_length"] for m in metas) / len(metas))
    assert min(p.values()) > ALPHA, p


def test_ssr_whole_answers_like_plain_decoding(plain_whole, ssr_samples):
    """Whole sampled answers: their length and the token at a few positions are distributed as plain's."""
    seqs, metas = ssr_samples[1]["whole"]
    assert sum(m["ssr"]["accepted_prefix"] + m["ssr"]["accepted_suffix"] for m in metas) > 0
    lengths = stats.mannwhitneyu([len(x) for x in plain_whole], [len(x) for x in seqs]).pvalue
    at = {i: homogeneity_p([x[i] if i < len(x) else -1 for x in plain_whole],
                           [x[i] if i < len(x) else -1 for x in seqs]) for i in WHOLE["positions"]}
    mean = lambda xs: sum(map(len, xs)) / len(xs)  # noqa: E731
    print("whole answers: mean length plain", mean(plain_whole), "SSR", mean(seqs), "p", lengths, at)
    assert min([lengths, *at.values()]) > WHOLE_ALPHA, (lengths, at)
