"""SSR's overlap-scheduling pieces against stand-ins for SGLang's batch and results: the proposals' view of
the output (pending tokens), step timing that travels with the result, the streamer marking a finished
draft's output as sent, and the registration. A real overlap server on CPU: tests/srt/test_ssr_overlap_cpu.py.
"""

from __future__ import annotations

from array import array
from types import SimpleNamespace as NS

import numpy as np
import pytest
import torch

from ssr_sglang.srt import overlap
from ssr_sglang.srt.stage_clock import StageClock
from ssr_sglang.srt.verify_width import VerifyWidth


def test_joined_outputs_reads_as_the_concatenation():
    head = array("q", [1, 2, 3])
    j = overlap.JoinedOutputs(head, [4, 5])
    full = [1, 2, 3, 4, 5]
    assert len(j) == 5 and list(j) == full and j[-1] == 5 and j[0] == 1 and j[3] == 4
    for s in (slice(None), slice(1, 4), slice(3, None), slice(0, 2), slice(4, 5), slice(-3, -1), slice(5, 9),
              slice(2, 1), slice(None, None, 2)):
        assert list(j[s]) == full[s], s
    with pytest.raises(IndexError):
        j[5]


def _batch(accept_tokens, accept_lens, rids, grammar=False):
    return NS(reqs=[NS(rid=r, output_ids=[7], origin_input_ids_unpadded=[9]) for r in rids],
              spec_info=NS(accept_tokens=torch.tensor(accept_tokens), accept_lens=torch.tensor(accept_lens)),
              grammar_needs_sync=lambda: grammar)


def _pending(batch, n):
    return overlap.pending_from_rows(batch, *overlap.relayed_rows(batch), n)


def test_pending_tokens_are_the_relayed_rows_cut_to_their_lengths():
    b = _batch([5, 6, 0, 8, 0, 0], [2, 1], ["a", "b"])
    pending = _pending(b, 3)
    assert pending == {"a": [5, 6], "b": [8]}
    a, c = b.reqs
    assert list(overlap.seen_outputs(a, pending)) == [7, 5, 6] and overlap.last_token(a, overlap.seen_outputs(a, pending)) == 6
    # nothing pending: synchronous loop, or a batch SGLang resolves synchronously (grammar)
    assert overlap.uses_relay(True, b) and not overlap.uses_relay(False, b)
    assert not overlap.uses_relay(True, _batch([5, 6, 0], [2], ["a"], grammar=True))
    assert overlap.seen_outputs(a, None) is a.output_ids
    fresh = NS(rid="x", output_ids=[], origin_input_ids_unpadded=[3, 4])
    assert overlap.last_token(fresh, overlap.seen_outputs(fresh, None)) == 4  # no output yet: the prompt's last


def test_a_mismatched_or_missing_relay_is_an_error_not_a_wrong_root():
    with pytest.raises(RuntimeError, match="2 rows for a batch of 1"):
        _pending(_batch([5, 6, 0, 8, 0, 0], [2, 1], ["a"]), 3)
    missing = _batch([5], [1], ["a"])
    missing.spec_info = NS(accept_tokens=None, accept_lens=None)
    with pytest.raises(RuntimeError, match="no relayed"):
        overlap.relayed_rows(missing)


def test_step_time_travels_with_its_result_and_never_counts_twice(monkeypatch):
    """Overlap order: step 2 starts before step 1's results are processed; each result is charged once,
    with its own width, and the charged intervals do not overlap."""
    from ssr_sglang.srt import stage_clock
    from ssr_sglang.srt.request_state import REASONING

    clock = StageClock(None, num_nodes=8)
    now = [0.0]
    monkeypatch.setattr(stage_clock.time, "perf_counter", lambda: now[0])
    charged = []
    st = NS(is_draft=False, rid="a", phase=REASONING, counters=NS(verify_steps=0, verify_nodes=0),
            note_step_time=lambda s, d, h=0.0, **k: charged.append(s))
    batch = NS(reqs=[NS(rid="a")], forward_mode=NS(is_decode=lambda: True))
    r1, r2 = NS(copy_done=None), NS(copy_done=None)
    clock.step_ran(r1, 0.0, 8)
    clock.step_ran(r2, 1.0, 3)  # launched before r1 is processed
    now[0] = 1.5
    clock.charge(batch, {"a": st}, r1)
    assert clock.step_width == 8
    now[0] = 2.5
    clock.charge(batch, {"a": st}, r2)
    assert clock.step_width == 3
    clock.charge(batch, {"a": st}, r2)  # charged once
    assert charged == [1.5, 1.0] and st.counters.verify_steps == 2 and st.counters.verify_nodes == 11
    clock.charge(batch, {"a": st}, NS())  # a result the worker did not run: nothing charged
    assert len(charged) == 2


