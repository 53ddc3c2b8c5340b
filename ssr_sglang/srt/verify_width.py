"""The verify width of SSR's steps on CPU: how many tree nodes each verify step checks.

:class:`VerifyWidth` is the one owner of the width state of a worker. Per decode step the worker calls,
in this order: :meth:`VerifyWidth.start` (the forward begins: the last step's time goes to the
:class:`~ssr_sglang.core.width.WidthPolicy`), :meth:`VerifyWidth.plan` and
:meth:`VerifyWidth.proposed` (while building the proposals: which rows are in use and where each
proposal came from), :meth:`VerifyWidth.choose` (the verify input is built: cut it to the chosen width)
and :meth:`VerifyWidth.finish` (the forward returned: hand the step's trees on for rating, pad the
result back to the full width). :meth:`VerifyWidth.rate` runs when the result is processed (the
draft manager's ``before_batch``), from host copies.

Modes (``SSR_VERIFY_WIDTH``): ``auto`` (a :class:`~ssr_sglang.core.width.WidthPolicy` chooses from
measured costs and acceptance), ``adaptive`` (the widest proposal in the batch) and ``full`` (never
narrowed; also wherever narrowing is impossible: GPUs, tensor parallelism, sliding windows, recurrent state
under overlap scheduling). Narrowing never changes the output: the first ``w`` nodes of a tree laid out
parent before child are a subtree.
A failure of the width policy turns it off (full width from then on); it never fails a batch.
"""

from __future__ import annotations

import logging
import time
from typing import List, NamedTuple, Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from sglang.srt.configs.hybrid_arch import mambaish_config
from sglang.srt.speculative.ngram_info import NgramVerifyInput

from ssr_sglang.core.tree import nodes_in_use_batch
from ssr_sglang.core.width import WidthPolicy, accepted_path
from ssr_sglang.srt.config import SSRConfigError

logger = logging.getLogger(__name__)


class _Timed(NamedTuple):
    """A step whose width was chosen: timed by the next step's start (whole iterations)."""

    sequences: int
    width: int
    started: float
    tokens: float  # tokens it committed
    forward: int  # its forward pass's index (the width policy pairs consecutive steps)


class _Rating(NamedTuple):
    """What rating a verify step needs once its result is processed (attached to the result)."""

    tokens: np.ndarray  # (bs, n) proposal trees
    parents: np.ndarray  # (bs, n)
    kinds: list  # per sequence, where its proposal came from
    width: int  # nodes verified
    choice_s: Optional[float]  # bookkeeping the choice cost so far (None: not chosen)


