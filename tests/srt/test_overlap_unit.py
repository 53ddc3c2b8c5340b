"""SSR's overlap-scheduling pieces against stand-ins for SGLang's batch and results: the proposals' view of
the output (pending tokens), step timing that travels with the result, the streamer marking a finished
draft's output as sent, and the registration. A real overlap server on CPU: tests/srt/test_ssr_overlap_cpu.py.
"""

from __future__ import annotations

from array import array
from types import SimpleNamespace as NS

import pytest
import torch

from ssr_sglang.srt import overlap
from ssr_sglang.srt.stage_clock import StageClock


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


def test_pending_tokens_are_the_relayed_rows_cut_to_their_lengths():
    b = _batch([5, 6, 0, 8, 0, 0], [2, 1], ["a", "b"])
    pending = overlap.pending_tokens(True, b, 3)
    assert pending == {"a": [5, 6], "b": [8]}
    a, c = b.reqs
    assert list(overlap.seen_outputs(a, pending)) == [7, 5, 6] and overlap.last_token(a, overlap.seen_outputs(a, pending)) == 6
    # nothing pending: synchronous loop, or a batch SGLang resolves synchronously (grammar)
    assert overlap.pending_tokens(False, b, 3) is None
    assert overlap.pending_tokens(True, _batch([5, 6, 0], [2], ["a"], grammar=True), 3) is None
    assert overlap.seen_outputs(a, None) is a.output_ids
    fresh = NS(rid="x", output_ids=[], origin_input_ids_unpadded=[3, 4])
    assert overlap.last_token(fresh, overlap.seen_outputs(fresh, None)) == 4  # no output yet: the prompt's last


def test_a_mismatched_or_missing_relay_is_an_error_not_a_wrong_root():
    with pytest.raises(RuntimeError, match="2 rows for a batch of 1"):
        overlap.pending_tokens(True, _batch([5, 6, 0, 8, 0, 0], [2, 1], ["a"]), 3)
    missing = _batch([5], [1], ["a"])
    missing.spec_info = NS(accept_tokens=None, accept_lens=None)
    with pytest.raises(RuntimeError, match="no relayed"):
        overlap.pending_tokens(True, missing, 3)


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
            note_step_time=lambda s, d: charged.append(s))
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

    from ssr_sglang.srt import active, hooks

    streamed = []
    monkeypatch.setattr(SchedulerOutputStreamer, "stream_output",
                        lambda self, reqs, lp, skip=None: streamed.append([r.rid for r in reqs]))
    monkeypatch.setattr(active, "MANAGER", NS(is_hidden=lambda rid: "#ssr-" in rid))
    cls = hooks.ssr_output_streamer_class()
    streamer = object.__new__(cls)
    draft = NS(rid="p#ssr-0000", finished=lambda: True, finished_output=None)
    running = NS(rid="q#ssr-0000", finished=lambda: False, finished_output=None)
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
