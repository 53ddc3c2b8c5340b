"""SSR settings, think-marker resolution and per-request phase tracking, without a server."""

from __future__ import annotations

import pytest

from ssr_sglang.srt.config import (RequestConfig, SSRConfigError, client_drafts, parse_request,
                                   server_config_from_env)
from ssr_sglang.srt.request_state import ANSWER, PLAIN, REASONING, RequestSSR
from ssr_sglang.srt.think_ids import ThinkIds

IDS = ThinkIds(start=[3], end=[4], force=[9, 4, 9, 9], force_tail=[9, 9])


def test_env_defaults_and_overrides():
    cfg = server_config_from_env({})
    assert cfg.defaults.schedule().checkpoints() == [500]
    cfg = server_config_from_env({"SSR_EVERY": "100", "SSR_MAX_DRAFTS": "3", "SSR_PREFIX": "0",
                                  "SSR_REASONING_FALLBACK": "none", "SSR_MAX_KV_USAGE": "0.5"})
    assert cfg.defaults.schedule().checkpoints() == [100, 200, 300]
    assert cfg.defaults.use_prefix is False and cfg.reasoning_fallback == "none" and cfg.max_kv_usage == 0.5


@pytest.mark.parametrize("env,name", [
    ({"SSR_EVERY": "abc", "SSR_MAX_DRAFTS": "2"}, "SSR_EVERY"),
    ({"SSR_EVERY": "10"}, "SSR_MAX_DRAFTS"),
    ({"SSR_CHECKPOINTS": "-4"}, "SSR_CHECKPOINTS"),
    ({"SSR_MAX_KV_USAGE": "2"}, "SSR_MAX_KV_USAGE"),
    ({"SSR_MAX_BATCH": "0"}, "SSR_MAX_BATCH"),
    ({"SSR_REASONING_FALLBACK": "eagle"}, "SSR_REASONING_FALLBACK"),
    ({"SSR_ENABLED": "maybe"}, "SSR_ENABLED"),
    ({"SSR_VERIFY_WIDTH": "narrow"}, "SSR_VERIFY_WIDTH"),
    ({"SSR_POLICY": "greedy"}, "SSR_POLICY"),
])
def test_bad_env_names_the_variable(env, name):
    with pytest.raises(SSRConfigError, match=name):
        server_config_from_env(env)


def test_policy_is_auto_unless_a_schedule_is_chosen():
    assert server_config_from_env({}).defaults.policy == "auto"
    assert server_config_from_env({"SSR_CHECKPOINTS": "64"}).defaults.policy == "fixed"
    assert server_config_from_env({"SSR_CHECKPOINTS": "64", "SSR_POLICY": "auto"}).defaults.policy == "auto"
    d = RequestConfig()
    assert parse_request({"ssr_every": 16, "ssr_max_drafts": 2}, d).policy == "fixed"
    assert parse_request({"ssr_policy": "fixed"}, d).policy == "fixed"
    assert parse_request({"ssr_max_draft_tokens": 64}, d).policy == "auto"
    for bad in ("sometimes", None, 1):
        with pytest.raises(SSRConfigError, match="custom_params.ssr_policy"):
            parse_request({"ssr_policy": bad}, d)


def test_request_overrides_replace_the_schedule():
    d = RequestConfig()
    assert parse_request({"ssr_every": 50, "ssr_max_drafts": 2}, d).schedule().checkpoints() == [50, 100]
    assert parse_request({"ssr_fractions": [0.5], "ssr_thinking_budget": 300}, d).schedule().checkpoints() == [150]
    assert parse_request({"other_key": 1}, d) is d
    assert parse_request({"ssr": False}, d).enabled is False


def test_client_drafts_in_key_order():
    assert client_drafts({"ssr_draft_2": [5], "ssr_draft": [1], "ssr_draft_0": [3]}) == [[1], [3], [5]]
    with pytest.raises(SSRConfigError, match=r"ssr_draft\[1\]"):
        client_drafts({"ssr_draft": [1, 600]}, vocab_size=512)
    with pytest.raises(SSRConfigError, match=r"custom_params.ssr_draft_3 must not be empty"):
        client_drafts({"ssr_draft_3": []})


