"""BudgetSchedule checkpoints, validation, and draft seeding helpers."""

import pytest

from ssr_sglang.core.budgets import BudgetSchedule, common_prefix_len, seed_from_previous


def test_checkpoint_modes():
    assert BudgetSchedule([500]).checkpoints() == [500]
    assert BudgetSchedule([1200, 500]).checkpoints() == [500, 1200]
    assert BudgetSchedule(fractions=[0.25, 0.5], thinking_budget=2000).checkpoints() == [500, 1000]
    assert BudgetSchedule(every=400, max_drafts=3).checkpoints() == [400, 800, 1200]
    assert BudgetSchedule(every=400, max_drafts=3, start=100).checkpoints() == [100, 500, 900]
    # union of modes, capped by max_drafts and by the thinking budget
    s = BudgetSchedule([300], fractions=[0.5], thinking_budget=1000, every=400, max_drafts=3)
    assert s.checkpoints() == [300, 400, 500]
    assert BudgetSchedule([500, 3000], thinking_budget=2000).checkpoints() == [500]
    assert BudgetSchedule().checkpoints() == []
    assert BudgetSchedule([5], draft_len=64).draft_len == 64


def test_due_and_next():
    s = BudgetSchedule([500, 1000])
    assert [s.due(r, 0) for r in (0, 499, 500, 999, 1000, 10**6)] == [0, 0, 1, 1, 2, 2]
    assert s.due(1000, 1) == 1 and s.due(1000, 2) == 0 and s.due(1000, 5) == 0
    assert s.next_checkpoint(0) == 500 and s.next_checkpoint(1) == 1000 and s.next_checkpoint(2) is None
    assert len(s) == 2


@pytest.mark.parametrize("kwargs, field", [
    (dict(checkpoints=[-5]), "checkpoints[0]"),
    (dict(checkpoints=[100, 0]), "checkpoints[1]"),
    (dict(checkpoints=[1.5]), "checkpoints[0]"),
    (dict(checkpoints=[True]), "checkpoints[0]"),
    (dict(checkpoints=[10**9]), "checkpoints[0]"),
    (dict(checkpoints=[5, 5]), "duplicate"),
    (dict(fractions=[0.5]), "thinking_budget"),
    (dict(fractions=[0.0], thinking_budget=100), "fractions[0]"),
    (dict(fractions=[1.5], thinking_budget=100), "fractions[0]"),
    (dict(fractions=["a"], thinking_budget=100), "fractions[0]"),
    (dict(fractions=[0.001], thinking_budget=100), "fractions[0]"),
    (dict(fractions=[0.5, 0.501], thinking_budget=100), "fractions[1]"),
    (dict(fractions=[0.5], thinking_budget=0), "thinking_budget"),
    (dict(fractions=[0.5], thinking_budget=2.0), "thinking_budget"),
    (dict(every=100), "max_drafts"),
    (dict(every=0, max_drafts=2), "every"),
    (dict(every=-1, max_drafts=2), "every"),
    (dict(every=100, max_drafts=0), "max_drafts"),
    (dict(every=100, max_drafts=10**6), "max_drafts"),
    (dict(every=10**7, max_drafts=100), "every"),
    (dict(every=100, max_drafts=2, start=0), "start"),
    (dict(start=5), "start"),
    (dict(checkpoints=[5], draft_len=0), "draft_len"),
])
def test_validation_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field.replace("[", r"\[").replace("]", r"\]")):
        BudgetSchedule(**kwargs)


def test_seed_from_previous():
    assert seed_from_previous([1, 2, 3, 4], 3) == [1, 2, 3]
    assert seed_from_previous([1, 2, 9, 4], 10, stop_ids=[9]) == [1, 2]
    assert seed_from_previous([], 5) == []
    assert seed_from_previous([1, 2], 0) == []
    with pytest.raises(ValueError, match="max_len"):
        seed_from_previous([1], -1)
    assert common_prefix_len([1, 2, 3], [1, 2, 4, 5]) == 2
    assert common_prefix_len([], [1]) == 0
