"""The worker's batch-level helpers, without a server."""

import numpy as np
import pytest

from ssr_sglang.core.tree import duplicate_siblings, parents_batch
from ssr_sglang.srt import worker


def _ngram_rows(bs: int, n: int, rng) -> tuple:
    """SGLang-style n-gram rows: a short real chain under the root, the rest token 0 under the root."""
    tokens = np.zeros(bs * n, dtype=np.int64)
    mask = np.zeros((bs, n, n), dtype=bool)
    for b in range(bs):
        real = int(rng.integers(0, 4))
        tokens[b * n] = 100 + b
        for i in range(n):
            mask[b, i, 0] = mask[b, i, i] = True
            if 1 <= i <= real:
                tokens[b * n + i] = rng.integers(0, 3)  # may itself be 0, like the padding
                mask[b, i, 1:i] = True  # a chain
    return tokens, mask.reshape(-1)


@pytest.mark.parametrize("bs", [1, 3, 8, 24])
def test_padding_made_distinct_the_same_way_batched_or_not(bs):
    """Either path of ``_distinct_padding`` (a loop below ``_BATCH_FROM`` rows, one vectorised pass from
    there) leaves no repeated sibling, touches only the rows asked for, and renames identically."""
    n, rng = 12, np.random.default_rng(bs)
    tokens, mask = _ngram_rows(bs, n, rng)
    rows = [i for i in range(bs) if i % 3 != 1] or [0]
    looped, batched = tokens.copy(), tokens.copy()
    renamed = sum(worker.distinct_siblings(looped[i * n:(i + 1) * n], mask[i * n * n:(i + 1) * n * n], n)
                  for i in rows)
    assert worker._distinct_padding(batched.reshape(bs, n), parents_batch(mask, n), rows) == renamed > 0
    assert batched.tolist() == looped.tolist()
    for i in range(bs):
        dups = duplicate_siblings(batched[i * n:(i + 1) * n], mask[i * n * n:(i + 1) * n * n], n)
        assert (dups == 0) if i in rows else (batched[i * n:(i + 1) * n] == tokens[i * n:(i + 1) * n]).all()


@pytest.mark.parametrize("seed", range(6))
def test_a_narrowed_step_has_the_metadata_of_its_subtree(seed):
    """``VerifyWidth._narrow`` cuts the full tree's verify metadata; it must equal what SGLang's reconstruction gives
    for the subtree of the first ``width`` nodes (random parent-before-child trees, several widths); so must the
    grammar mask's tree (``SSRWorker._narrowed``)."""
    from types import SimpleNamespace

    import torch
    from sglang.srt.speculative.ngram_info import NgramVerifyInput
    from sglang.srt.speculative.ngram_worker import _derive_tree_links, reconstruct_indices_from_tree_mask_func

    from ssr_sglang.srt.verify_width import VerifyWidth

    rng = np.random.default_rng(seed)
    bs, n = 3, 12
    mask = np.zeros((bs, n, n), dtype=bool)
    for b in range(bs):
        parents = [-1] + [int(rng.integers(0, i)) for i in range(1, n)]
        for i in range(n):
            j = i
            while j != -1:
                mask[b, i, j], j = True, parents[j]
    seq_lens = torch.tensor(rng.integers(5, 50, bs), dtype=torch.int64)

    def metadata(m: np.ndarray, w: int):
        flat = torch.from_numpy(m.reshape(-1).copy())
        pos = torch.empty(bs * w, dtype=torch.int64)
        index, nxt, sib = (torch.empty((bs, w), dtype=torch.int64) for _ in range(3))
        reconstruct_indices_from_tree_mask_func(flat, seq_lens, pos, index, nxt, sib, bs, w)
        return flat, pos, index, nxt, sib

    flat, pos, index, nxt, sib = metadata(mask, n)
    for width in (1, 2, 5, 11):
        info = NgramVerifyInput(draft_token=torch.arange(bs * n), custom_mask=flat, positions=pos, retrieve_index=index,
                                retrieve_next_token=nxt, retrieve_next_sibling=sib, draft_token_num=n)
        batch = SimpleNamespace(reqs=[None] * bs, spec_info=info, seq_lens=seq_lens, input_ids=None,
                                out_cache_loc=torch.arange(bs * n))
        control = VerifyWidth(n, adaptive=True, policy=None)
        control._narrow(batch, width)
        _, want_pos, want_index, want_next, want_sibling = metadata(mask[:, :width, :width], width)
        got = batch.spec_info
        assert control.width == width == got.draft_token_num
        assert got.positions.tolist() == want_pos.tolist()
        assert got.retrieve_index.tolist() == want_index.tolist()
        assert got.retrieve_next_token.tolist() == want_next.tolist()
        assert got.retrieve_next_sibling.tolist() == want_sibling.tolist()
        assert batch.input_ids.tolist() == torch.arange(bs * n).view(bs, n)[:, :width].reshape(-1).tolist()
        # A batch with a grammar: SGLang derives the grammar mask's tree from the worker's host copy of the step's
        # trees and its draft_token_num; cut alike, they give the narrowed step's links and tokens.
        ssr = SimpleNamespace(draft_token_num=n, grammar_tree_host=(mask.reshape(-1).copy(), np.arange(bs * n)),
                              width=SimpleNamespace(recurrent=False))
        worker.SSRWorker._narrowed(ssr, bs, width)
        host_next, host_sibling = _derive_tree_links(ssr.grammar_tree_host[0], bs, ssr.draft_token_num)
        assert ssr.draft_token_num == width
        assert host_next.tolist() == want_next.tolist() and host_sibling.tolist() == want_sibling.tolist()
        assert ssr.grammar_tree_host[1].tolist() == batch.input_ids.tolist()