def test_phase_tracking_from_prompt_and_output():
    st = RequestSSR("r", RequestConfig(), IDS, prompt_tail=[1, 2, 3, 7], num_nodes=8)
    assert st.phase == REASONING  # the prompt opened a think block
    st.advance([5, 6, 7])
    assert st.reasoning_len == 3
    st.advance([5, 6, 7, 8, 4, 9, 9, 10])
    assert st.phase == ANSWER and st.answer_start == 5 and st.reasoning_len == 5


def test_think_block_opened_by_the_model_and_plain_requests():
    st = RequestSSR("r", RequestConfig(), IDS, prompt_tail=[1, 2], num_nodes=8)
    st.advance([3, 5, 6])
    assert st.phase == REASONING
    st.advance([3, 5, 6, 4, 8])
    assert st.phase == ANSWER and st.answer_start == 4
    plain = RequestSSR("p", RequestConfig(), IDS, prompt_tail=[1, 2], num_nodes=8)
    plain.advance([5, 6, 7, 8, 9, 10])
    assert plain.phase == PLAIN
    closed = RequestSSR("c", RequestConfig(), IDS, prompt_tail=[3, 5, 4, 9], num_nodes=8)
    closed.advance([5, 6, 7, 8, 9, 10])
    assert closed.phase == PLAIN


def test_answer_steps_are_attributed_to_prefix_and_suffix():
    st = RequestSSR("r", RequestConfig(), IDS, prompt_tail=[3], num_nodes=4)
    st.advance([5, 4])  # reasoning [5], think end, answer starts at index 2
    st.add_client_draft([9, 9, 11, 12, 13, 14])
    out = [5, 4, 9, 9]
    st.advance(out)
    branches = st.propose(out)
    assert branches and branches[0].tokens == [11, 12, 13]
    out += [11, 12, 13, 14]  # all 3 proposed tokens accepted + bonus
    st.settle(out)
    m = st.finish(out)
    assert m["accepted_prefix"] == 3 and m["answer_verify_steps"] == 1 and m["answer_tokens"] == 6


def test_reasoning_and_answer_tokens_add_up_to_the_visible_output():
    """finish() gets the output the client sees (SGLang drops tokens a verify step accepted past a stop
    or max_new_tokens): reasoning + answer tokens == its length, whatever was advanced before."""
    full = [5, 6, 7, 8, 4, 9, 9, 10, 11, 12]  # think end at index 4, answer from 5
    for visible, split in [(10, (5, 5)), (7, (5, 2)), (5, (5, 0)), (4, (4, 0)), (2, (2, 0))]:
        st = RequestSSR("r", RequestConfig(), IDS, prompt_tail=[3], num_nodes=8)
        st.advance(full)  # the worker saw the whole accepted run
        m = st.finish(full[:visible])
        assert (m["reasoning_tokens"], m["answer_tokens"]) == split, (visible, m)
        assert m["phase"] == (ANSWER if visible > 4 else REASONING)
    st = RequestSSR("r", RequestConfig(), IDS, prompt_tail=[3], num_nodes=8)
    st.advance(full[:3])
    m = st.finish(full[:3])
    assert (m["reasoning_tokens"], m["answer_tokens"], m["phase"]) == (3, 0, REASONING)
    plain = RequestSSR("p", RequestConfig(), IDS, prompt_tail=[1, 2], num_nodes=8)
    plain.advance([5, 6, 7, 8, 9, 10])
    m = plain.finish([5, 6, 7, 8, 9])
    assert (m["reasoning_tokens"], m["answer_tokens"], m["phase"]) == (0, 5, PLAIN)


