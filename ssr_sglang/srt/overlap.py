"""What SSR's worker needs when SGLang's overlap scheduler runs it: results that arrive one step late.

Under ``Scheduler.event_loop_overlap`` step N+1 is prepared (and launched) before step N's results are
processed, so step N's accepted tokens are not in ``req.output_ids`` yet when step N+1's proposals are
built; the scheduler relays them to the worker in ``batch.spec_info.accept_tokens`` / ``accept_lens``
(rows of ``--speculative-num-draft-tokens``), as it does for NGRAM. The worker builds every proposal
from :func:`seen_outputs`, ``req.output_ids`` followed by those tokens, so the tree root and the draft
alignment are the ones a synchronous step would use. In the synchronous loop (and for a batch SGLang
resolves synchronously, grammar) there is nothing pending and the view is ``req.output_ids`` itself.

The condition is NGRAM's own (``NGRAMWorker._prepare_draft_tokens``: overlap on and the batch not
forced synchronous by grammar), so SSR rows and SGLang's n-gram rows of one batch always start from the
same root.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence


class JoinedOutputs(Sequence):
    """``head`` followed by ``tail`` as one read-only sequence, without copying ``head`` (a request's
    ``output_ids``, which may be long). Slices are lists."""

    __slots__ = ("head", "tail", "_split", "_n")

    def __init__(self, head: Sequence[int], tail: List[int]):
        self.head, self.tail = head, tail
        self._split = len(head)
        self._n = self._split + len(tail)

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        h = self._split
        if isinstance(i, slice):
            start, stop, step = i.indices(self._n)
            if step != 1:
                return [self[j] for j in range(start, stop, step)]
            if stop <= start:
                return []
            if stop <= h:
                return list(self.head[start:stop])
            if start >= h:
                return self.tail[start - h:stop - h]
            return list(self.head[start:h]) + self.tail[:stop - h]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError("output index out of range")
        return self.head[i] if i < h else self.tail[i - h]

    def __iter__(self):
        yield from self.head
        yield from self.tail


def pending_tokens(enable_overlap: bool, batch, num_nodes: int) -> Optional[Dict[str, List[int]]]:
    """Per request of a decode ``batch`` (rid -> tokens): what the previous step accepted that is not in
    ``req.output_ids`` yet. None when nothing is pending (synchronous loop, or a batch SGLang resolves
    synchronously).

    Reads the relayed ``accept_tokens`` / ``accept_lens`` on the host: on a GPU this waits for the
    previous step's results, as NGRAM's own proposal step does in the same place.
    """
    if not enable_overlap or batch.grammar_needs_sync():
        return None
    info = batch.spec_info
    tokens, lens = getattr(info, "accept_tokens", None), getattr(info, "accept_lens", None)
    if tokens is None or lens is None:
        # Proposing from output_ids alone would verify a stale root: stop, as NGRAM's own step would.
        raise RuntimeError("overlap scheduling: the decode batch carries no relayed accept_tokens/accept_lens")
    tokens, lens = tokens.cpu().tolist(), lens.cpu().tolist()
    if len(lens) != len(batch.reqs):
        raise RuntimeError(f"overlap relay holds {len(lens)} rows for a batch of {len(batch.reqs)} requests")
    return {req.rid: tokens[i * num_nodes:i * num_nodes + int(lens[i])] for i, req in enumerate(batch.reqs)}


def seen_outputs(req, pending: Optional[Dict[str, List[int]]]) -> Sequence[int]:
    """The request's output as its next verify step continues it: ``req.output_ids`` plus its pending
    tokens (the same list object when nothing is pending)."""
    tail = pending.get(req.rid) if pending else None
    return JoinedOutputs(req.output_ids, tail) if tail else req.output_ids


def last_token(req, seen: Sequence[int]) -> int:
    """The root of the request's next token tree: its last known token."""
    return seen[-1] if len(seen) else req.origin_input_ids_unpadded[-1]