class VerifyWidth:
    """Width state of one worker (see the module docstring for the call order).

    ``full``: the tree's nodes (``--speculative-num-draft-tokens``); ``adaptive``: steps may be narrowed;
    ``policy``: the width policy of ``auto`` (None: the widest proposal, when ``adaptive``).
    """

    def __init__(self, full: int, adaptive: bool, policy: Optional[WidthPolicy], recurrent: bool = False):
        self.full = full
        self.adaptive = adaptive
        self.policy = policy
        # recurrent (Gated DeltaNet) layers: SGLang commits a verify step's states by the tree width it reads
        # from the worker's draft_token_num, which a narrowed step must set to its width (the worker does)
        self.recurrent = recurrent
        self.width = full  # nodes verified in the current step
        self._widths: Optional[list] = None  # per request of the batch being prepared: nodes in use
        self._kinds: Optional[list] = None  # ... and where its proposal came from (width policy)
        self._trees: Optional[tuple] = None  # (tokens, parents), (bs, n) each, of a step the width policy rates
        self._last_timed: Optional[_Timed] = None  # the last step whose width was chosen
        self._free: Optional[tuple] = None  # (width, rate it) of a step where rows are nearly free
        self._chosen = False  # the width of the step being prepared was chosen (timed for the policy)
        self._choice_s: Optional[float] = None  # seconds of bookkeeping a chosen width cost this step
        self._forwards = 0  # forward passes so far (the width policy pairs consecutive steps)

    @classmethod
    def for_runner(cls, setting: str, full: int, runner, tp_size: int, overlap: bool = False) -> "VerifyWidth":
        """The width control ``SSR_VERIFY_WIDTH=setting`` gets on this runner (see :func:`narrowable`)."""
        adaptive = narrowable(setting, runner, overlap)
        # Tensor-parallel ranks time differently and must verify the same trees: they keep the full width.
        if setting == "auto" and tp_size > 1:
            adaptive = False
        return cls(full, adaptive, WidthPolicy(full) if adaptive and setting == "auto" else None,
                   recurrent=recurrent_state(runner))

    # -- a forward pass ---------------------------------------------------------------------------
    def start(self, batch, started: float) -> None:
        """A forward pass begins at ``started``: a decode right after a chosen decode step times it (the
        interval between their starts is the whole last iteration)."""
        self._forwards += 1
        last, self._last_timed = self._last_timed, None
        if last is not None and batch.forward_mode.is_decode() and self.policy is not None:
            self.policy.observe_step(last.sequences, last.width, started - last.started, last.tokens, last.forward)
        self.width = self.full
        self._trees = None
        self._chosen = False
        self._choice_s = None

    def plan(self, bs: int) -> Tuple[Optional[list], Optional[list]]:
        """Before a decode step's proposals are built: per request, the nodes in use (to be filled in; None
        where not needed) and a list for where each proposal came from (None where not needed). Where
        rows are nearly free the width needs no per-request widths, and kinds only to rate the step."""
        self._free = free = self.policy.free_width(bs) if self.policy is not None else None
        widths = [self.full] * bs if self.adaptive and free is None else None
        kinds = [] if self.policy is not None and (free is None or free[1]) else None
        self._widths, self._kinds = widths, kinds
        return widths, kinds

    def proposed(self, tokens: np.ndarray, parents: Optional[np.ndarray], plain_rows: List[int]) -> None:
        """The step's proposals are built (``tokens``/``parents``: ``(bs, n)``, SGLang's padding not yet
        renamed): the rows of requests without draft proposals (``plain_rows``) count their nodes in use."""
        t0 = time.perf_counter()
        if self._widths is not None and plain_rows:
            for i, w in zip(plain_rows, nodes_in_use_batch(tokens[plain_rows], parents[plain_rows]).tolist()):
                self._widths[i] = w
        if self._free is None and self.policy is not None:  # what the choice costs (the rating is added later)
            self._choice_s = time.perf_counter() - t0

    def keep_trees(self, tokens: np.ndarray, parents: np.ndarray) -> None:
        """The step's final trees, to rate once its result is processed (made lists then, not before the
        forward)."""
        if self._kinds is None:
            return
        t0 = time.perf_counter()
        self._trees = (tokens, parents)
        if self._choice_s is not None:
            self._choice_s += time.perf_counter() - t0

    def reset_plan(self) -> None:
        """A batch is being prepared: nothing planned for it yet."""
        self._widths = self._kinds = self._free = None

    def choose(self, batch) -> None:
        """The verify input of ``batch`` is built: cut it to the step's width (consistent on every TP rank:
        they keep the full width)."""
        if not batch.forward_mode.is_target_verify() or batch.return_logprob:
            self._trees = None  # SGLang derives logprobs at the full width
            return
        if self._free is not None:
            self._chosen = True
            if self._free[0] < self.full:
                self._narrow(batch, self._free[0])
        elif self._widths:
            t0 = time.perf_counter()
            self._chosen = self.policy is not None
            width = max(self._widths)
            if self.policy is not None:
                try:
                    width, _ = self.policy.width(self._kinds, self._widths)
                except Exception as e:  # noqa: BLE001 - never fail the batch
                    self._failed("choosing a width", e)
            if width < self.full:
                self._narrow(batch, width)
            if self._choice_s is not None:
                self._choice_s += time.perf_counter() - t0

    def finish(self, batch, result, started: float) -> None:
        """The forward returned ``result``: attach the step's trees for rating, time a chosen step, and pad
        accepted tokens back to rows of the full width (SGLang reads rows of the full width)."""
        if self._trees is not None:
            # rated when the result is processed (rate), from the host copy SGLang makes of it then
            result.ssr_rating = _Rating(*self._trees, self._kinds, self.width, self._choice_s)
            self._trees = None
        if self._chosen and self.policy is not None:
            # tokens committed: wider steps commit more, and their output work is no row cost (CPU tensors)
            self._last_timed = _Timed(len(batch.reqs), self.width, started, _committed(result), self._forwards)
        if self.width < self.full:
            rows = result.next_token_ids.view(-1, self.width)
            padded = F.pad(rows, (0, self.full - self.width)).reshape(-1)
            result.next_token_ids = padded
            result.next_draft_input.accept_tokens = padded
            result.next_draft_input.draft_token_num = self.full

    def rate(self, result) -> None:
        """When a verify step's result is processed (its tensors are host copies by then, so this waits for
        no device): the width policy learns each sequence's accepted path (nodes below the step's width),
        by kind of proposal, and what choosing the width cost."""
        rating = getattr(result, "ssr_rating", None)
        if rating is None:
            return
        result.ssr_rating = None  # rated once
        if self.policy is None:
            return
        kinds, width, choice_s = rating.kinds, rating.width, rating.choice_s
        t0 = time.perf_counter()
        try:
            tokens, parents, bs = rating.tokens.tolist(), rating.parents.tolist(), len(rating.tokens)
            # rows of the full width once padded (finish), of `width` otherwise
            out = result.next_token_ids.view(bs, -1).tolist()
            accepted = result.accept_lens.tolist()
            paths: dict = {}
            for i, kind in enumerate(kinds):
                paths.setdefault(kind, []).append(accepted_path(tokens[i], parents[i], out[i], accepted[i], width))
            for kind, ps in paths.items():
                self.policy.observe_paths(kind, ps, width)
        except Exception as e:  # noqa: BLE001 - never fail the batch: verify at the full width from now on
            self._failed("rating a step", e)
        if choice_s is not None and self.policy is not None:
            self.policy.observe_choice(len(kinds), choice_s + time.perf_counter() - t0)

    def summary(self) -> Optional[dict]:
        """The width policy's figures for ``/server_info`` (None without one)."""
        return self.policy.summary() if self.policy is not None else None

    # -- internals --------------------------------------------------------------------------------
    def _failed(self, what: str, e: Exception) -> None:
        logger.exception("SSR: %s for SSR_VERIFY_WIDTH=auto failed (%r); verifying at the full width from now on",
                         what, e)
        self.policy = None
        self._trees = None

    def _narrow(self, batch, width: int) -> None:
        """Cut the batch's verify input to the first ``width`` nodes of every tree.

        Trees are in BFS order (a parent before its children), so the first ``width`` nodes are a
        subtree; the nodes cut are padding or, for a request with a narrower tree than the batch's
        widest, nothing. The KV slots stay reserved as for a full step; only fewer are written.

        The subtree's verify metadata is the full tree's, cut: a node keeps its depth (its ancestors come
        before it); its first child and its next sibling are the smallest such index, so either it lies
        below ``width`` and stays, or none does (-1).
        """
        n, bs, info = self.full, len(batch.reqs), batch.spec_info
        tokens = info.draft_token.view(bs, n)[:, :width].reshape(-1).contiguous()
        mask = info.custom_mask.view(bs, n, n)[:, :width, :width].reshape(-1).contiguous()
        positions = info.positions.view(bs, n)[:, :width].reshape(-1).contiguous()
        index = torch.arange(bs * width, dtype=info.retrieve_index.dtype, device=tokens.device).view(bs, width)
        next_token = _cut(info.retrieve_next_token.view(bs, n)[:, :width], width)
        next_sibling = _cut(info.retrieve_next_sibling.view(bs, n)[:, :width], width)
        batch.input_ids = tokens
        batch.out_cache_loc = batch.out_cache_loc.view(bs, n)[:, :width].reshape(-1).contiguous()
        batch.spec_info = NgramVerifyInput(
            draft_token=tokens, custom_mask=mask, positions=positions, retrieve_index=index,
            retrieve_next_token=next_token, retrieve_next_sibling=next_sibling, draft_token_num=width,
        )
        self.width = width


