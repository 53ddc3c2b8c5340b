"""SGLang hooks the SSR algorithm installs (through ``HookRegistry``, in every SGLang process).

Scheduler process:
* ``Scheduler.process_batch_result`` (around): after each batch, settle finished requests and
  fork the drafts whose checkpoints were reached;
* ``Scheduler.get_output_streamer_class`` (around; only on an SSR server): an output streamer that
  hides draft requests and attaches ``meta_info["ssr"]``;
* ``Scheduler.send_abort_output`` (around): a request SGLang ends outside the output stream drops its
  SSR state and aborts its drafts; drafts aborted while queued send nothing to clients;
* ``Scheduler.on_idle`` (around): drop SSR state whose request SGLang no longer holds;
* ``SchedulePolicy.calc_priority`` (around): queued drafts go after every real request;
* ``ScheduleBatch._get_decode_retraction_order`` (around): when SGLang must retract under KV pressure,
  drafts are retracted before any real request;
* ``SchedulerInternalStateController._add_speculative`` (after): ``/server_info`` totals.

Tokenizer manager (HTTP) process:
* ``TokenizerManager._create_tokenized_object`` (around): reject bad ``ssr_*`` custom params with a
  400 naming the field, before anything is scheduled;
* ``TokenizerManager.update_request_meta_info`` (around): ``meta_info["ssr"]`` as one dict.

Every hook is a pass-through unless this process serves ``--speculative-algorithm SSR``. The scheduler
hooks hold no state: they hand over to this process's
:class:`~ssr_sglang.srt.draft_manager.DraftManager`, reached through the scheduler they are called on
(its SSR worker's; :func:`~ssr_sglang.srt.scheduler_view.manager_of`); the hooks with no scheduler at hand
(queue order, retraction order) read the mark every draft's request carries
(:func:`~ssr_sglang.srt.scheduler_view.hidden`).
"""

from __future__ import annotations

import functools
import logging

from ssr_sglang.srt.scheduler_view import hidden, manager_of

logger = logging.getLogger(__name__)



def install() -> None:
    """Register every hook of :data:`~ssr_sglang.srt.compat.HOOKS` (once per process)."""
    from ssr_sglang.srt.compat import HOOKS
    from ssr_sglang.hook_once import register_once

    register_once(__name__, [(target, globals()[name], kind) for target, name, kind in HOOKS])


def _checked_manager(scheduler):
    """``scheduler``'s DraftManager (None unless it serves SSR). At its first use, the live scheduler's
    attributes SSR reads are checked (a mismatch stops the server at its first idle pass, naming the
    attribute); the manager records that it was."""
    m = manager_of(scheduler)
    if m is not None and not m.scheduler_checked:
        from ssr_sglang.srt import compat

        compat.check_scheduler(scheduler)
        m.scheduler_checked = True
    return m


# -- scheduler ---------------------------------------------------------------
def _process_batch_result(original, self, batch, result, *args, **kwargs):
    m = _checked_manager(self)
    if m is None:
        return original(self, batch, result, *args, **kwargs)
    counted = batch is not None and (batch.forward_mode.is_decode() or batch.forward_mode.is_extend())
    if counted:
        m.before_batch(batch, result)  # before the outputs are streamed: final metrics include the last step
    out = original(self, batch, result, *args, **kwargs)
    m.after_batch(self, batch, counted)  # contains its own failures
    return out


def _on_idle(original, self, *args, **kwargs):
    m = _checked_manager(self)
    if m is not None:
        m.on_idle(self)
    return original(self, *args, **kwargs)


def _calc_priority(original, self, waiting_queue, *args, **kwargs):
    """Drafts yield to real requests: after SGLang orders the queue, real requests go first."""
    out = original(self, waiting_queue, *args, **kwargs)
    if len(waiting_queue) > 1:
        marks = [hidden(r) for r in waiting_queue]
        if any(marks) and not all(marks):
            waiting_queue[:] = [r for r, h in zip(waiting_queue, marks) if not h] + \
                [r for r, h in zip(waiting_queue, marks) if h]
    return out


def _retraction_order(original, reqs, *args, **kwargs):
    """Drafts are retracted first: SGLang retracts from the end of this order (the least preferred to keep),
    so the drafts go there, SGLang's own order kept within real requests and within drafts."""
    order = original(reqs, *args, **kwargs)
    marks = [hidden(reqs[i]) for i in order]
    if not any(marks) or all(marks):
        return order
    return [i for i, h in zip(order, marks) if not h] + [i for i, h in zip(order, marks) if h]


def _send_abort_output(original, self, abort_req, req, *args, **kwargs):
    """SGLang ends ``req`` outside the output stream (aborted while queued, retract_decode aborting on KV
    exhaustion, priority eviction, rejection): settle its SSR state and abort its drafts; a draft's
    abort output never reaches the tokenizer manager."""
    m = manager_of(self)
    if m is None or req is None:
        return original(self, abort_req, req, *args, **kwargs)
    m.on_abort_output(self, req)
    if hidden(req):
        return None
    return original(self, abort_req, req, *args, **kwargs)


