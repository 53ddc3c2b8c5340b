"""Register a module's ``HookRegistry`` hooks once per process (the plugin entry point runs more than once)."""

from __future__ import annotations

_registered: set = set()


def register_once(owner: str, hooks) -> None:
    """``hooks``: ``(target, fn, kind)`` with ``kind`` a ``HookType`` name (``"AROUND"``, ``"AFTER"``, ...);
    registered on the first call for ``owner`` only."""
    if owner in _registered:
        return
    _registered.add(owner)
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    for target, fn, kind in hooks:
        HookRegistry.register(target, fn, HookType[kind])
