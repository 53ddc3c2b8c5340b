"""``StageClock``: each batch's wall time, charged to its requests' stages and to the drafting policy.

The worker marks, on the step's result, when its forward began and how many tree nodes it verified
(:meth:`StageClock.step_ran`); when that result is processed, the draft manager has the time charged
(:meth:`StageClock.charge`). The mark travels with the result because under overlap scheduling the
next step's forward starts before this one's results are processed. Stage times only feed ``meta_info["ssr"]`` and, on a single rank, the
cost-aware drafting policy; nothing else decides from them (tensor-parallel ranks time differently).
"""

from __future__ import annotations

import time
from typing import Mapping, Optional

from ssr_sglang.srt.request_state import REASONING


class StageClock:
    def __init__(self, policy, num_nodes: int, cuda: bool = False):
        self.policy = policy  # a DraftPolicy, or None (tensor parallel): then no step costs are observed
        self._cuda = cuda
        self.step_width = num_nodes  # tree nodes the step being charged verified
        self._last_result: Optional[float] = None  # perf_counter() when the last batch's results arrived
        # The last batch charged was a prefill: the next decode step finishes its work (first outputs, the new
        # requests' first decode setup) and is no sample of a plain step (DraftPolicy.observe_step).
        self._after_prefill = False
        # Drafts in the last decode step: a step with fewer also finishes the work of the drafts that left
        # (their last outputs, their release) and is no sample of a step (DraftPolicy.observe_step).
        self._drafts = 0
        self._host = 0.0  # SSR's own host work since the last decode step was charged (host())

    @staticmethod
    def step_ran(result, started: float, width: int) -> None:
        """The worker ran the forward that produced ``result`` from ``started`` (perf_counter), verifying
        ``width`` nodes; recorded on the result (SGLang's ``GenerationBatchResult``)."""
        result.ssr_step = (started, width)

    def host(self, seconds: float) -> None:
        """``seconds`` of SSR's own host work (proposals, verify width, bookkeeping, drafting decisions; not
        forks, which are timed as ``fork_time_s``): charged, whole, to every client request of the next decode
        step that is charged (each one waits for all of it)."""
        self._host += seconds

    def charge(self, batch, states: Mapping, result=None) -> None:
        """When a batch's results arrive: charge its wall time to the requests' stages (``states``: rid ->
        :class:`~ssr_sglang.srt.request_state.RequestSSR`). Once per step; a batch the worker did not
        run is not charged.

        Decode steps go to each client request's reasoning or answer (verify) time, flagged when a
        draft of the request was in the same batch; a prefill batch's share per draft it started goes
        to the parent's draft prefill time.

        Under overlap scheduling a step's forward starts while the previous one's results are still
        pending, so a step is charged from its start or the previous results' arrival, whichever is
        later: the steps' times tile the wall clock without counting an interval twice (in the
        synchronous loop the step always starts after the previous results, so that is its start).
        """
        mark = getattr(result, "ssr_step", None)
        if mark is None:
            return
        result.ssr_step = None  # charged once
        started, self.step_width = mark
        done = getattr(result, "copy_done", None)
        if done is not None:  # overlap: this step's results are ready once its copy is (waited for next anyway)
            done.synchronize()
        elif self._cuda:  # result processing waits for the device next anyway
            import torch

            torch.cuda.current_stream().synchronize()
        now = time.perf_counter()
        seconds = now - (max(started, self._last_result) if self._last_result is not None else started)
        # The policy pays for whole scheduler iterations (result processing, batch building and the
        # forward), i.e. the time since the last batch's results; a gap much longer than the forward
        # was idle time, not the step.
        loop = now - self._last_result if self._last_result is not None else None
        self._last_result = now
        loop = loop if loop is not None and loop <= 3 * seconds else None
        batch_states = [states.get(r.rid) for r in batch.reqs]
        if batch.forward_mode.is_decode():
            self._decode(batch.reqs, batch_states, seconds, loop)
        else:
            self._prefill(batch.reqs, batch_states, states, seconds, loop)

    def _decode(self, reqs, batch_states, seconds: float, loop: Optional[float]) -> None:
        with_draft = {st.parent_rid for st in batch_states if st is not None and st.is_draft}
        drafts = sum(1 for st in batch_states if st is not None and st.is_draft)
        after_prefill, self._after_prefill = self._after_prefill, False
        after_draft, self._drafts = drafts < self._drafts, drafts
        if self.policy is not None and loop is not None:
            reasoning = all(st is not None and (st.is_draft or st.phase == REASONING) for st in batch_states)
            # the drafts' mean context (tokens in their KV cache): a draft's decode re-reads all of it
            context = _mean_context(reqs, batch_states, with_output=True)
            self.policy.observe_step(len(batch_states) - drafts, drafts, loop, reasoning, after_prefill, after_draft,
                                     draft_context=context)
        host, self._host = self._host, 0.0
        clients = len(batch_states) - drafts
        base = self.policy.free_step_s(clients) if self.policy is not None else None
        for st in batch_states:
            if st is not None and not st.is_draft:
                st.note_step_time(seconds, st.rid in with_draft, host, loop=loop, base=base)
                st.counters.verify_steps += 1
                st.counters.verify_nodes += self.step_width

    def _prefill(self, reqs, batch_states, states: Mapping, seconds: float, loop: Optional[float]) -> None:
        self._after_prefill = True
        share = seconds / max(1, len(batch_states))
        loop_share = (seconds if loop is None else loop) / max(1, len(batch_states))
        drafts = 0
        for st in batch_states:
            parent = states.get(st.parent_rid) if st is not None and st.is_draft else None
            if parent is not None:
                parent.counters.draft_prefill_time_s += share
                parent.counters.draft_prefill_loop_time_s += loop_share
                drafts += 1
        if self.policy is not None and loop is not None and drafts:
            self.policy.observe_prefill(loop / max(1, len(batch_states)), drafts,
                                        context=_mean_context(reqs, batch_states, with_output=False))


def _mean_context(reqs, batch_states, with_output: bool) -> float:
    """Mean context length of the drafts among ``reqs`` (their input, plus their output if
    ``with_output``); 0 without drafts."""
    lens = [len(r.origin_input_ids) + (len(r.output_ids) if with_output else 0)
            for r, st in zip(reqs, batch_states) if st is not None and st.is_draft]
    return sum(lens) / len(lens) if lens else 0.0
