"""Per-request SSR state inside the scheduler process: phase, drafts, proposer, counters.

A :class:`RequestSSR` is the record of one request; it talks to no part of SGLang. The
:class:`~ssr_sglang.srt.draft_manager.DraftManager` creates, changes and drops these records (the
worker's proposal step only advances and settles the one it proposes for). Everything here is decided
from token ids and counts only, so every tensor-parallel rank (each runs its own scheduler and
worker) makes the same decisions.
"""

from __future__ import annotations

import dataclasses
import time
from typing import List, Optional, Sequence

from ssr_sglang import settings
from ssr_sglang.core.proposer import ANSWER_ID, DraftProposer, ProposerConfig
from ssr_sglang.core.simulator import simulate
from ssr_sglang.core.think_markers import ThinkEndMatcher
from ssr_sglang.srt.config import RequestConfig
from ssr_sglang.srt.metrics import SSRCounters
from ssr_sglang.srt.overlap import seen_outputs, window
from ssr_sglang.srt.think_ids import ThinkIds

UNDECIDED, REASONING, ANSWER, PLAIN = "undecided", "reasoning", "answer", "plain"
# How many leading output tokens may pass before a request that has not opened a think block is
# treated as non-reasoning (``PLAIN``: no drafts, output exactly as plain decoding).
THINK_START_WINDOW = settings.get("SSR_THINK_START_WINDOW")
REPLAY_TOKENS = settings.get("SSR_REPLAY_TOKENS")
# Context sources (``ssr_context``): the last CONTEXT_PROMPT_TOKENS prompt tokens, once the request has a
# draft, and the last CONTEXT_REASONING_TOKENS reasoning tokens, once its answer starts, are indexed as
# reference sources at most CONTEXT_CHUNK tokens per call (about 0.5 us a token: a bounded share of a step).
CONTEXT_PROMPT_TOKENS = settings.get("SSR_CONTEXT_PROMPT_TOKENS")
CONTEXT_REASONING_TOKENS = settings.get("SSR_CONTEXT_REASONING_TOKENS")
CONTEXT_CHUNK = settings.get("SSR_CONTEXT_CHUNK")
# A client draft (up to 65536 tokens) is indexed CLIENT_DRAFT_CHUNK tokens at a time: the first chunk when
# the request arrives, one more per step after, so a long draft never stalls the scheduler (~0.5 ms a chunk).
CLIENT_DRAFT_CHUNK = settings.get("SSR_CLIENT_DRAFT_CHUNK")


@dataclasses.dataclass
class DraftBranch:
    rid: str
    draft_id: int  # id in the parent's proposer
    checkpoint: int  # reasoning tokens at the fork
    req: object = None  # the hidden Req, once the scheduler created it
    consumed: int = 0  # draft output tokens already handed to the proposer
    finished: bool = False
    cancelled: bool = False  # closed because the parent finished first: to be aborted
    seeded: bool = False  # started with earlier drafts' answers as its proposals
    steps: int = 0  # decode steps the draft took, once it ended
    tokens: int = 0  # tokens it wrote, once it ended

    def summary(self, supplied: int) -> dict:
        from ssr_sglang.srt import faults

        d = {"rid": self.rid, "checkpoint": self.checkpoint, "seeded": self.seeded, "tokens": self.tokens,
             "steps": self.steps, "accept_length": round(self.tokens / self.steps, 3) if self.steps else None,
             "supplied": supplied, "ended": "cancelled" if self.cancelled else "finished"}
        if faults.DRAFT_TOKENS and self.req is not None:  # tests only
            d["input_ids"], d["output_ids"] = list(self.req.origin_input_ids), list(self.req.output_ids)
        return d