def _cut(links: torch.Tensor, width: int) -> torch.Tensor:
    """Node links (first child, next sibling; -1 for none) of a tree cut to its first ``width`` nodes."""
    return torch.where(links < width, links, torch.full_like(links, -1))


def _committed(result) -> float:
    """Tokens a verify step committed (accepted nodes and bonus tokens of all its sequences); 0 where the
    result does not say."""
    lens = getattr(result, "accept_lens", None)
    return float(lens.sum()) if lens is not None else 0.0


def recurrent_state(runner) -> bool:
    """The model has recurrent (Mamba / Gated DeltaNet) layers whose states a verify step commits."""
    return mambaish_config(runner.model_config) is not None


def narrowable(setting: str, runner, overlap: bool = False) -> bool:
    """``SSR_VERIFY_WIDTH``: narrow verify steps only where the verify input has a flat tree mask and no
    fixed-shape CUDA graphs, and the model has no sliding-window layers. ``auto`` falls back to the full
    width where narrowing is not possible; ``adaptive`` asked for it explicitly, so a GPU refuses it.

    Recurrent (Gated DeltaNet) layers narrow too, without overlap scheduling: a verify step keeps each
    node's state at ``[slot, node]`` of the intermediate buffers, and the commit reads the accepted node's
    at ``accepted flat index - request * width``, with the width the worker sets for the step; the first
    ``w`` nodes of a tree (a subtree, parents before children) commit what the full tree would have. Under
    overlap scheduling the worker keeps the full width there (the previous step's tokens are relayed at it)."""
    if setting == "full":
        return False
    if not str(runner.device).startswith("cpu"):
        if setting == "auto":
            return False
        raise SSRConfigError("environment variable SSR_VERIFY_WIDTH=adaptive is supported on CPU only "
                             "(GPU verify steps run at a fixed width in CUDA graphs); use 'full' or 'auto'")
    if getattr(runner.model_config, "is_hybrid_swa", False):
        return False
    return not (overlap and recurrent_state(runner))