def test_context_sources_are_indexed_in_bounded_chunks_and_counted(monkeypatch):
    """ssr_context: the prompt (its last CONTEXT_PROMPT_TOKENS), then, once the answer starts, the
    reasoning are reference sources, indexed at most CONTEXT_CHUNK tokens per step; tokens accepted from
    them are counted in accepted_suffix_context. Off by default (nothing indexed)."""
    from ssr_sglang.srt import request_state as rs

    monkeypatch.setattr(rs, "CONTEXT_CHUNK", 4)
    monkeypatch.setattr(rs, "CONTEXT_PROMPT_TOKENS", 6)
    assert parse_request({"ssr_context": True}, RequestConfig()).context is True
    assert server_config_from_env({"SSR_CONTEXT": "1"}).defaults.context is True
    with pytest.raises(SSRConfigError, match="custom_params.ssr_context"):
        parse_request({"ssr_context": "yes"}, RequestConfig())
    prompt = [1, 2, 50, 51, 52, 53, 54, 55, 3]  # its last 6 tokens are a source; it opens the think block
    off = RequestSSR("o", RequestConfig(), IDS, prompt_tail=prompt[-4:], num_nodes=4, prompt=prompt)
    st = RequestSSR("r", RequestConfig(context=True), IDS, prompt_tail=prompt[-4:], num_nodes=4, prompt=prompt)
    for s in (off, st):
        s.add_client_draft([9, 9, 70, 71, 72])  # a draft that shares nothing with the context
    out = [60, 61, 62, 63, 64]

    def step(s):  # as the worker does once per decode step; the fork pass advances again
        s.advance(out)
        s.feed_sources(out)
        s.advance(out)

    step(off)
    step(st)  # reasoning: the prompt's first chunk only
    assert off.counters.context_tokens == 0 and st.counters.context_tokens == 4
    step(st)
    assert st.counters.context_tokens == 6  # the prompt's last 6 tokens: done
    out += [4]  # think end: the answer starts; the reasoning (60..64 and the end marker) is the next source
    step(st)
    assert st.counters.context_tokens == 6 + 4  # one chunk per step, however often the step advances
    step(st)
    assert st.phase == ANSWER and st.counters.context_tokens == 6 + 6
    out += [61, 62]  # the answer restates the reasoning: the context proposes 63 64 (the draft nothing)
    step(st)
    branches = st.propose(out)
    assert branches and branches[0].tokens[:2] == [63, 64]
    out += [63, 64, 99]  # two accepted, then the bonus token
    st.settle(out)
    m = st.finish(out)
    assert m["accepted_suffix_context"] == 2 and m["accepted_suffix"] == 2 and m["context_tokens"] == 12


def test_long_client_draft_is_indexed_a_chunk_per_step(monkeypatch):
    """A client draft longer than CLIENT_DRAFT_CHUNK is indexed a chunk at a time (bounded work per step);
    proposals follow it all the same."""
    from ssr_sglang.srt import request_state as rs

    monkeypatch.setattr(rs, "CLIENT_DRAFT_CHUNK", 8)
    draft = list(range(100, 130))
    st = RequestSSR("r", RequestConfig(), IDS, prompt_tail=[1, 2], num_nodes=4)
    st.add_client_draft(draft)
    st.phase, st.answer_start = ANSWER, 0
    assert st.proposer.draft_tokens(0) == draft[:8]
    out = []
    for step in range(1, 4):
        st.advance(out)
        st.feed_sources(out)
        st.advance(out)  # the fork pass: feeds nothing
        assert st.proposer.draft_tokens(0) == draft[:min(30, 8 + 8 * step)]
    while len(out) < 30:
        st.advance(out)
        st.feed_sources(out)
        b = st.propose(out)
        assert b and b[0].tokens == draft[len(out):len(out) + 3]
        out = draft[:len(out) + 4]
        st.settle(out)
    assert st.proposer.draft_tokens(0) == draft