def _add_speculative(result, self, state, *args, **kwargs):
    m = manager_of(self.scheduler)
    if m is not None:
        state["ssr"] = m.server_info()
    return result


def _output_streamer_class(original, self, *args, **kwargs):
    """SSR's streamer only on a server that serves SSR; any other server keeps SGLang's own class
    (an AROUND hook, so whatever SGLang or another plugin returns there stays in force). SSR's
    streamer adds customized output, which SGLang's Rust egress (``SGLANG_RUST_SERVER=1``) refuses."""
    if not _serves_ssr(self):
        return original(self, *args, **kwargs)
    return ssr_output_streamer_class(self)


def ssr_output_streamer_class(scheduler):
    """SSR's output streamer for ``scheduler`` (its draft manager read at each call: the streamer may be
    built before the worker)."""
    return type("SSROutputStreamer", (_ssr_streamer_base(),), {"__slots__": (), "_scheduler": scheduler})


@functools.lru_cache(maxsize=1)
def _ssr_streamer_base():
    from sglang.srt.managers.scheduler_components.output_streamer import SchedulerOutputStreamer

    from ssr_sglang.srt.metrics import META_KEY

    class SSROutputStreamer(SchedulerOutputStreamer):
        """Hides draft requests from clients; adds ``meta_info["ssr"]`` to finished SSR requests (built
        only for an output that finishes some request: the others carry nothing extra)."""

        __slots__ = ("_meta_due",)
        has_additional_customized_info = True

        def stream_output(self, reqs, return_logprob, skip_req=None):
            m = manager_of(self._scheduler)
            self._meta_due = False
            if m is not None:
                visible = []
                for r in reqs:
                    if not hidden(r):
                        visible.append(r)
                    elif r.finished():
                        # Its final output counts as sent: under overlap scheduling the finished draft is
                        # in the next batch too, when SSR no longer holds it, and SGLang skips it then.
                        r.finished_output = True
                if len(visible) != len(reqs):
                    if not visible:
                        return None
                    reqs = visible
                self._meta_due = any(r.finished() for r in reqs)
            return SchedulerOutputStreamer.stream_output(self, reqs, return_logprob, skip_req)

        def should_build_additional_customized_info(self) -> bool:
            return getattr(self, "_meta_due", True) and manager_of(self._scheduler) is not None

        def build_additional_customized_info(self, reqs):
            m = manager_of(self._scheduler)
            return {META_KEY: [m.final_meta(r) if r.finished() else [] for r in reqs]}

        def is_request_level_customized_info_key(self, key: str) -> bool:
            return key == META_KEY or SchedulerOutputStreamer.is_request_level_customized_info_key(self, key)

    return SSROutputStreamer


# -- tokenizer manager -------------------------------------------------------
def _serves_ssr(obj) -> bool:
    """Does the scheduler or tokenizer manager ``obj`` serve ``--speculative-algorithm SSR``?"""
    algo = getattr(getattr(obj, "server_args", None), "speculative_algorithm", None)
    return isinstance(algo, str) and algo.upper() == "SSR"


def _create_tokenized_object(original, self, obj, *args, **kwargs):
    tokenized = original(self, obj, *args, **kwargs)
    if _serves_ssr(self) and getattr(tokenized, "input_ids", None) is not None and len(tokenized.input_ids) == 0 \
            and getattr(tokenized, "input_embeds", None) is None:
        # SGLang 0.5.23 admits a 0-token prompt (text "" with no BOS) and its scheduler then dies in the
        # logits processor (IndexError): the whole server goes down. Reject it here with a 400 instead.
        raise ValueError("the prompt is empty (0 tokens): text or input_ids must have at least one token")
    if _serves_ssr(self) and getattr(tokenized, "input_ids", None):
        # Likewise an input id outside the vocabulary kills the scheduler (embedding IndexError).
        vocab = self.model_config.vocab_size
        bad = next((t for t in tokenized.input_ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise ValueError(f"input_ids must be token ids in [0, {vocab}), got {bad}")
    if _serves_ssr(self):
        from ssr_sglang.srt.spec import check_request_sampling

        check_request_sampling(getattr(tokenized, "sampling_params", None), getattr(self.server_args, "device", "cpu"))
    params = getattr(getattr(tokenized, "sampling_params", None), "custom_params", None)
    if params and _serves_ssr(self):
        from ssr_sglang.srt.config import validate_custom_params

        validate_custom_params(params, _server_defaults(), self.model_config.vocab_size)
    return tokenized


@functools.lru_cache(maxsize=1)
def _server_defaults():
    from ssr_sglang.srt.config import server_config_from_env

    return server_config_from_env().defaults


def _update_request_meta_info(original, self, meta_info, state, customized_info, index, finish_reason, *a, **kw):
    from ssr_sglang.srt.metrics import META_KEY

    out = original(self, meta_info, state, customized_info, index, finish_reason, *a, **kw)
    value = meta_info.get(META_KEY)
    if isinstance(value, list):
        if value:
            meta_info[META_KEY] = value[-1]
        else:
            del meta_info[META_KEY]
    return out