def test_a_narrowed_step_hands_sglang_its_width_where_sglang_reads_it():
    """After the verify forward SGLang reads the trees' width from the worker's ``draft_token_num`` for a
    grammar mask and for committing recurrent states; a dense step without a grammar keeps the full width
    (an overlapped step relays its tokens at it)."""
    from types import SimpleNamespace

    def narrowed(recurrent: bool, grammar) -> int:
        ssr = SimpleNamespace(draft_token_num=8, grammar_tree_host=grammar, width=SimpleNamespace(recurrent=recurrent))
        worker.SSRWorker._narrowed(ssr, 2, 3)
        return ssr.draft_token_num

    grammar = (np.ones(2 * 8 * 8, dtype=bool), np.arange(16))
    assert narrowed(recurrent=True, grammar=None) == 3
    assert narrowed(recurrent=False, grammar=grammar) == 3
    assert narrowed(recurrent=False, grammar=None) == 8


def test_sglang_commits_the_accepted_node_of_a_narrowed_step():
    """SGLang's commit of recurrent states reads request ``i``'s last accepted node at flat index
    ``i * draft_token_num + node`` of the step's rows: with a narrowed step's rows (``bs * width``) and its
    width, the node; with the full width it would read another request's row (why the worker sets it)."""
    from types import SimpleNamespace

    import torch
    from sglang.srt.speculative.spec_utils import _verify_commit_step_indices

    width, bs = 3, 3
    nodes = [2, 0, 1]  # each request's last accepted node
    accept_index = torch.full((bs, width), -1, dtype=torch.int64)
    for i, node in enumerate(nodes):
        path = [0, node] if node else [0]
        accept_index[i, :len(path)] = torch.tensor([i * width + p for p in path])
    accept_lens = torch.tensor([2 if node else 1 for node in nodes], dtype=torch.int32)
    batch = SimpleNamespace(mamba_track_indices=None)
    steps, _ = _verify_commit_step_indices(batch=batch, accept_index=accept_index, accept_lens=accept_lens,
                                           draft_token_num=width)
    assert steps.tolist() == nodes
    wrong, _ = _verify_commit_step_indices(batch=batch, accept_index=accept_index, accept_lens=accept_lens,
                                           draft_token_num=8)
    assert wrong.tolist() != nodes