def test_stage_times_and_draft_overhead():
    """The worked example of ``SSRCounters.reasoning_split``: the parts add up to the reasoning's server time."""
    st = RequestSSR("r", RequestConfig(), IDS, prompt_tail=[3], num_nodes=4)
    assert st.metrics()["draft_overhead_s"] == 0.0  # no draft: nothing to charge
    for _ in range(6):
        st.note_step_time(0.009, with_draft=False, host=0.001, loop=0.010, base=0.010)
    for _ in range(4):
        st.note_step_time(0.013, with_draft=True, host=0.002, loop=0.014, base=0.010)
    st.counters.draft_prefill_loop_time_s = 0.008
    st.advance([5, 4])  # think end: later steps are verify steps
    st.note_step_time(0.020, with_draft=True, loop=0.021, base=0.010)
    m = st.metrics()
    assert m["reasoning_steps"] == 10 and m["reasoning_draft_steps"] == 4
    assert m["reasoning_time_s"] == pytest.approx(0.106) and m["verify_time_s"] == pytest.approx(0.020)
    split = m["reasoning_split_s"]
    assert split == pytest.approx({"total": 0.124, "plain_equivalent": 0.090, "host": 0.014, "draft_rows": 0.012,
                                   "draft_prefill": 0.008, "other": 0.0})
    assert sum(v for k, v in split.items() if k != "total") == pytest.approx(split["total"])
    assert m["draft_overhead_s"] == pytest.approx(0.012 + 0.008)
    unpriced = RequestSSR("d", RequestConfig(), IDS, prompt_tail=[3], num_nodes=4)
    unpriced.note_step_time(0.01, with_draft=False)  # the server had measured no draft-free step yet: its own price
    assert unpriced.metrics()["reasoning_split_s"]["other"] == 0.0
    unpriced.note_step_time(0.01, with_draft=True)  # ... nor for a draft's step: the draft's cost is unknown
    assert unpriced.metrics()["reasoning_split_s"] is None and unpriced.metrics()["draft_overhead_s"] is None


def test_think_markers_from_reasoning_parser_and_vocab():
    from transformers import AutoTokenizer

    from ssr_sglang.models import bundled_model_path
    from ssr_sglang.srt.think_ids import resolve_markers, think_ids

    tok = AutoTokenizer.from_pretrained(bundled_model_path())
    for parser in ("qwen3", None):
        ids = think_ids(tok, resolve_markers(tok, "qwen3", parser))
        assert ids.start == [3] and ids.end == [4]
        assert ids.force[1] == 4 and ids.force_tail == ids.force[2:]
    assert resolve_markers(tok, "llama", None).end == "</think>"  # found in the vocabulary
    with pytest.raises(ValueError, match="SSR_FORCE_ANSWER_TEXT"):
        think_ids(tok, resolve_markers(tok, "qwen3", None, force_text="no end here"))


def test_think_ids_come_from_the_server_config_not_the_environment(monkeypatch):
    from transformers import AutoTokenizer

    from ssr_sglang.models import bundled_model_path
    from ssr_sglang.srt.think_ids import from_config

    tok = AutoTokenizer.from_pretrained(bundled_model_path())
    monkeypatch.setenv("SSR_FORCE_ANSWER_TEXT", "no think end in here")  # read once, into the config only
    ids = from_config(tok, "qwen3", None, server_config_from_env({}))
    assert ids.end == [4] and ids.force[1] == 4
    forced = from_config(tok, "qwen3", None, server_config_from_env({"SSR_FORCE_ANSWER_TEXT": "</think>\n\nA:"}))
    assert forced.force[0] == 4 and forced.force_tail == forced.force[1:] and forced.force != ids.force
    with pytest.raises(SSRConfigError, match="SSR_THINK_END must be set too"):
        server_config_from_env({"SSR_THINK_START": "<think>"})


def test_queued_drafts_yield_to_real_requests(monkeypatch):
    from types import SimpleNamespace

    from ssr_sglang.srt import hooks
    from ssr_sglang.srt.scheduler_view import hide

    queue = [SimpleNamespace(rid=r) for r in ("a#ssr-0000", "b", "a#ssr-0001", "c")]
    for r in queue:
        if "#ssr-" in r.rid:
            hide(r)  # as the draft manager marks every draft it queues

    def lpm_like_sort(self, wq, *args, **kwargs):  # SGLang's policy put the long-prefix drafts first
        return None

    hooks._calc_priority(lpm_like_sort, None, queue)
    assert [r.rid for r in queue] == ["b", "c", "a#ssr-0000", "a#ssr-0001"]
