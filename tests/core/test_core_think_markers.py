"""Think markers lookup and the streaming think-end matcher."""

import pytest
from hypothesis import given, settings, strategies as st

from ssr_sglang.core.think_markers import ThinkEndMatcher, custom, find_all, markers_for


@pytest.mark.parametrize("name, family, force", [
    ("Qwen/Qwen3-8B", "qwen3", "\n</think>\n\n"),
    ("qwen3_moe", "qwen3", "\n</think>\n\n"),
    ("Qwen/QwQ-32B", "qwq", "\n</think>\n\n"),
    ("Qwen/Qwen3.5-27B", "qwen3.5", "\n</think>\n\n"),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "deepseek-r1", "\n</think>\n\n"),
    ("zai-org/GLM-4.5-Air", "glm-4.5", "</think>\n"),
    ("zai-org/GLM-4.6", "glm-4.6", "</think>\n"),
    ("glm4_moe", "glm-4.5", "</think>\n"),
])
def test_markers_for(name, family, force):
    m = markers_for(name)
    assert (m.start, m.end, m.family, m.force_answer) == ("<think>", "</think>", family, force)


def test_unknown_and_custom():
    with pytest.raises(ValueError, match="custom"):
        markers_for("gpt2")
    d = custom("<r>", "</r>")
    assert markers_for("gpt2", default=d) is d and d.force_answer == "</r>"
    assert custom("<r>", "</r>", "\n</r>\n").force_answer == "\n</r>\n"
    with pytest.raises(ValueError):
        custom("", "</r>")


@settings(max_examples=300, deadline=None)
@given(pattern=st.lists(st.integers(0, 2), min_size=1, max_size=5),
       stream=st.lists(st.integers(0, 2), max_size=60),
       cuts=st.lists(st.integers(0, 60), max_size=6))
def test_matcher_vs_brute_force(pattern, stream, cuts):
    m = ThinkEndMatcher(pattern)
    bounds = sorted({0, len(stream), *[c for c in cuts if c <= len(stream)]})
    results = [m.feed(stream[a:b]) for a, b in zip(bounds, bounds[1:])]
    expected = (find_all(pattern, stream) or [-1])[0]
    assert m.found_at == expected and m.done == (expected >= 0)
    if expected >= 0:
        assert expected in results and results[-1] == expected
    m.reset()
    hits = [i for i, t in enumerate(stream) if m.feed_one(t)]
    assert (hits[0] if hits else -1) == expected


def test_matcher_single_and_multi_token():
    m = ThinkEndMatcher([151668])
    assert m.feed([1, 2, 3]) == -1 and m.feed([4, 151668, 5]) == 4
    m = ThinkEndMatcher([7, 7, 8])
    assert m.feed([7, 7, 7]) == -1 and m.feed([8]) == 3
    with pytest.raises(ValueError):
        ThinkEndMatcher([])