def test_streamer_marks_a_finished_draft_as_sent(monkeypatch):
    """Under overlap a finished draft is in the next batch too, after SSR dropped it: SGLang must then skip it."""
    from sglang.srt.managers.scheduler_components.output_streamer import SchedulerOutputStreamer

    from ssr_sglang.srt import hooks
    from ssr_sglang.srt.scheduler_view import hide

    streamed = []
    monkeypatch.setattr(SchedulerOutputStreamer, "stream_output",
                        lambda self, reqs, lp, skip=None: streamed.append([r.rid for r in reqs]))
    scheduler = NS(draft_worker=NS(serves_ssr=True, manager=NS()))
    cls = hooks.ssr_output_streamer_class(scheduler)
    streamer = object.__new__(cls)
    draft = NS(rid="p#ssr-0000", finished=lambda: True, finished_output=None)
    running = NS(rid="q#ssr-0000", finished=lambda: False, finished_output=None)
    hide(draft), hide(running)
    parent = NS(rid="p", finished=lambda: False, finished_output=None)
    cls.stream_output(streamer, [parent, draft, running], False)
    assert streamed == [["p"]] and draft.finished_output is True and running.finished_output is None
    assert cls.stream_output(streamer, [draft], False) is None and streamed == [["p"]]


def test_registered_with_overlap_support_and_synchronous_on_cpu_unless_forced(monkeypatch):
    from sglang.srt.speculative.spec_registry import get_spec

    from ssr_sglang.srt import plugin, spec

    plugin._register_algorithm()
    assert get_spec(spec.NAME).supports_overlap is True

    def args(device):
        return NS(device=device, disable_overlap_schedule=False, enable_mixed_chunk=False, max_running_requests=8,
                  speculative_num_draft_tokens=4, speculative_eagle_topk=2, speculative_num_steps=2, page_size=1,
                  attention_backend="intel_amx", speculative_ngram_max_bfs_breadth=10, enable_dp_attention=False,
                  disaggregation_mode="null", pp_size=1)

    monkeypatch.delenv(spec.FORCE_OVERLAP_CPU_ENV, raising=False)
    # the CUDA server's kernel check (tests/srt/test_cuda_kernel_check.py) is not this test's: the CPU engine
    # this process runs on hides flashinfer
    monkeypatch.setattr(spec, "check_cuda_kernels", lambda device: None)
    cpu, gpu = args("cpu"), args("cuda")
    spec.SSRSpecAlgo.handle_server_args(None, cpu)
    spec.SSRSpecAlgo.handle_server_args(None, gpu)
    assert cpu.disable_overlap_schedule is True and gpu.disable_overlap_schedule is False
    monkeypatch.setenv(spec.FORCE_OVERLAP_CPU_ENV, "1")
    forced = args("cpu")
    spec.SSRSpecAlgo.handle_server_args(None, forced)
    assert forced.disable_overlap_schedule is False


def _worker(pending):
    """An SSR worker reduced to what its per-request proposal step reads (a real DraftManager)."""
    from ssr_sglang.srt.config import ServerConfig
    from ssr_sglang.srt.draft_manager import DraftManager
    from ssr_sglang.srt.think_ids import ThinkIds
    from ssr_sglang.srt.worker import SSRWorker

    w = object.__new__(SSRWorker)
    w.manager = DraftManager(ServerConfig(), ThinkIds(start=[1], end=[2], force=[2], force_tail=[]), num_nodes=6,
                             vocab_size=100, max_draft_batch=4, policy=None)
    w._pending = pending
    return w


def _req(output_ids, draft):
    sp = NS(custom_params={"ssr_draft": draft}, temperature=0.0, top_k=-1)
    return NS(rid="r", output_ids=output_ids, origin_input_ids_unpadded=[1, 2, 50], sampling_params=sp,
              multimodal_inputs=None, custom_logit_processor=None)


def test_proposals_from_pending_tokens_are_the_synchronous_ones():
    """The same answer, all of it in output_ids (synchronous) or its last tokens still pending (overlap):
    the same token tree, rooted at the last token, and the same bookkeeping of the step before."""
    draft = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19]
    sync_w, over_w = _worker(None), _worker({"r": [11]})
    sync_req, over_req = _req([10, 11], draft), _req([10], draft)
    for w, req in ((sync_w, sync_req), (over_w, over_req)):
        assert w._propose_one(req, 6)[0] is not None  # a first step, so both states have one to settle
    sync_req.output_ids = [10, 11, 12, 13, 14]
    over_req.output_ids = [10, 11]
    over_w._pending = {"r": [12, 13, 14]}  # accepted by the step in flight, not processed yet
    (a, phase_a), (b, phase_b) = sync_w._propose_one(sync_req, 6), over_w._propose_one(over_req, 6)
    assert phase_a == phase_b
    assert a.tokens.tolist() == b.tokens.tolist() and a.tokens[0] == 14 and a.tokens[1] == 15
    assert (a.mask == b.mask).all()
    sa, sb = sync_w.manager.requests["r"].counters, over_w.manager.requests["r"].counters
    sa, sb = sa.as_dict(), sb.as_dict()
    sa.pop("propose_time_s"), sb.pop("propose_time_s")
    assert sa == sb and sa["accepted_prefix"] == 2


