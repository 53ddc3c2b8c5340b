"""The start-up self-check names the SGLang internal SSR relies on when it is missing."""

from __future__ import annotations

import pytest

from ssr_sglang.srt import compat


def test_installed_sglang_passes():
    compat.check_static()


def test_hook_targets_are_what_the_plugin_hooks(monkeypatch):
    from sglang.srt.plugins.hook_registry import HookRegistry

    from ssr_sglang.srt import hooks

    seen = []
    monkeypatch.setattr(HookRegistry, "register", classmethod(lambda cls, target, *a, **k: seen.append(target)))
    from ssr_sglang import hook_once

    monkeypatch.setattr(hook_once, "_registered", set())
    hooks.install()
    assert sorted(seen) == sorted(compat.HOOK_TARGETS)


def test_missing_hook_target_stops_an_ssr_server_naming_it(monkeypatch):
    from sglang.srt.managers.scheduler import Scheduler

    from ssr_sglang.srt.spec import SSRSpecAlgo

    monkeypatch.delattr(Scheduler, "send_abort_output")

    class Args:
        device = "cpu"

    with pytest.raises(compat.SGLangCompatError, match=r"Scheduler\.send_abort_output.*SGLang 0\.5\.23"):
        SSRSpecAlgo.handle_server_args(None, Args())


def test_changed_fork_constructor_is_named(monkeypatch):
    monkeypatch.setattr(compat, "FORK_FIELDS", compat.FORK_FIELDS + ("draft_parent",))
    with pytest.raises(compat.SGLangCompatError, match=r"TokenizedGenerateReqInput\.draft_parent"):
        compat.check_static()


def test_hooks_that_failed_to_apply_are_named(monkeypatch):
    from sglang.srt.plugins.hook_registry import HookRegistry

    monkeypatch.setattr(HookRegistry, "_patched", set(compat.HOOK_TARGETS[1:]))
    with pytest.raises(compat.SGLangCompatError, match=r"process_batch_result.*not applied"):
        compat.check_hooks_applied()


def test_missing_scheduler_attribute_is_named():
    from types import SimpleNamespace as NS

    sched = NS(**{a: None for a in compat.SCHEDULER_ATTRS if a != "grammar_manager"})
    with pytest.raises(compat.SGLangCompatError, match=r"Scheduler\.grammar_manager"):
        compat.check_scheduler(sched)


def test_the_attributes_hooks_reach_the_worker_through_are_checked(monkeypatch):
    """Without the scheduler's ``draft_worker`` every hook would pass through and SSR would quietly do
    nothing: a renamed attribute stops the server before a model loads, naming it."""
    monkeypatch.setattr(compat, "REACH_ATTRS", compat.REACH_ATTRS + ((compat.SCHED, "ssr_worker"),))
    with pytest.raises(compat.SGLangCompatError, match=r"Scheduler\.ssr_worker"):
        compat.check_static()


def test_hooks_find_the_manager_only_on_an_ssr_scheduler():
    from types import SimpleNamespace as NS

    from ssr_sglang.srt.scheduler_view import manager_of

    manager = object()
    assert manager_of(NS(draft_worker=NS(serves_ssr=True, manager=manager))) is manager
    assert manager_of(NS(draft_worker=NS(manager=manager))) is None  # NGRAM, EAGLE: another worker
    assert manager_of(NS(draft_worker=None)) is None and manager_of(NS()) is None
