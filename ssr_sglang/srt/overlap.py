"""What SSR's worker needs when SGLang's overlap scheduler runs it: results that arrive one step late.

Under ``Scheduler.event_loop_overlap`` step N+1 is prepared (and launched) before step N's results are
processed, so step N's accepted tokens are not in ``req.output_ids`` yet when step N+1's proposals are
built; the scheduler relays them to the worker in ``batch.spec_info.accept_tokens`` / ``accept_lens``
(rows of ``--speculative-num-draft-tokens``), as it does for NGRAM. The worker builds every proposal
from :func:`seen_outputs`, ``req.output_ids`` followed by those tokens, so the tree root and the draft
alignment are the ones a synchronous step would use; a draft's own text is read the same way (its
pending tokens too), so the drafts offered are current, not one step behind. In the synchronous loop
(and for a batch SGLang resolves synchronously, grammar) there is nothing pending and the view is
``req.output_ids`` itself.

Host copies: SSR makes none of its own. The relayed rows reach the host once per step, in NGRAM's
proposal step (``NGRAMWorker._prepare_draft_tokens``, which needs them for its own n-gram lookup and
keeps them as ``prev_token_ids`` / ``prev_accept_lens``), after the scheduler has already waited for
the previous verify (``FutureMap.resolve_seq_lens_cpu``: NGRAM reads ``seq_lens_cpu``); SSR reads
those lists (:func:`pending_from_rows`). Only where NGRAM's proposal step is not run
(``SSR_REASONING_FALLBACK=none``) does :func:`relayed_rows` make that one copy in its place.

The condition is NGRAM's own (overlap on and the batch not forced synchronous by grammar), so SSR rows
and SGLang's n-gram rows of one batch always start from the same root.

Views, not copies: :class:`JoinedOutputs` and :func:`window` read a request's output (or its answer,
from an offset) plus its pending tokens without copying it; slices copy only what they cover.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

__all__ = ["JoinedOutputs", "window", "uses_relay", "relayed_rows", "pending_from_rows", "seen_outputs",
           "last_token"]


class JoinedOutputs(Sequence):
    """``head[start:]`` followed by ``tail`` as one read-only sequence, without copying ``head`` (a
    request's ``output_ids``, which may be long). Slices are lists of what they cover only."""

    __slots__ = ("head", "tail", "start", "_split", "_n")

    def __init__(self, head: Sequence[int], tail: Sequence[int] = (), start: int = 0):
        self.head, self.tail, self.start = head, tail, start
        self._split = max(0, len(head) - start)
        self._n = self._split + len(tail)

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        h, s = self._split, self.start
        if isinstance(i, slice):
            start, stop, step = i.indices(self._n)
            if step != 1:
                return [self[j] for j in range(start, stop, step)]
            if stop <= start:
                return []
            if stop <= h:
                return list(self.head[s + start:s + stop])
            if start >= h:
                return list(self.tail[start - h:stop - h])
            return list(self.head[s + start:s + h]) + list(self.tail[:stop - h])
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError("output index out of range")
        return self.head[s + i] if i < h else self.tail[i - h]

    def __iter__(self):
        for i in range(self.start, self.start + self._split):
            yield self.head[i]
        yield from self.tail


def window(seq: Sequence[int], start: int) -> Sequence[int]:
    """``seq[start:]`` as a view (no copy of ``seq``); ``seq`` may itself be a :class:`JoinedOutputs`.

    >>> list(window(JoinedOutputs([1, 2, 3], [4]), 2)), list(window([5, 6, 7], 1))
    ([3, 4], [6, 7])
    """
    if start <= 0:
        return seq
    if isinstance(seq, JoinedOutputs):
        cut = min(start, seq._split)
        return JoinedOutputs(seq.head, seq.tail[start - cut:], seq.start + cut)
    return JoinedOutputs(seq, (), start)


def uses_relay(enable_overlap: bool, batch) -> bool:
    """Are the previous step's accepted tokens pending (not in ``output_ids``) for this decode batch?
    NGRAM's own condition (``NGRAMWorker._prepare_draft_tokens``)."""
    return enable_overlap and not batch.grammar_needs_sync()


def relayed_rows(batch):
    """The relayed ``(accept_tokens, accept_lens)`` of ``batch`` as host lists: the one copy of a step
    where NGRAM's proposal step, which makes it otherwise, is not run. On a GPU it waits for the
    previous verify, which the scheduler has waited for already (see module docstring)."""
    info = batch.spec_info
    tokens, lens = getattr(info, "accept_tokens", None), getattr(info, "accept_lens", None)
    if tokens is None or lens is None:
        # Proposing from output_ids alone would verify a stale root: stop, as NGRAM's own step would.
        raise RuntimeError("overlap scheduling: the decode batch carries no relayed accept_tokens/accept_lens")
    return tokens.cpu().tolist(), lens.cpu().tolist()


def pending_from_rows(batch, tokens: Sequence[int], lens: Sequence[int], num_nodes: int) -> Dict[str, List[int]]:
    """Per request of ``batch`` (rid -> tokens): its relayed row (host lists, rows of ``num_nodes``) cut to
    its length -- what the previous step accepted that is not in ``req.output_ids`` yet."""
    if len(lens) != len(batch.reqs):
        raise RuntimeError(f"overlap relay holds {len(lens)} rows for a batch of {len(batch.reqs)} requests")
    return {req.rid: list(tokens[i * num_nodes:i * num_nodes + int(lens[i])]) for i, req in enumerate(batch.reqs)}


def seen_outputs(req, pending: Optional[Dict[str, List[int]]]) -> Sequence[int]:
    """The request's output as its next verify step continues it: ``req.output_ids`` plus its pending
    tokens (the same list object when nothing is pending)."""
    tail = pending.get(req.rid) if pending else None
    return JoinedOutputs(req.output_ids, tail) if tail else req.output_ids


def last_token(req, seen: Sequence[int]) -> int:
    """The root of the request's next token tree: its last known token."""
    return seen[-1] if len(seen) else req.origin_input_ids_unpadded[-1]
