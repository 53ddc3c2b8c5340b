"""SSR settings: server-wide from environment variables, per request from ``custom_params``.

SGLang 0.5.23 accepts no plugin CLI flags, so server-wide knobs are environment variables
(inherited by SGLang's spawned processes) plus the existing ``--speculative-num-draft-tokens``.
Per request, ``sampling_params.custom_params`` (``/generate``) or ``custom_params`` in the OpenAI
body / ``extra_body`` carry ``ssr_*`` keys that override the server defaults for that request.

Every ``SSR_*`` variable is declared once, in :mod:`ssr_sglang.settings` (type, default, allowed
values, meaning; rendered as ``docs/configuration.md``), and read through it. This module combines
them into a :class:`ServerConfig` and checks what no single variable can (a schedule, the think
markers as a pair).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping, Optional

from ssr_sglang import settings
from ssr_sglang.core.budgets import BudgetSchedule
from ssr_sglang.settings import MAX_DRAFT_TOKENS, SSRConfigError  # noqa: F401 (re-exported)


def default_max_batch(device: str) -> int:
    """``SSR_MAX_BATCH`` when unset, for a ``--device`` such as ``cpu`` or ``cuda:0``.

    Drafts decode in the same batches as real requests. A GPU decode step is memory-bound, so a few
    more sequences cost little; a CPU pays for every one, so there drafts stop at a small batch. The
    figures behind the values are ``benchmarks/load.py --side-by-side``'s (docs/benchmarks.md).
    """
    return 4 if str(device).split(":")[0] == "cpu" else 32


MAX_CLIENT_DRAFTS = 16


def _default(var: str) -> Any:
    """The declared default of ``var`` (:data:`ssr_sglang.settings.SETTINGS`): defaults live there only."""
    return settings.SETTINGS[var].default


@dataclasses.dataclass(frozen=True)
class RequestConfig:
    """What SSR does for one request (defaults: the ``SSR_*`` variables' declared ones)."""

    enabled: bool = _default("SSR_ENABLED")
    policy: str = _default("SSR_POLICY")  # auto | fixed
    checkpoints: Optional[tuple] = _default("SSR_CHECKPOINTS")
    every: Optional[int] = _default("SSR_EVERY")
    max_drafts: Optional[int] = _default("SSR_MAX_DRAFTS")
    thinking_budget: Optional[int] = _default("SSR_THINKING_BUDGET")
    fractions: Optional[tuple] = _default("SSR_FRACTIONS")
    draft_max_tokens: int = _default("SSR_MAX_DRAFT_TOKENS")
    use_prefix: bool = _default("SSR_PREFIX")
    use_suffix: bool = _default("SSR_SUFFIX")
    context: bool = _default("SSR_CONTEXT")  # the prompt and the reasoning as reference sources (opt-in)

    def schedule(self) -> BudgetSchedule:
        return BudgetSchedule(
            self.checkpoints,
            fractions=self.fractions,
            thinking_budget=self.thinking_budget,
            every=self.every,
            max_drafts=self.max_drafts,
            draft_len=self.draft_max_tokens,
        )


@dataclasses.dataclass(frozen=True)
class ServerConfig:
    """Server-wide SSR settings, read by :func:`server_config_from_env` through :mod:`ssr_sglang.settings`;
    the scheduler-side code takes its settings from here."""

    defaults: RequestConfig = RequestConfig()
    reasoning_fallback: str = _default("SSR_REASONING_FALLBACK")
    max_kv_usage: float = _default("SSR_MAX_KV_USAGE")
    max_batch: Optional[int] = _default("SSR_MAX_BATCH")  # None: default_max_batch(device)
    verify_width: str = _default("SSR_VERIFY_WIDTH")  # auto | full | adaptive (narrowing on CPU only)
    think_start: Optional[str] = _default("SSR_THINK_START")  # explicit think markers (both or neither)
    think_end: Optional[str] = _default("SSR_THINK_END")
    force_answer_text: Optional[str] = _default("SSR_FORCE_ANSWER_TEXT")  # must contain the think end


# custom_params key -> RequestConfig field, and the env variable of the same knob.
_REQUEST_KEYS = {
    "ssr": ("enabled", "SSR_ENABLED"),
    "ssr_policy": ("policy", "SSR_POLICY"),
    "ssr_checkpoints": ("checkpoints", "SSR_CHECKPOINTS"),
    "ssr_every": ("every", "SSR_EVERY"),
    "ssr_max_drafts": ("max_drafts", "SSR_MAX_DRAFTS"),
    "ssr_thinking_budget": ("thinking_budget", "SSR_THINKING_BUDGET"),
    "ssr_fractions": ("fractions", "SSR_FRACTIONS"),
    "ssr_max_draft_tokens": ("draft_max_tokens", "SSR_MAX_DRAFT_TOKENS"),
    "ssr_prefix": ("use_prefix", "SSR_PREFIX"),
    "ssr_suffix": ("use_suffix", "SSR_SUFFIX"),
    "ssr_context": ("context", "SSR_CONTEXT"),
}
_BOOL_FIELDS = {"enabled", "use_prefix", "use_suffix", "context"}
_INT_LIST_FIELDS = {"checkpoints"}
_CHOICE_FIELDS = {"policy": ("auto", "fixed")}
_SCHEDULE_KEYS = {"checkpoints", "every", "fractions", "thinking_budget"}
_FLOAT_LIST_FIELDS = {"fractions"}
DRAFT_KEY = "ssr_draft"


def _is_draft_key(key: str) -> bool:
    return key == DRAFT_KEY or (key.startswith(DRAFT_KEY + "_") and key[len(DRAFT_KEY) + 1:].isdigit())


def _coerce(field: str, value: Any, name: str) -> Any:
    """Type-check one value from JSON (or a parsed env string); ``name`` is used in errors."""
    if value is None:
        if field in _BOOL_FIELDS or field in _CHOICE_FIELDS or field == "draft_max_tokens":
            raise SSRConfigError(f"{name} must not be null")
        return None
    if field in _CHOICE_FIELDS:
        if value not in _CHOICE_FIELDS[field]:
            raise SSRConfigError(f"{name} must be one of {', '.join(map(repr, _CHOICE_FIELDS[field]))}, got {value!r}")
        return value
    if field in _BOOL_FIELDS:
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        raise SSRConfigError(f"{name} must be a boolean, got {value!r}")
    if field in _INT_LIST_FIELDS or field in _FLOAT_LIST_FIELDS:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = [value]
        if not isinstance(value, (list, tuple)) or not value:
            raise SSRConfigError(f"{name} must be a non-empty list of numbers, got {value!r}")
        kind = int if field in _INT_LIST_FIELDS else (int, float)
        for i, v in enumerate(value):
            if isinstance(v, bool) or not isinstance(v, kind):
                want = "an integer" if kind is int else "a number"
                raise SSRConfigError(f"{name}[{i}] must be {want}, got {v!r}")
        return tuple(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SSRConfigError(f"{name} must be an integer, got {value!r}")
    if field == "draft_max_tokens" and not 1 <= value <= MAX_DRAFT_TOKENS:
        raise SSRConfigError(f"{name} must be in [1, {MAX_DRAFT_TOKENS}], got {value}")
    return value


def _check_schedule(cfg: RequestConfig, names: Mapping[str, str]) -> RequestConfig:
    """Build the schedule once so a bad combination fails here, naming the offending setting."""
    try:
        cfg.schedule()
    except ValueError as e:
        msg = str(e)
        for field in sorted(names, key=len, reverse=True):
            msg = re.sub(rf"\b{field}\b", names[field], msg)
        raise SSRConfigError(msg) from None
    return cfg


_SCHEDULE_FIELD_NAMES = {  # BudgetSchedule's argument names -> RequestConfig fields
    "checkpoints": "checkpoints",
    "fractions": "fractions",
    "thinking_budget": "thinking_budget",
    "every": "every",
    "max_drafts": "max_drafts",
    "draft_len": "draft_max_tokens",
}


def _explicit_schedule(updates: dict) -> None:
    """An explicit schedule replaces the default schedule instead of merging with it, and is what
    decides (``policy="fixed"``) unless a policy is given too."""
    if {"every", "fractions"} & updates.keys() and "checkpoints" not in updates:
        updates["checkpoints"] = None
    if _SCHEDULE_KEYS & updates.keys() and "policy" not in updates:
        updates["policy"] = "fixed"


def parse_request(custom_params: Optional[Mapping[str, Any]], defaults: RequestConfig) -> RequestConfig:
    """The request's config: ``defaults`` overridden by its ``ssr_*`` custom params.

    Raises :class:`SSRConfigError` naming the key (``custom_params.ssr_every``, ...).
    """
    if not custom_params:
        return defaults
    updates = {}
    for key, value in custom_params.items():
        if not isinstance(key, str) or not key.startswith("ssr"):
            continue
        if _is_draft_key(key):
            continue  # client drafts: checked by client_drafts()
        if key not in _REQUEST_KEYS:
            known = ", ".join(sorted([*_REQUEST_KEYS, DRAFT_KEY, DRAFT_KEY + "_<k>"]))
            raise SSRConfigError(f"custom_params.{key} is not an SSR parameter (known: {known})")
        field = _REQUEST_KEYS[key][0]
        updates[field] = _coerce(field, value, f"custom_params.{key}")
    if not updates:
        return defaults
    _explicit_schedule(updates)
    cfg = dataclasses.replace(defaults, **updates)
    names = {f: f"custom_params.{k}" for k, (f, _) in _REQUEST_KEYS.items()}
    return _check_schedule(cfg, {bf: names[rf] for bf, rf in _SCHEDULE_FIELD_NAMES.items()})


def client_drafts(custom_params: Optional[Mapping[str, Any]], vocab_size: Optional[int] = None) -> list:
    """Draft answers supplied by the client (``ssr_draft``, ``ssr_draft_0``, ...), in key order."""
    if not custom_params:
        return []
    keys = [k for k in custom_params if isinstance(k, str) and _is_draft_key(k)]
    if len(keys) > MAX_CLIENT_DRAFTS:
        raise SSRConfigError(f"custom_params: at most {MAX_CLIENT_DRAFTS} ssr_draft keys, got {len(keys)}")

    def order(k: str):
        return -1 if k == DRAFT_KEY else int(k[len(DRAFT_KEY) + 1:])

    drafts = []
    for k in sorted(keys, key=order):
        toks = custom_params[k]
        if not isinstance(toks, (list, tuple)):
            raise SSRConfigError(f"custom_params.{k} must be a list of token ids, got {type(toks).__name__}")
        if not toks:
            raise SSRConfigError(f"custom_params.{k} must not be empty (leave the key out for no draft)")
        if len(toks) > MAX_DRAFT_TOKENS:
            raise SSRConfigError(f"custom_params.{k} has {len(toks)} tokens, more than {MAX_DRAFT_TOKENS}")
        for i, t in enumerate(toks):
            if isinstance(t, bool) or not isinstance(t, int) or t < 0 or (vocab_size is not None and t >= vocab_size):
                rng = f" in [0, {vocab_size})" if vocab_size is not None else " >= 0"
                raise SSRConfigError(f"custom_params.{k}[{i}] must be a token id{rng}, got {t!r}")
        drafts.append(list(toks))
    return drafts


def validate_custom_params(custom_params: Optional[Mapping[str, Any]], defaults: RequestConfig,
                           vocab_size: Optional[int] = None) -> None:
    parse_request(custom_params, defaults)
    client_drafts(custom_params, vocab_size)


def server_config_from_env(env: Optional[Mapping[str, str]] = None) -> ServerConfig:
    """Read and validate the ``SSR_*`` environment (default ``os.environ``) through the settings
    registry; raises :class:`SSRConfigError` naming the variable."""
    updates = {}
    names = {}
    for key, (field, var) in _REQUEST_KEYS.items():
        names[field] = var
        if settings.is_set(var, env):
            updates[field] = _coerce(field, settings.get(var, env), var)
    _explicit_schedule(updates)
    defaults = _check_schedule(
        dataclasses.replace(RequestConfig(), **updates),
        {bf: names[rf] for bf, rf in _SCHEDULE_FIELD_NAMES.items()},
    )
    think_start = settings.get("SSR_THINK_START", env) or None
    think_end = settings.get("SSR_THINK_END", env) or None
    if (think_start is None) != (think_end is None):
        missing = "SSR_THINK_END" if think_end is None else "SSR_THINK_START"
        raise SSRConfigError(f"environment variable {missing} must be set too: SSR_THINK_START and SSR_THINK_END "
                             f"go together")
    return ServerConfig(
        defaults=defaults,
        reasoning_fallback=settings.get("SSR_REASONING_FALLBACK", env),
        verify_width=settings.get("SSR_VERIFY_WIDTH", env),
        max_kv_usage=settings.get("SSR_MAX_KV_USAGE", env),
        max_batch=settings.get("SSR_MAX_BATCH", env),
        think_start=think_start,
        think_end=think_end,
        force_answer_text=settings.get("SSR_FORCE_ANSWER_TEXT", env),
    )
