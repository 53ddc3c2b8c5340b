"""Test-only switches: fault injection at the points where SSR code runs inside SGLang's scheduler,
and a check of every token tree handed to the verifier.

``SSR_TEST_FAULTS=fork,propose,step,finish`` (read once, at import) arms those points; an armed point
raises :class:`InjectedFault` only for requests whose rid contains ``fault-<point>``, so one server
can serve faulted and normal requests side by side. Unset (production), :func:`hit` is one truth
test of an empty set.

Points: ``fork`` (in the middle of forking a draft, after the parent's KV was published),
``propose`` (building a request's proposals in the worker), ``step`` (per-batch stage bookkeeping
before the results are processed), ``finish`` (settling a finished request).

``SSR_TEST_CHECK_TREES=1`` makes the worker count, for every request's tree of every verify step, the
nodes that repeat a sibling's token (reported in ``/server_info`` as ``tree_checks`` and
``duplicate_siblings_seen``; see :func:`ssr_sglang.core.tree.duplicate_siblings`), and the padding
nodes renamed to get there (``siblings_renamed``).

``SSR_TEST_DRAFT_TOKENS=1`` adds each draft's ``input_ids`` and ``output_ids`` to its entry in
``meta_info["ssr"]["drafts"]``, so a test can compare a draft with a plain request of the same prompt.
"""

from __future__ import annotations

from ssr_sglang import settings

POINTS = settings.SETTINGS["SSR_TEST_FAULTS"].choices  # ("fork", "propose", "step", "finish")
FAULTS = settings.get("SSR_TEST_FAULTS")

CHECK_TREES = settings.get("SSR_TEST_CHECK_TREES")
DRAFT_TOKENS = settings.get("SSR_TEST_DRAFT_TOKENS")


class InjectedFault(RuntimeError):
    """Raised at an armed point (tests only)."""


def hit(point: str, rids) -> None:
    """Raise at ``point`` when it is armed and one of ``rids`` (a rid or several) asks for it."""
    if not FAULTS or point not in FAULTS:
        return
    tag = f"fault-{point}"
    for rid in (rids,) if isinstance(rids, str) else rids:
        if tag in rid:
            raise InjectedFault(f"injected fault at {point} ({rid})")
