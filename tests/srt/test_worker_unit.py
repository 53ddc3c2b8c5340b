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
