"""``ssr_sglang.cpu.eagle_sampling``: SGLang's own ``eagle_sample`` samples non-greedy batches on CPU.

SGLang's real ``eagle_sample`` runs here in-process on a hand-built batch (no server): with the hook,
a sampled batch's committed tokens have the distribution SGLang's plain sampler draws from (temperature,
top-k and top-p); an all-greedy batch still commits the argmax; without the hook (SGLang as shipped)
a sampled batch commits the argmax too. A subprocess checks that the plugin installs the hook on the
CPU engine and that ``SSR_CPU_SPEC_SAMPLING=0`` leaves SGLang's greedy predicate alone.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from types import SimpleNamespace as NS

import pytest
import torch

from ssr_sglang.cpu import eagle_sampling, sampling_ops
from test_sampling_ops import chi_square_p

ALPHA = 1e-3


@pytest.fixture
def eu(monkeypatch):
    """eagle_utils with the server context eagle_sample reads stubbed, its CPU ops reset afterwards."""
    import sglang.srt.runtime_context as rc
    from sglang.srt.speculative import eagle_utils

    spec = NS(speculative_use_rejection_sampling=False, speculative_accept_threshold_single=1.0,
              speculative_accept_threshold_acc=1.0, speculative_use_block_verification=False)
    monkeypatch.setattr(eagle_utils, "get_spec", lambda: spec)
    monkeypatch.setattr(rc, "get_parallel", lambda: NS(tp_group=NS(world_size=1), attn_tp_group=NS(world_size=1)))
    for name in eagle_sampling.OP_NAMES:
        monkeypatch.setattr(eagle_utils, name, getattr(eagle_utils, name))
    return eagle_utils


def hooked(monkeypatch, eu):
    monkeypatch.setattr(eu, "_verify_uses_greedy",
                        functools.partial(eagle_sampling._verify_uses_greedy, eu._verify_uses_greedy))


def test_sglang_still_has_what_the_hook_needs():
    assert eagle_sampling.problems() == []


def test_predicate_drops_only_the_cpu_reason(monkeypatch, eu):
    base = dict(is_all_greedy=False, is_cpu=True, is_hip=False, is_xpu=False, use_rejection_sampling=False)
    original = eu._verify_uses_greedy
    assert original(**base) is True  # SGLang as shipped: greedy on CPU whatever the batch
    pred = functools.partial(eagle_sampling._verify_uses_greedy, original)
    assert pred(**base) is False
    assert pred(**{**base, "is_all_greedy": True}) is True
    assert pred(**{**base, "use_rejection_sampling": True}) is True  # Triton chain sampler: no CPU version
    assert pred(**{**base, "is_xpu": True}) is True
    assert pred(**{**base, "is_cpu": False}) is False
    assert eu.tree_speculative_sampling_target_only is sampling_ops.tree_speculative_sampling_target_only
    assert eu.top_k_renorm_prob is sampling_ops.top_k_renorm_prob
    assert eu.top_p_renorm_prob is sampling_ops.top_p_renorm_prob


def make_batch(bs, n, vocab, logits_rows, tokens, temperature, top_k, top_p, greedy=False):
    """``bs`` copies of one chain tree (root, then ``tokens``), each node's logits row given."""
    chain_next = list(range(1, n)) + [-1]
    si = NS(acc_additive_penalties=None, acc_scaling_penalties=None, logit_bias=None,
            has_watermark_candidates=False, is_all_greedy=greedy, temperatures=torch.full((bs, 1), temperature),
            need_top_k_sampling=top_k < (1 << 30), top_ks=torch.full((bs,), top_k, dtype=torch.int32),
            need_top_p_sampling=top_p < 1.0, top_ps=torch.full((bs,), top_p), sampling_seed=None,
            need_min_p_sampling=False)
    batch = NS(forward_mode=NS(is_idle=lambda: False), device="cpu", seq_lens=torch.full((bs,), 9),
               sampling_info=si, return_logprob=False)
    vi = NS(draft_token=torch.tensor([[0, *tokens]] * bs, dtype=torch.int64).view(-1), draft_token_num=n,
            max_tree_depth=n, retrieve_index=torch.arange(bs * n).view(bs, n),
            retrieve_next_token=torch.tensor([chain_next] * bs), retrieve_next_sibling=torch.full((bs, n), -1),
            tree_topk=-1, custom_mask=None, positions=None)
    logits = NS(next_token_logits=logits_rows.repeat(bs, 1).clone())
    return vi, batch, logits


def committed(eu, vi, batch, logits):
    predict, accept_lens, accept_index = eu.eagle_sample(vi, batch, logits)
    out = []
    for b in range(accept_index.shape[0]):
        idx = accept_index[b, : accept_lens[b].item()]
        out.append(predict[idx.long()].tolist())
    return out


def plain_filtered(logits_row, temperature, top_k, top_p):
    """What SGLang's pytorch sampler draws from for this row."""
    from sglang.srt.layers.sampler import top_k_top_p_min_p_sampling_from_probs_torch

    probs = torch.softmax(logits_row.float().unsqueeze(0) / temperature, -1)
    _, w, idx, _ = top_k_top_p_min_p_sampling_from_probs_torch(
        probs, torch.tensor([top_k]), torch.tensor([top_p]), torch.zeros(1), False, None, torch.zeros(1),
        return_filtered_probs=True)
    out = torch.zeros_like(probs).scatter_(1, idx.long(), w)[0]
    return (out / out.sum()).double()


def chisq(observed_tokens, expected_probs):
    """Goodness of fit of single tokens to ``expected_probs`` (test_sampling_ops' pooled chi-square)."""
    exact = {(t,): p for t, p in enumerate(expected_probs.tolist()) if p > 0}
    return chi_square_p([(int(t),) for t in observed_tokens], exact)