class _Relay:
    """A relayed device tensor that counts its copies to the host."""

    copies = 0

    def __init__(self, values):
        self.t = torch.tensor(values)

    def cpu(self):
        _Relay.copies += 1
        return self.t


def _overlap_worker(monkeypatch, fallback: str, order: list):
    """An SSR worker under overlap scheduling whose NGRAM base makes NGRAM's one host copy of the relay."""
    from sglang.srt.speculative.ngram_worker import NGRAMWorker

    def ngram_prepare(self, batch):  # NGRAM's proposal step as it handles the relay (ngram_worker.py)
        order.append("ngram proposal step")
        info = batch.spec_info
        self.prev_token_ids, self.prev_accept_lens = info.accept_tokens.cpu().tolist(), info.accept_lens.cpu().tolist()
        n = self.draft_token_num
        drafts = np.zeros(len(batch.reqs) * n, dtype=np.int64)
        return drafts, np.tile(np.eye(n, dtype=bool).reshape(-1) | _root_mask(n), len(batch.reqs))

    def ngram_prepare_for_spec(self, batch):  # NGRAM's pre-sync work, then its proposal step
        order.append(("pre-sync work", _Relay.copies))
        self._prepare_draft_tokens(batch)

    monkeypatch.setattr(NGRAMWorker, "_prepare_draft_tokens", ngram_prepare)
    monkeypatch.setattr(NGRAMWorker, "_prepare_for_speculative_decoding", ngram_prepare_for_spec)
    w = _worker(None)
    w.ssr_config = NS(reasoning_fallback=fallback)
    w.enable_overlap, w.draft_token_num, w.check_trees = True, 4, False
    w.width = VerifyWidth(4, adaptive=False, policy=None)
    w.manager.overlap = {"schedule": True, "pending_steps": 0}
    return w


def _root_mask(n):
    m = np.zeros((n, n), dtype=bool)
    m[:, 0] = True
    return m.reshape(-1)


@pytest.mark.parametrize("fallback", ["ngram", "none"])
def test_overlap_step_copies_the_relay_to_the_host_once_and_not_before_ngrams_pre_sync_work(monkeypatch, fallback):
    """Issue 36: SSR adds no host copy of its own before the forward. With the n-gram fallback the step's one
    copy is NGRAM's own (SSR reads its lists); without it SSR makes that one copy in its place. Either way
    it comes after NGRAM's pre-sync work, and the proposals see the pending tokens."""
    order: list = []
    w = _overlap_worker(monkeypatch, fallback, order)
    _Relay.copies = 0
    batch = NS(reqs=[NS(rid="a", output_ids=[7], origin_input_ids_unpadded=[9], sampling_params=None)],
               spec_info=NS(accept_tokens=_Relay([5, 6, 0, 0]), accept_lens=_Relay([2])),
               grammar_needs_sync=lambda: False, forward_mode=NS(is_decode=lambda: True,
                                                                 is_target_verify=lambda: False))
    w.manager.state_for = lambda req: NS(settle=lambda out: None, advance=lambda out: None,
                                         feed_sources=lambda out: None, phase="reasoning", has_drafts=False)
    w._prepare_for_speculative_decoding(batch)
    assert _Relay.copies == 2  # tokens and lengths, once each
    assert order[0] == ("pre-sync work", 0)
    assert w._pending == {"a": [5, 6]} and w.manager.overlap["pending_steps"] == 1
    assert w.prev_token_ids == [5, 6, 0, 0] and w.prev_accept_lens == [2]  # what NGRAM's corpus update reads


