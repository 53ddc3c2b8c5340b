"""Rank consensus for SSR under tensor parallelism: every rank must make the same draft decisions.

Each tensor-parallel rank runs its own scheduler and its own SSR state: it forks drafts, skips them,
cancels them and builds proposal trees on its own. Nothing is sent between ranks, because every input
of those decisions is identical on all ranks *by construction*:

* token ids and request counts: SGLang broadcasts each incoming request from TP rank 0 to the other
  ranks, every rank schedules the same batches, and the verify step commits the same tokens on every
  rank (the lm head's logits are all-gathered, so each rank samples from the same full logits; sampled
  requests draw from the same seeded generator);
* the scheduler's queues (``waiting_queue``: "real requests are waiting"), the running batch's size
  (``SSR_MAX_BATCH``), the KV pool's usage (``SSR_MAX_KV_USAGE``: allocator free size plus evictable
  radix-cache tokens, whose pool size SGLang makes equal across ranks and whose allocations follow the
  identical batches) and SGLang's n-gram corpus (queried after ``synchronize()``, filled with the same
  tokens);
* the drafting policy: the cost-aware policy measures this process's own timers, which differ per
  rank, so under TP it is not used at all (``SSRWorker`` passes ``policy=None``) and requests follow
  their fixed schedules (token counts only). Stage timers are still measured per rank, but only for
  ``meta_info`` (TP rank 0's are reported); no decision reads them.

A by-construction argument can be wrong (a future SGLang change, a timer that slips into a decision),
and a divergence would mean wrong tokens or a collective that hangs. So this module checks it: each
rank folds what it decided into a running digest — per client request its draft rids, fork points,
finished/cancelled flags, skip count and the decision log (``meta_info["ssr"]["decisions"]``,
reasons included), per verify step the batch's rids and the proposal trees' token ids (read on the
host by the worker before the forward launches, :func:`note_tree`), and per processed batch its rids
and output lengths (what each row accepted) — and after every scheduler step (``SSR_TP_CONSENSUS_EVERY``, default 1; 0 turns
the check off) the ranks all-gather their digests over the TP group's CPU (gloo) group. A mismatch
raises :class:`RankDivergence` on every rank (each sees the same gathered digests), which stops the
server with the ranks' digests and this rank's latest records in the message, instead of serving
wrong tokens. The figures are in ``/server_info`` → ``internal_states[0]["ssr"]["consensus"]``.

Installed from the plugin entry point as ``HookRegistry`` AFTER hooks, registered after SSR's own
hooks so they run after SSR's bookkeeping of the step; a pass-through unless this process is an SSR
scheduler with a TP group of more than one rank.
"""

from __future__ import annotations

import collections
import hashlib
import json
import logging
from typing import Callable, List, Optional

from ssr_sglang.srt.compat import INTERNAL_STATE, SCHED
from ssr_sglang.srt.scheduler_view import manager_of, worker_of

logger = logging.getLogger(__name__)

EVERY_ENV = "SSR_TP_CONSENSUS_EVERY"
STEP_TARGET = f"{SCHED}.process_batch_result"
INFO_TARGET = f"{INTERNAL_STATE}._add_speculative"
TARGETS = (STEP_TARGET, INFO_TARGET)


class RankDivergence(RuntimeError):
    """Tensor-parallel ranks made different SSR decisions."""


def check_every() -> int:
    """``SSR_TP_CONSENSUS_EVERY`` (0: no check); a bad value raises ``SSRConfigError`` (a ``ValueError``)
    naming it."""
    from ssr_sglang import settings

    return settings.get(EVERY_ENV)


class RankConsensus:
    """One rank's running digest of its SSR decisions, compared across ranks every ``every`` steps.

    ``gather`` takes this rank's ``(digest, records)`` and returns every rank's, in rank order (a
    collective: every rank calls :meth:`step` the same number of times, once per scheduler step)."""

    def __init__(self, rank: int, world: int, every: int, gather: Callable[[int, int], List[tuple]]):
        self.rank, self.world, self.every = rank, world, every
        self._gather = gather
        self._hash = hashlib.blake2b(digest_size=8)
        self.records = 0
        self.steps = 0
        self.checks = 0
        self.rank_digests: List[str] = []
        self._recent = collections.deque(maxlen=6)  # readable tails of the latest records, for the error
        self._seen: dict = {}  # rid -> the last folded signature of its SSR state

    @property
    def digest(self) -> int:
        return int.from_bytes(self._hash.digest(), "little", signed=True)

    def record(self, kind: str, payload: bytes, note: str = "") -> None:
        self._hash.update(kind.encode() + b"\0" + payload + b"\1")
        self.records += 1
        self._recent.append(f"{kind} {note or payload[:120]!r}")

    def note_state(self, rid: str, signature: tuple) -> None:
        """Fold a client request's decision state when it changed since it was last folded."""
        if self._seen.get(rid) != signature:
            self._seen[rid] = signature
            self.record("state", repr((rid, signature)).encode(), f"{rid}: {signature!r}"[:300])

    def forget(self, live_rids) -> None:
        for rid in [r for r in self._seen if r not in live_rids]:
            del self._seen[rid]

    def step(self) -> None:
        self.steps += 1
        if self.every and self.steps % self.every == 0:
            self.check()

    def check(self) -> None:
        everyone = self._gather(self.digest, self.records)
        self.checks += 1
        self.rank_digests = [f"{d & (2**64 - 1):016x}/{n}" for d, n in everyone]
        if any(tuple(x) != tuple(everyone[0]) for x in everyone):
            raise RankDivergence(
                f"SSR draft decisions diverged across tensor-parallel ranks at scheduler step {self.steps}: "
                f"rank digests/records {self.rank_digests}; latest records on rank {self.rank}: "
                f"{list(self._recent)}")

    def summary(self) -> dict:
        return {"ranks": self.world, "every": self.every, "steps": self.steps, "checks": self.checks,
                "records": self.records, "rank_digests": self.rank_digests,
                "agreed": bool(self.rank_digests) and len(set(self.rank_digests)) == 1}