@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, 1 << 30, 1.0), (0.6, 20, 0.95), (1.0, 1 << 30, 0.8),
                                                     (0.8, 6, 1.0)])
def test_sampled_batch_commits_the_plain_sampler_distribution(monkeypatch, eu, temperature, top_k, top_p):
    hooked(monkeypatch, eu)
    torch.manual_seed(0)
    n, vocab, bs = 4, 40, 6000
    rows = torch.randn(n, vocab) * 2.0
    q = [plain_filtered(rows[i], temperature, top_k, top_p) for i in range(n)]
    tokens = [int(torch.argmax(q[i])) for i in range(n - 1)]  # the chain proposes each row's likeliest token
    out = committed(eu, *make_batch(bs, n, vocab, rows, tokens, temperature, top_k, top_p))
    assert max(len(o) for o in out) > 1  # drafts get accepted
    pvalues = [chisq([o[0] for o in out], q[0])]
    # Given the first token is the proposed one, the second comes from node 1's row.
    second = [o[1] for o in out if o[0] == tokens[0] and len(o) > 1]
    assert len(second) == sum(1 for o in out if o[0] == tokens[0])  # accepted, so a second token follows
    pvalues.append(chisq(second, q[1]))
    assert min(pvalues) > ALPHA / 2, pvalues


def test_greedy_batch_keeps_the_argmax_walk(monkeypatch, eu):
    hooked(monkeypatch, eu)
    torch.manual_seed(1)
    n, vocab = 4, 30
    rows = torch.randn(n, vocab)
    tokens = [int(torch.argmax(rows[i])) for i in range(n - 1)]
    out = committed(eu, *make_batch(3, n, vocab, rows, tokens, 1.0, 1 << 30, 1.0, greedy=True))
    assert out == [tokens + [int(torch.argmax(rows[n - 1]))]] * 3


def test_without_the_hook_a_sampled_batch_commits_the_argmax(eu):
    torch.manual_seed(2)
    n, vocab = 3, 30
    rows = torch.randn(n, vocab) * 0.3  # flat: sampling would rarely repeat the argmax
    tokens = [int(torch.argmax(rows[i])) for i in range(n - 1)]
    out = committed(eu, *make_batch(50, n, vocab, rows, tokens, 1.0, 1 << 30, 1.0))
    assert out == [tokens + [int(torch.argmax(rows[n - 1]))]] * 50


PROBE = """
import json
from sglang.srt.plugins import load_plugins
load_plugins()
from sglang.srt.speculative import eagle_utils as eu
from ssr_sglang.cpu import eagle_sampling
kw = dict(is_all_greedy=False, is_cpu=True, is_hip=False, is_xpu=False, use_rejection_sampling=False)
print("INFO", json.dumps({"applied": eagle_sampling.applied(), "greedy": eu._verify_uses_greedy(**kw)}))
"""


@pytest.mark.slow  # a subprocess that imports SGLang and loads the plugins (about 30 s each)
@pytest.mark.parametrize("switch,expected", [("1", {"applied": True, "greedy": False}),
                                             ("0", {"applied": False, "greedy": True})])
def test_plugin_installs_the_hook_on_the_cpu_engine(switch, expected):
    env = {**os.environ, "SGLANG_USE_CPU_ENGINE": "1", "SSR_CPU_SPEC_SAMPLING": switch}
    proc = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300)
    line = [l for l in proc.stdout.splitlines() if l.startswith("INFO ")]
    assert line, proc.stderr[-3000:]
    assert json.loads(line[0][5:]) == expected


def test_top_k_first_order_would_be_caught(monkeypatch, eu):
    """Power of the test above: filtering top-p on the top-k renormalized row (FlashInfer's separate
    renorm kernels in sequence, as SGLang's GPU verify does) is a different distribution, and rejected."""
    hooked(monkeypatch, eu)
    eagle_sampling.provide_ops()
    monkeypatch.setattr(eu, "top_p_renorm_prob", lambda p, t: sampling_ops.top_p_renorm_prob(p.clone(), t))
    torch.manual_seed(0)
    n, vocab, bs, temperature, top_k, top_p = 4, 40, 6000, 0.6, 20, 0.95
    rows = torch.randn(n, vocab) * 2.0
    q = [plain_filtered(rows[i], temperature, top_k, top_p) for i in range(n)]
    tokens = [int(torch.argmax(q[i])) for i in range(n - 1)]
    out = committed(eu, *make_batch(bs, n, vocab, rows, tokens, temperature, top_k, top_p))
    assert chisq([o[0] for o in out], q[0]) < ALPHA


def test_compat_names_a_missing_lookup_and_an_unapplied_hook(monkeypatch):
    from ssr_sglang.srt import compat

    monkeypatch.setattr(eagle_sampling, "wanted", lambda: True)
    monkeypatch.setattr(eagle_sampling, "problems",
                        lambda: [("sglang.srt.speculative.eagle_utils.eagle_sample", "looks up 'top_k_renorm_prob'")])
    with pytest.raises(compat.SGLangCompatError, match=r"eagle_sample.*top_k_renorm_prob.*SSR_CPU_SPEC_SAMPLING"):
        compat.check_static()
    monkeypatch.setattr(eagle_sampling, "problems", lambda: [])
    monkeypatch.setattr(eagle_sampling, "applied", lambda: False)
    monkeypatch.setattr(compat, "check_hooks_applied", lambda: None)
    with pytest.raises(compat.SGLangCompatError, match=r"_verify_uses_greedy.*not applied"):
        compat.check_worker(NS(draft_token_num=8, device="cpu"))