def test_a_drafts_pending_tokens_are_offered_at_once_and_never_twice():
    """Under overlap a draft's own last accepted tokens are pending too: the parent's proposals use them in
    the same step a synchronous loop would (drafts current, not one step stale), and once they reach the
    draft's output_ids they are not fed again."""
    from ssr_sglang.srt.config import RequestConfig
    from ssr_sglang.srt.request_state import ANSWER, RequestSSR
    from ssr_sglang.srt.think_ids import ThinkIds

    ids = ThinkIds(start=[1], end=[2], force=[2], force_tail=[])

    def parent(draft_out):
        st = RequestSSR("p", RequestConfig(), ids, [1], 6)
        b = st.add_draft("p#ssr-0000", checkpoint=3)
        b.req = NS(rid="p#ssr-0000", output_ids=draft_out)
        st.phase, st.answer_start = ANSWER, 0
        return st, b

    draft = [20, 21, 22, 23, 24, 25, 26, 27]
    sync, _ = parent(list(draft))
    over, b = parent(draft[:3])
    pending = {"p#ssr-0000": draft[3:]}  # accepted by the step in flight, not in the draft's output_ids yet
    answer = [20, 21, 22, 23]
    got_sync = [x.tokens for x in sync.propose(answer)]
    got_over = [x.tokens for x in over.propose(answer, pending)]
    assert got_sync == got_over and got_sync[0][:2] == [24, 25]
    b.req.output_ids = list(draft)  # the step's results processed: nothing new to feed
    over.pull_drafts()
    assert over.proposer.draft_tokens(b.draft_id) == draft and over.counters.draft_tokens == len(draft)


class _Watched(list):
    """An output list that records the length of every slice taken of it."""

    def __init__(self, *a):
        super().__init__(*a)
        self.sliced: list = []

    def __getitem__(self, i):
        if isinstance(i, slice):
            self.sliced.append(len(range(*i.indices(len(self)))))
        return super().__getitem__(i)


def test_a_long_answer_is_not_copied_per_step():
    """Issue 36: each step reads only the answer's new tokens (and a few at its ends), never a copy of the
    whole answer, in the worker's proposals and the manager's pruning alike."""
    from ssr_sglang.srt.config import RequestConfig
    from ssr_sglang.srt.request_state import ANSWER, RequestSSR
    from ssr_sglang.srt.think_ids import ThinkIds

    ids = ThinkIds(start=[1], end=[2], force=[2], force_tail=[])
    st = RequestSSR("p", RequestConfig(), ids, [1], 6)
    st.add_client_draft(list(range(100, 300)))
    st.phase, st.answer_start = ANSWER, 10
    out = _Watched([5] * 10 + list(range(100, 4100)))
    st.propose(out)  # the first step takes the answer in
    for k in range(5):
        out.sliced.clear()
        pending = [7 + k, 8]
        st.propose(overlap.JoinedOutputs(out, pending))  # overlap: the last step's tokens still pending
        out.extend(pending)  # its results processed: the manager prunes against output_ids
        st.proposer.sync_answer(overlap.window(out, st.answer_start))
        out.append(9)
        st.propose(out)  # synchronous
        assert out.sliced and max(out.sliced) <= 64, out.sliced


def test_views_read_as_the_slices_they_stand_for():
    out, tail = array("q", range(10)), [10, 11]
    j = overlap.JoinedOutputs(out, tail)
    for start in (0, 3, 10, 11, 12):
        v = overlap.window(j, start)
        full = (list(out) + tail)[start:]
        assert len(v) == len(full) and list(v) == full
        for s in (slice(None), slice(1, 3), slice(-2, None), slice(0, 0)):
            assert list(v[s]) == full[s]
    assert list(overlap.window([1, 2, 3], 1)[0:5]) == [2, 3]


def test_width_rating_waits_for_the_processed_result():
    """Issue 36: the width policy's rating of a verify step runs when the step's result is processed (the
    manager's before_batch, after the stage clock: host tensors by then), not after the forward; once."""
    from ssr_sglang.core.width import WidthPolicy

    w = _worker(None)
    w.manager.width = control = VerifyWidth(4, adaptive=True, policy=WidthPolicy(4))
    seen = []
    control.policy.observe_paths = lambda kind, ps, width: seen.append((kind, ps, width))
    control.policy.observe_choice = lambda bs, s: seen.append(("choice", bs))
    tokens = np.array([[9, 5, 6, 7], [3, 4, 4, 4]])
    parents = np.array([[-1, 0, 0, 1], [-1, 0, 1, 2]])
    from ssr_sglang.srt.verify_width import _Rating

    result = NS(ssr_rating=_Rating(tokens, parents, ["drafts", "ngram-answer"], 4, 0.0),
                next_token_ids=torch.tensor([5, 7, 8, 0, 4, 1, 0, 0]), accept_lens=torch.tensor([3, 2]))
    batch = NS(reqs=[NS(rid="a"), NS(rid="b")], forward_mode=NS(is_decode=lambda: True))
    w.manager.before_batch(batch, result)
    assert seen == [("drafts", [[1, 3]], 4), ("ngram-answer", [[1]], 4), ("choice", 2)]
    control.rate(result)
    assert len(seen) == 3 and result.ssr_rating is None