class RequestSSR:
    """SSR bookkeeping of one client request (``is_draft=False``) or one hidden draft request."""

    def __init__(self, rid: str, cfg: RequestConfig, ids: ThinkIds, prompt_tail: Sequence[int],
                 num_nodes: int, is_draft: bool = False, parent_rid: Optional[str] = None,
                 prompt: Sequence[int] = (), constrained: bool = False):
        self.rid = rid
        self.cfg = cfg
        # Grammar-constrained (regex, JSON schema, EBNF, structural tag): the grammar starts right after the
        # think end, so a draft is forced with the think end only and its answer starts there too (no tail).
        self.constrained = constrained
        self.force_tail: List[int] = [] if constrained else list(ids.force_tail)
        self.is_draft = is_draft
        self.parent_rid = parent_rid
        self.schedule = cfg.schedule() if cfg.enabled and not is_draft else None
        self.counters = SSRCounters()
        self.drafts: List[DraftBranch] = []
        self._proposer: Optional[DraftProposer] = None
        self._num_nodes = num_nodes
        self._ids = ids
        self._end = ThinkEndMatcher(ids.end) if ids.end else None
        self._scanned = 0  # output tokens fed to the think-end matcher
        self._offset = 0  # output index of the matcher's first token
        self.answer_start = -1  # index in output_ids where the answer begins
        # Bookkeeping of the last proposal, settled when the next tokens arrive.
        self._proposed_at = -1
        self._ssr_step = False
        self._final: Optional[dict] = None
        self.decisions: List[dict] = []  # fork decisions of the drafting policy (see note_decision)
        self.control: Optional[bool] = None  # served without drafts to measure a_plain (set at its first decision)
        self.declined: Optional[tuple] = None  # (reasoning tokens, reason) of the policy's last no-fork decision
        # Context sources (cfg.context): [source id, tokens, next index to feed, end index]; _prompt is None
        # when there is nothing (more) to index
        self._prompt = prompt if cfg.context and cfg.enabled and not is_draft else None
        self._context: List[list] = []
        self._context_ids: set = set()
        self._pending_drafts: List[list] = []  # client drafts still being indexed: [source id, tokens, next, end]
        if is_draft:
            self.phase = ANSWER  # a draft starts right after its forced think end
            self.answer_start = 0
        elif not ids.end:
            self.phase = PLAIN  # (a request with SSR disabled is still tracked: its stage times compare)
        elif _opens_think_block(prompt_tail, ids):
            self.phase = REASONING
        else:
            self.phase = UNDECIDED

    # -- phase tracking -------------------------------------------------
    def advance(self, output_ids: Sequence[int]) -> None:
        """Consume new output tokens: detect the think start/end, count reasoning tokens. Idempotent for
        the same ``output_ids`` (the worker and the fork pass both call it in one step)."""
        n = len(output_ids)
        if self.phase == UNDECIDED:
            window = THINK_START_WINDOW + len(self._ids.start)
            k = _find(output_ids[:window], self._ids.start) if self._ids.start else -1
            if k >= 0:
                self.phase = REASONING
                self._scanned = self._offset = k + len(self._ids.start)
            elif n >= window:
                self.phase = PLAIN
        if self.phase == REASONING and n > self._scanned:
            at = self._end.feed(output_ids[self._scanned:n])
            self._scanned = n
            if at >= 0:
                end_index = self._offset + at  # output index of the last think-end token
                self.answer_start = end_index + 1
                self.phase = ANSWER
                self.counters.reasoning_tokens = end_index + 1
            else:
                self.counters.reasoning_tokens = n

    def feed_sources(self, output_ids: Sequence[int]) -> None:
        """Index one more chunk of each source fed in chunks (a long client draft, the context sources):
        bounded work, called once per decode step by the worker, after :meth:`advance`."""
        if self._pending_drafts:
            self._feed_client_drafts()
        if self._prompt is not None and self.has_drafts:
            self.feed_context(output_ids)

    def feed_context(self, output_ids: Sequence[int], budget: Optional[int] = None) -> int:
        """Index the next (at most ``budget``) tokens of the context sources: the prompt's last
        ``CONTEXT_PROMPT_TOKENS`` tokens, then, once the answer has started, the reasoning's last
        ``CONTEXT_REASONING_TOKENS`` (up to the think end); ``budget`` defaults to ``CONTEXT_CHUNK``.
        Returns how many were indexed; once both are done, later calls return 0 at once."""
        if self._prompt is None:
            return 0
        budget = CONTEXT_CHUNK if budget is None else budget
        if not self._context:
            n = len(self._prompt)
            self._add_context_source(self._prompt, max(0, n - CONTEXT_PROMPT_TOKENS), n)
        if len(self._context) == 1 and self.phase == ANSWER:
            end = self.answer_start
            reasoning = list(output_ids[max(0, end - CONTEXT_REASONING_TOKENS):end])
            self._add_context_source(reasoning, 0, len(reasoning))
        fed = 0
        for src in self._context:
            fed += self._feed_chunk(src, budget - fed)
            if fed >= budget:
                break
        self.counters.context_tokens += fed
        if len(self._context) == 2 and all(src[2] >= src[3] for src in self._context):
            self._prompt = None  # both indexed: nothing more to do
        return fed

    def _add_context_source(self, tokens: Sequence[int], start: int, end: int) -> None:
        sid = self.proposer.add_reference(())
        self._context.append([sid, tokens, start, end])
        self._context_ids.add(sid)

    @property
    def reasoning_len(self) -> int:
        return self.counters.reasoning_tokens

    # -- drafts ---------------------------------------------------------
    @property
    def force(self) -> List[int]:
        """What a draft's input ends with: the text that closes the reasoning, cut after the think end when
        the request is constrained (its grammar starts right after the think end, the draft's too)."""
        f = self._ids.force
        return list(f[:len(f) - len(self._ids.force_tail)]) if self.constrained else list(f)

    @property
    def proposer(self) -> DraftProposer:
        if self._proposer is None:
            self._proposer = DraftProposer(ProposerConfig(
                max_tokens=max(1, self._num_nodes - 1),
                use_prefix=self.cfg.use_prefix,
                use_suffix=self.cfg.use_suffix,
            ))
        return self._proposer

    def add_draft(self, rid: str, checkpoint: int, seeded: bool = False) -> DraftBranch:
        draft_id = self.proposer.add_draft(list(self.force_tail))
        branch = DraftBranch(rid=rid, draft_id=draft_id, checkpoint=checkpoint, seeded=seeded)
        self.drafts.append(branch)
        return branch

    def add_client_draft(self, tokens: Sequence[int]) -> None:
        """A client-supplied draft: its first ``CLIENT_DRAFT_CHUNK`` tokens now, the rest a chunk per
        :meth:`feed_sources` (bounded work per scheduler step)."""
        tokens = list(tokens)
        sid = self.proposer.add_draft(tokens[:CLIENT_DRAFT_CHUNK])
        if len(tokens) > CLIENT_DRAFT_CHUNK:
            self._pending_drafts.append([sid, tokens, CLIENT_DRAFT_CHUNK, len(tokens)])

    def _feed_client_drafts(self) -> None:
        src = self._pending_drafts[0]
        self._feed_chunk(src, CLIENT_DRAFT_CHUNK)
        if src[2] >= src[3]:
            self._pending_drafts.pop(0)

    def _feed_chunk(self, src: list, budget: int) -> int:
        """Index up to ``budget`` more tokens of a source being fed in chunks (``[source id, tokens,
        next index, end index]``, advanced in place); returns how many."""
        sid, toks, at, end = src
        hi = min(end, at + max(0, budget))
        if hi > at:
            self.proposer.extend_draft(sid, toks[at:hi])
            src[2] = hi
        return hi - at

    def pull_drafts(self, pending: Optional[dict] = None) -> None:
        """Hand newly generated draft tokens to the proposer (drafts decode in the same batches);
        ``pending``: under overlap scheduling, the tokens each request of the batch being prepared accepted
        in the step before, not in its ``output_ids`` yet (:mod:`ssr_sglang.srt.overlap`): handed over too."""
        for b in self.drafts:
            if b.req is None or b.finished and b.consumed >= len(b.req.output_ids):
                continue
            out = seen_outputs(b.req, pending)
            if len(out) > b.consumed:
                new = out[b.consumed:]
                self.proposer.extend_draft(b.draft_id, new)
                self.counters.draft_tokens += len(new)
                b.consumed = len(out)

    def live_drafts(self) -> List[DraftBranch]:
        return [b for b in self.drafts if not b.finished]

    def draft_answers(self) -> List[List[int]]:
        """Every draft's answer as it stands now (newly generated tokens pulled first), oldest first:
        the seeds of the next draft."""
        self.pull_drafts()
        tail = len(self.force_tail)
        return [toks for toks in (self.proposer.draft_tokens(b.draft_id)[tail:] for b in self.drafts) if toks]

    @property
    def settled(self) -> bool:
        """The last two drafts that ended on their own agree (one is a prefix of the other)."""
        done = [b for b in self.drafts if b.finished and not b.cancelled]
        if len(done) < 2:
            return False
        a, b = (self.proposer.draft_tokens(x.draft_id) for x in done[-2:])
        n = min(len(a), len(b))
        return a[:n] == b[:n]

    def draft_written(self, b: DraftBranch) -> int:
        """Answer tokens draft ``b`` has written so far."""
        return len(b.req.output_ids) if b.req is not None else 0

    def draft_replays(self, answer: Sequence[int], max_tokens: int = REPLAY_TOKENS) -> List[tuple]:
        """How good each draft was, whether or not a newer one replaced it: the answer replayed
        against the draft alone (:func:`~ssr_sglang.core.simulator.simulate`), over the answer tokens
        the draft had written (at most ``max_tokens``, which bounds the host time). For the first and the
        newest draft only, once per request. Per draft: (reasoning tokens at its fork,
        answer tokens replayed, verify steps they took)."""
        if not self.drafts or not answer:
            return []
        self.pull_drafts()
        tail = len(self.force_tail)
        cfg = ProposerConfig(max_tokens=max(1, self._num_nodes - 1))
        out = []
        for b in {id(x): x for x in (self.drafts[0], self.drafts[-1])}.values():
            toks = self.proposer.draft_tokens(b.draft_id)[tail:]
            n = min(len(toks), len(answer), max_tokens)
            if n:
                rep = simulate(list(answer[:n]), [toks], cfg, num_nodes=self._num_nodes, tree=True)
                out.append((b.checkpoint, n, rep.steps))
        return out

    def supplied_by(self, b: DraftBranch) -> int:
        """Answer tokens accepted from draft ``b``'s proposals."""
        return self._proposer.stats.per_draft.get(b.draft_id, 0) if self._proposer is not None else 0

    def note_decision(self, decision: dict, limit: int = 32) -> bool:
        """Keep a fork decision for ``meta_info``: every fork, and a no-fork only when its reason
        differs from the previous entry's (repeats are counted in ``times``). True when it is kept as
        a new entry."""
        last = self.decisions[-1] if self.decisions else None
        if last is not None and not decision["fork"] and not last["fork"] and last["reason"] == decision["reason"]:
            last["times"] = last.get("times", 1) + 1
            return False
        if len(self.decisions) < limit:
            self.decisions.append(decision)
        return True

    def close_draft(self, b: DraftBranch, cancelled: bool) -> None:
        """The draft ended (or is being cancelled): take its last tokens and count it once."""
        if b.finished:
            return
        self.pull_drafts()
        b.finished = True
        b.cancelled = cancelled
        c = self.counters
        if cancelled:
            c.drafts_cancelled += 1
        else:
            c.drafts_finished += 1
        if b.req is not None:
            c.draft_prompt_tokens += len(b.req.origin_input_ids)
            c.draft_cached_tokens += b.req.cached_tokens

    # -- proposals and their outcome -----------------------------------
    @property
    def has_drafts(self) -> bool:
        return self._proposer is not None and self._proposer.num_drafts > 0

    def settle(self, output_ids: Sequence[int]) -> None:
        """Account for the verify step whose result is now in ``output_ids``."""
        if self._proposed_at < 0:
            return
        got = len(output_ids) - self._proposed_at  # accepted proposals + the bonus token
        self._proposed_at = -1
        if got <= 0:
            return
        c = self.counters
        c.answer_verify_steps += 1
        c.answer_tokens += got
        if not self._ssr_step:
            return
        c.draft_answer_steps += 1
        c.draft_answer_tokens += got
        accepted = got - 1
        p = self._proposer
        branch = 0
        if accepted and len(p._last) > 1:
            new = list(output_ids[len(output_ids) - got:len(output_ids) - 1])
            branch = next((i for i, b in enumerate(p._last) if b.tokens[:accepted] == new), 0)
        before = (p.stats.accepted_prefix, p.stats.accepted_suffix)
        source = p._last[branch].draft_id if 0 <= branch < len(p._last) else -1
        p.record(accepted, branch)
        c.accepted_prefix += p.stats.accepted_prefix - before[0]
        suffix = p.stats.accepted_suffix - before[1]
        c.accepted_suffix += suffix
        if suffix:  # where the suffix tokens came from
            if source == ANSWER_ID:
                c.accepted_suffix_answer += suffix
            elif source in self._context_ids:
                c.accepted_suffix_context += suffix
            elif any(b.draft_id == source and not b.finished for b in self.drafts):
                c.accepted_suffix_live += suffix
            else:  # a draft that ended (finished or cancelled) or one the client supplied
                c.accepted_suffix_done += suffix

    def propose(self, output_ids: Sequence[int], pending: Optional[dict] = None):
        """Branches for this step (possibly empty); the outcome is counted by :meth:`settle`. ``pending``:
        the drafts' tokens not in their ``output_ids`` yet (:meth:`pull_drafts`). The answer is read
        through a view (no per-step copy of it)."""
        t0 = time.perf_counter()
        self.pull_drafts(pending)
        answer = window(output_ids, self.answer_start)
        branches = self.proposer.propose_tree(answer, self._num_nodes - 1)
        self._proposed_at = len(output_ids)
        self._ssr_step = bool(branches)
        self.counters.propose_time_s += time.perf_counter() - t0
        return branches

    def note_step_time(self, seconds: float, with_draft: bool, host: float = 0.0,
                       loop: Optional[float] = None, base: Optional[float] = None) -> None:
        """A decode step of this (client) request took ``seconds`` (its forward), ``loop`` as a whole scheduler
        iteration (default ``seconds``), of which (or, for the hooks' share, right around which) ``host`` was
        SSR's own host work; ``base``: the server's draft-free reasoning step then (``None``: not measured,
        the step is its own price); ``self.phase`` is the step's phase."""
        c = self.counters
        if self.phase == REASONING:
            loop = seconds if loop is None else loop
            if base is None:
                c.reasoning_unpriced_draft_steps += with_draft
                base = loop
            c.reasoning_steps += 1
            c.reasoning_time_s += seconds
            c.reasoning_host_time_s += host
            c.reasoning_loop_time_s += loop
            c.reasoning_base_time_s += base
            if with_draft:
                c.reasoning_draft_steps += 1
                c.reasoning_draft_time_s += seconds
                c.reasoning_draft_loop_time_s += loop
                c.reasoning_draft_host_time_s += host
                c.reasoning_draft_base_time_s += base
        elif self.phase == ANSWER:
            c.verify_time_s += seconds

    def note_plain_step(self, output_ids: Sequence[int]) -> None:
        """An answer-phase step verified without an SSR proposal (n-gram or nothing)."""
        self._proposed_at = len(output_ids)
        self._ssr_step = False

    def finish(self, output_ids: Sequence[int]) -> dict:
        """Final accounting (idempotent): settle the last step, cancel drafts still running, and split
        the output into reasoning and answer tokens that add up to ``len(output_ids)``.

        Pass the output the client sees (SGLang's ``req.output_ids_through_stop``): a verify step can
        accept tokens past a stop or past ``max_new_tokens``, which SGLang keeps in ``req.output_ids``
        but drops from the output and from ``completion_tokens``. A think end found only in that dropped
        tail does not count: the request ended in its reasoning. Without a think block (``plain``,
        ``undecided``) the whole output is the answer."""
        if self._final is None:
            n = len(output_ids)
            self.settle(output_ids)
            for b in self.live_drafts():
                self.close_draft(b, cancelled=True)
            c = self.counters
            if self.phase == ANSWER and self.answer_start > n:
                self.phase = REASONING  # the think end lies past the stop
            if self.phase == ANSWER:
                c.reasoning_tokens, c.answer_tokens = self.answer_start, n - self.answer_start
            elif self.phase == REASONING:
                c.reasoning_tokens, c.answer_tokens = n, 0
            else:
                c.reasoning_tokens, c.answer_tokens = 0, n
            self._final = self.metrics()
        return self._final

    def metrics(self) -> dict:
        d = self.counters.as_dict()
        d["phase"] = self.phase
        d["enabled"] = self.cfg.enabled
        d["policy"] = self.cfg.policy
        d["decisions"] = self.decisions
        d["drafts"] = [b.summary(self.supplied_by(b)) for b in self.drafts]
        return d


def _find(seq: Sequence[int], pat: Sequence[int]) -> int:
    m = len(pat)
    for i in range(len(seq) - m + 1):
        if list(seq[i:i + m]) == list(pat):
            return i
    return -1


def _opens_think_block(prompt_tail: Sequence[int], ids: ThinkIds) -> bool:
    """Does the prompt end inside an open think block (chat templates that prefill ``<think>``)?"""
    if not ids.start:
        return False
    tail = list(prompt_tail)
    s = max((i for i in range(len(tail) - len(ids.start) + 1) if tail[i:i + len(ids.start)] == ids.start), default=-1)
    if s < 0:
        return False
    after = tail[s + len(ids.start):]
    return _find(after, ids.end) < 0