def install() -> None:
    from ssr_sglang.hook_once import register_once

    register_once(__name__, [(STEP_TARGET, _after_step, "AFTER"), (INFO_TARGET, _after_internal_state, "AFTER")])


def _torch_gather(group):
    import torch
    import torch.distributed as dist

    def gather(digest: int, records: int) -> List[tuple]:
        mine = torch.tensor([digest, records], dtype=torch.int64)
        out = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
        dist.all_gather(out, mine, group=group)
        return [tuple(int(v) for v in t.tolist()) for t in out]

    return gather


def make() -> Optional[RankConsensus]:
    """The consensus check of this SSR worker's rank (made with the worker, which owns it): None unless
    the TP group has more than one rank and ``SSR_TP_CONSENSUS_EVERY`` is not 0."""
    from sglang.srt.distributed.parallel_state import get_tp_group

    tp = get_tp_group()
    every = check_every()
    if tp.world_size <= 1 or not every:
        return None
    logger.info("SSR rank consensus on: %d TP ranks compare their draft decisions every %d step(s)",
                tp.world_size, every)
    return RankConsensus(tp.rank_in_group, tp.world_size, every, _torch_gather(tp.cpu_group))


def _of(scheduler) -> Optional[RankConsensus]:
    worker = worker_of(scheduler)
    return worker.consensus if worker is not None else None


def _signature(st) -> tuple:
    """What a client request decided so far: its drafts, skips and decision log (reasons included)."""
    c = st.counters
    drafts = tuple((b.rid, b.checkpoint, b.seeded, b.finished, b.cancelled) for b in st.drafts)
    last = st.decisions[-1] if st.decisions else None
    return (st.phase, drafts, c.drafts_started, c.drafts_skipped, c.drafts_cancelled,
            len(st.decisions), json.dumps(last, sort_keys=True, default=str) if last else "")


def _after_step(result, scheduler, batch, *args, **kwargs):
    """After SSR's bookkeeping of a step (forks, skips, cancels): fold, then compare across ranks. The
    batch's output lengths are host values once its results are processed (in the synchronous and the
    overlap loop alike), so recording them waits for nothing."""
    con = _of(scheduler)
    if con is None:
        return result
    if batch is not None:
        lens = ",".join(str(len(r.output_ids)) for r in batch.reqs)
        con.record("accepted", "\0".join(r.rid for r in batch.reqs).encode() + b"\0" + lens.encode(),
                   f"{len(batch.reqs)} requests")
    m = manager_of(scheduler)
    for rid, st in sorted(m.requests.items()):
        if not st.is_draft:
            con.note_state(rid, _signature(st) + (rid in m.disabled,))
    con.forget(m.requests)
    con.step()
    return result


def note_tree(con: Optional[RankConsensus], batch) -> None:
    """A verify step about to launch (called by the worker once its input is final, with its consensus
    check ``con``): the batch's rids and the trees handed to the verifier. Read before the forward is
    launched, so on a GPU it waits only for the copy of the trees just made, never for a forward (the
    overlap loop keeps its overlap)."""
    if con is None:
        return
    tokens = batch.spec_info.draft_token.detach().to("cpu").numpy().tobytes()
    rids = "\0".join(r.rid for r in batch.reqs).encode()
    con.record("verify", rids + b"\0" + tokens, f"{len(batch.reqs)} requests")


def _after_internal_state(result, controller, state, *args, **kwargs):
    """``/server_info`` ``ssr``: which replica and rank answered (a DP server lists one state per
    replica, in no fixed order), and the consensus figures under TP."""
    ssr = state.get("ssr")
    if isinstance(ssr, dict):
        from sglang.srt.runtime_context import get_parallel

        for key in ("dp_rank", "tp_rank"):  # dp_rank None: no DP controller
            try:
                ssr[key] = getattr(get_parallel(), key)
            except (AttributeError, RuntimeError):  # not written in this process
                ssr[key] = None
        con = _of(controller.scheduler)
        if con is not None:
            ssr["consensus"] = con.summary()
    return result
