"""Every ``SSR_*`` environment variable, declared once: name, type, default, allowed values, meaning.

This module is the only reader of the ``SSR_*`` environment. It imports nothing beyond the standard
library (no SGLang, no torch, no NumPy), because ``ssr_sglang.cpu.bootstrap`` reads it at interpreter
start. What it guarantees:

* :func:`get` returns the typed value of a declared variable, or its default when unset; a value
  that does not parse or lies outside the allowed values raises :class:`SSRConfigError` naming the
  variable. An undeclared name raises ``KeyError``.
* :func:`check_environment` (called at server start-up) validates every declared variable that is set
  and logs one warning naming each set ``SSR_*`` variable that is not declared, with the closest
  declared name.
* :func:`markdown` renders the reference committed as ``docs/configuration.md``; regenerate it with
  ``python -m ssr_sglang.settings --markdown > docs/configuration.md`` (a test fails when they drift).

How the request-level variables combine into a schedule (and per-request ``custom_params``) is
:mod:`ssr_sglang.srt.config`'s business; this module only parses single variables.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

logger = logging.getLogger(__name__)

PREFIX = "SSR_"
MAX_DRAFT_TOKENS = 1 << 16
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


class SSRConfigError(ValueError):
    """An invalid SSR setting; the message names the field or variable."""


@dataclasses.dataclass(frozen=True)
class Setting:
    """One environment variable.

    ``kind``: ``bool`` (1/true/yes/on, 0/false/no/off; empty means the default), ``int``, ``float``,
    ``choice`` (one of ``choices``, case-insensitive), ``ints`` / ``numbers`` (comma-separated),
    ``names`` (comma-separated subset of ``choices``), ``text`` (taken as is).
    ``optional``: ``none`` or an empty value means "no value" (``None``).
    """

    name: str
    kind: str
    default: Any
    meaning: str
    group: str
    choices: Tuple[str, ...] = ()
    low: Optional[float] = None
    high: Optional[float] = None
    optional: bool = False
    request_key: Optional[str] = None  # the ``custom_params`` key that overrides it per request
    default_text: Optional[str] = None  # the default as the reference shows it, where repr() would not do
    constant: Optional[str] = None  # tuning only: the module constant that holds it (``module.NAME``), read at import


GROUPS = {
    "request": "Server-wide defaults a request may override (its `custom_params` key in brackets)",
    "server": "Server-wide settings",
    "cpu": "CPU engine",
    "tuning": "Tuning constants (read once, when their module is imported; for experiments: the defaults are "
              "what every measurement in benchmarks/results used)",
    "test": "Tests and benchmarks only",
}

_S = Setting


def _tuning(module: str, prefix: str, rows) -> Tuple[Setting, ...]:
    """Settings for the tuning constants of ``module``: rows of (constant, kind, default, low, high, meaning);
    the variable is ``prefix + constant``."""
    return tuple(Setting(prefix + c, kind, default, meaning, "tuning", low=low, high=high, constant=f"{module}.{c}")
                 for c, kind, default, low, high, meaning in rows)


SETTINGS: Dict[str, Setting] = {s.name: s for s in (
    # -- request defaults (ssr_sglang.srt.config.RequestConfig) --
    _S("SSR_ENABLED", "bool", True, "draft and verify with drafts at all", "request", request_key="ssr"),
    _S("SSR_POLICY", "choice", "auto", "`auto`: fork a draft when its measured saving exceeds its measured cost "
       "(ssr_sglang.core.policy); `fixed`: at the schedule's checkpoints (implied by an explicit schedule)",
       "request", choices=("auto", "fixed"), request_key="ssr_policy"),
    _S("SSR_CHECKPOINTS", "ints", (500,), "reasoning-token counts that fork a draft (under `auto`: until the "
       "server has history)", "request", request_key="ssr_checkpoints"),
    _S("SSR_EVERY", "int", None, "iterative SSR: a draft every N reasoning tokens (needs SSR_MAX_DRAFTS)",
       "request", optional=True, request_key="ssr_every"),
    _S("SSR_MAX_DRAFTS", "int", None, "at most this many drafts in all", "request", optional=True,
       request_key="ssr_max_drafts"),
    _S("SSR_THINKING_BUDGET", "int", None, "the reasoning budget that SSR_FRACTIONS refer to", "request",
       optional=True, request_key="ssr_thinking_budget"),
    _S("SSR_FRACTIONS", "numbers", None, "checkpoints as fractions in (0, 1] of SSR_THINKING_BUDGET", "request",
       request_key="ssr_fractions"),
    _S("SSR_MAX_DRAFT_TOKENS", "int", 512, "cap on each draft answer's length", "request", low=1,
       high=MAX_DRAFT_TOKENS, request_key="ssr_max_draft_tokens"),
    _S("SSR_PREFIX", "bool", True, "prefix verification (proposals aligned with a draft)", "request",
       request_key="ssr_prefix"),
    _S("SSR_SUFFIX", "bool", True, "suffix decoding over the drafts", "request", request_key="ssr_suffix"),
    _S("SSR_CONTEXT", "bool", False, "the prompt and the reasoning as lower-priority suffix sources, indexed a "
       "bounded chunk per step", "request", request_key="ssr_context"),
    # -- server-wide (ssr_sglang.srt.config.ServerConfig) --
    _S("SSR_REASONING_FALLBACK", "choice", "ngram", "proposals while reasoning: SGLang NGRAM's, or none",
       "server", choices=("ngram", "none")),
    _S("SSR_MAX_KV_USAGE", "float", 0.85, "skip new drafts above this KV-pool usage", "server", low=0.0, high=1.0),
    _S("SSR_MAX_BATCH", "int", None, "skip new drafts when this many requests run", "server", low=1,
       default_text="4 on CPU, 32 on GPU"),
    _S("SSR_VERIFY_WIDTH", "choice", "auto", "`auto`: per step, the width with the most tokens per second by "
       "measured row cost and node acceptance (ssr_sglang.core.width; CPU, recurrent models without overlap "
       "scheduling; elsewhere `full`); `full`: every tree node; `adaptive` (CPU only): as many as the proposals "
       "fill", "server", choices=("auto", "full", "adaptive")),
    _S("SSR_THINK_START", "text", None, "think-start marker, when the tokenizer's are unusual (with "
       "SSR_THINK_END)", "server"),
    _S("SSR_THINK_END", "text", None, "think-end marker (with SSR_THINK_START)", "server"),
    _S("SSR_FORCE_ANSWER_TEXT", "text", None, "text appended to make a draft answer now; must contain the "
       "think end", "server"),
    _S("SSR_GREEDY_ONLY", "bool", False, "CUDA without flashinfer: serve greedy requests only (sampled ones get "
       "HTTP 400) instead of refusing to start (ssr_sglang.srt.spec.check_cuda_kernels)", "server"),
    _S("SSR_TP_CONSENSUS_EVERY", "int", 1, "tensor parallelism: compare the ranks' SSR decisions every N "
       "scheduler steps (0: never)", "server", low=0),
    # -- CPU engine (ssr_sglang.cpu) --
    _S("SSR_CPU_EXACT_VERIFY", "bool", False, "compute every verify row as a decode row (batch-invariant, "
       "slower): SSR output token-identical to plain decoding", "cpu"),
    _S("SSR_CPU_SPEC_SAMPLING", "bool", True, "sampled (temperature > 0) speculative verify on CPU; off: "
       "SGLang's greedy CPU verify", "cpu"),
    _S("SSR_SGLANG_CPU_SHIM", "bool", True, "sgl_kernel stand-ins when the real package cannot load", "cpu"),
    _S("SSR_SGLANG_CPU_BIND_DEFAULTED", "bool", False, "set by the CPU bootstrap, not by users: it chose "
       "SGLANG_CPU_OMP_THREADS_BIND, so TP/DP ranks may widen it", "cpu"),
    # -- tuning constants: the drafting policy (ssr_sglang.core.policy) --
    *_tuning("ssr_sglang.core.policy", "SSR_POLICY_", (
        ("MIN_HISTORY", "int", 4, 1, None, "finished reasoning requests before the policy decides from its own "
         "history (before: the schedule's checkpoints)"),
        ("HISTORY", "int", 256, 1, None, "recent requests the reasoning-length statistics cover"),
        ("WINDOW", "int", 64, 2, None, "recent samples behind each time estimate"),
        ("MIN_COST_SAMPLES", "int", 3, 1, None, "draft-carrying steps at a batch size before its draft cost "
         "counts as measured"),
        ("STALE_STEPS", "int", 1024, 1, None, "draft-free reasoning steps after which a draft cost counts as "
         "unmeasured again"),
        ("EXPLORE_GAP", "int", 64, 0, None, "decode steps after an exploring draft before another may explore "
         "the same batch size"),
        ("CONTROL_EVERY", "int", 32, 1, None, "a client request is served without drafts (a control, measuring "
         "plain acceptance) once this many in a row had drafts"),
        ("CONTROL_SOON", "int", 8, 1, None, "... or this many while first-draft decisions hinge on plain "
         "acceptance"),
        ("CONTROL_WINDOW", "int", 4, 1, None, "plain acceptance comes from this many recent control requests"),
        ("A_PLAIN_DOUBT", "float", 0.25, 0.0, 1.0, "a decision hinges on plain acceptance if it flips with that "
         "this share higher or lower"),
        ("EXPLORE_DISCOUNT", "float", 0.5, 0.0, 1.0, "an exploring draft must pay at this share of the cost "
         "estimated from another batch size"),
        ("PRIOR_TOKENS", "float", 1.0, 0.0, None, "pseudo answer tokens behind the optimistic prior of an "
         "unmeasured fork distance"),
        ("WAIT_STEPS", "int", 8, 1, None, "a first fork that pays now is weighed against forks this many "
         "reasoning tokens later, and doubling"),
        ("CONTEXT_SPREAD", "float", 0.2, 0.0, None, "a draft cost is priced by context length once its samples' "
         "halves differ by this share in context"),
    )),
    # -- tuning constants: the verify width (ssr_sglang.core.width) --
    *_tuning("ssr_sglang.core.width", "SSR_WIDTH_", (
        ("PAIRS", "int", 512, 2, None, "recent pairs of consecutive steps kept per batch size"),
        ("MIN_PAIRS", "int", 16, 1, None, "pairs differing in width before they give a batch size's row cost"),
        ("CELL_SAMPLES", "int", 32, 1, None, "recent iteration times kept per (batch size, width) cell of the "
         "cost fit"),
        ("STALE", "int", 4096, 1, None, "a cell not observed in this many iterations leaves the fit"),
        ("MIN_FIT", "int", 16, 2, None, "samples (two widths at one batch size at least) before the cost counts "
         "as fitted"),
        ("PROBE_EVERY", "int", 32, 1, None, "one step in this many verifies at a probe width once the cost is "
         "fitted"),
        ("PROBE_EARLY", "int", 4, 1, None, "... one in this many before"),
        ("PROBE_FREE", "int", 256, 1, None, "... one in this many where rows are nearly free"),
        ("RATE_FREE", "int", 8, 1, None, "where rows are nearly free, one step in this many rates its accepted "
         "paths"),
        ("DECAY_NODES", "int", 2048, 1, None, "observed nodes over which a path's weight in the acceptance "
         "rates decays by 1/e"),
        ("PRIOR", "float", 1.0, 0.0, None, "pseudo observations behind an unrated node's acceptance ..."),
        ("PRIOR_P", "float", 0.5, 0.0, 1.0, "... at this rate (optimistic: an unrated node gets verified)"),
        ("MIN_GAIN", "float", 0.02, 0.0, 1.0, "a narrower width must beat the widest by this share of tokens "
         "per second"),
        ("CHOICE_WINDOW", "int", 64, 1, None, "chosen steps the mean cost of choosing (and its saving) weighs "
         "most"),
        ("MIN_CHOICES", "int", 32, 1, None, "chosen steps at a batch size before what choosing saves there "
         "counts as measured"),
        ("RECHECK_FREE", "int", 64, 1, None, "where choosing saves less than it costs, one step in this many "
         "still chooses"),
    )),
    # -- tuning constants: drafts and per-request state (ssr_sglang.srt) --
    *_tuning("ssr_sglang.srt.draft_manager", "SSR_DRAFT_", (
        ("PROMPT_TAIL", "int", 64, 1, None, "prompt tokens examined for an open think block"),
        ("DIVERGED_HORIZON", "int", 64, 1, None, "a draft that lost alignment keeps decoding while it supplied "
         "an accepted token within this many answer tokens"),
        ("REDECIDE_TOKENS", "int", 8, 1, None, "a request the policy declined to fork for is weighed again after "
         "this many more reasoning tokens"),
        ("PREEMPT_STEPS", "int", 2, 1, None, "drafts are preempted when KV headroom falls below what the batch "
         "may allocate in this many decode steps"),
    )),
    *_tuning("ssr_sglang.srt.request_state", "SSR_", (
        ("THINK_START_WINDOW", "int", 4, 1, None, "leading output tokens before a request that opened no think "
         "block is served as plain"),
        ("REPLAY_TOKENS", "int", 128, 1, None, "answer tokens a finished request replays per draft to rate it "
         "for the policy"),
        ("CONTEXT_PROMPT_TOKENS", "int", 4096, 0, None, "`ssr_context`: the last this many prompt tokens are "
         "indexed as a source"),
        ("CONTEXT_REASONING_TOKENS", "int", 4096, 0, None, "`ssr_context`: the last this many reasoning tokens "
         "are indexed once the answer starts"),
        ("CONTEXT_CHUNK", "int", 256, 1, None, "`ssr_context`: tokens indexed per scheduler step at most"),
        ("CLIENT_DRAFT_CHUNK", "int", 1024, 1, None, "client drafts are indexed this many tokens per scheduler "
         "step"),
    )),
    # -- tests and benchmarks --
    _S("SSR_TEST_FAULTS", "names", frozenset(), "fault points armed for requests whose rid asks for them "
       "(ssr_sglang.srt.faults)", "test", choices=("fork", "propose", "step", "finish"), default_text="none"),
    _S("SSR_TEST_CHECK_TREES", "bool", False, "count repeated sibling tokens in every verified tree "
       "(/server_info)", "test"),
    _S("SSR_TEST_DRAFT_TOKENS", "bool", False, "report each draft's input and output ids (/server_info)", "test"),
    _S("SSR_TEST_FORCE_OVERLAP_CPU", "bool", False, "keep overlap scheduling on a CPU server", "test"),
    _S("SSR_TEST_MODEL_DIR", "text", ".cache/test-models", "where the tiny test models are built", "test"),
    _S("SSR_GPU_STACK_FILE", "text", None, "benchmarks/gpu/sglang_check.py: the GPU stack description to "
       "record", "test"),
    _S("SSR_TEST_GPU_BUNDLE", "bool", False, "run the opt-in GPU bundle test (downloads torch with CUDA "
       "libraries; tests/benchmarks/test_gpu_bundle.py)", "test"),
    _S("SSR_TEST_PY312", "text", "python3.12", "the Python 3.12 interpreter that test uses", "test"),
)}


def _env(env: Optional[Mapping[str, str]]) -> Mapping[str, str]:
    return os.environ if env is None else env


def _fail(s: Setting, raw: str, want: str) -> SSRConfigError:
    return SSRConfigError(f"environment variable {s.name}={raw!r} must be {want}")


def _in_range(s: Setting, raw: str, v):
    if (s.low is not None and v < s.low) or (s.high is not None and v > s.high) or v != v:  # v != v: NaN
        bounds = [f">= {s.low:g}"] if s.low is not None else []
        bounds += [f"<= {s.high:g}"] if s.high is not None else []
        raise _fail(s, raw, f"{'an integer' if s.kind == 'int' else 'a number'} {' and '.join(bounds)}")
    return v


def _parse_bool(s: Setting, raw: str):
    low = raw.strip().lower()
    if low == "":
        return s.default
    if low in _TRUE or low in _FALSE:
        return low in _TRUE
    raise _fail(s, raw, "1/true/yes/on or 0/false/no/off")


def _parse_number(s: Setting, raw: str, cast: Callable):
    text = raw.strip()
    if s.optional and text.lower() in ("", "none"):
        return None
    try:
        v = cast(text)
    except ValueError:
        raise _fail(s, raw, "an integer" if cast is int else "a number") from None
    return _in_range(s, raw, v)


def _parse_list(s: Setting, raw: str, cast: Callable):
    try:
        return tuple(cast(x) for x in raw.split(",") if x.strip())
    except ValueError:
        raise _fail(s, raw, "a comma-separated list of " + ("integers" if cast is int else "numbers")) from None


def _parse_choice(s: Setting, raw: str):
    v = raw.strip().lower()
    if v not in s.choices:
        raise _fail(s, raw, "one of " + ", ".join(map(repr, s.choices)))
    return v


def _parse_names(s: Setting, raw: str):
    names = frozenset(p.strip() for p in raw.split(",") if p.strip())
    bad = sorted(names - set(s.choices))
    if bad:
        raise _fail(s, raw, "a comma-separated subset of " + ", ".join(s.choices))
    return names


_PARSERS = {
    "bool": _parse_bool,
    "int": lambda s, raw: _parse_number(s, raw, int),
    "float": lambda s, raw: _parse_number(s, raw, float),
    "ints": lambda s, raw: _parse_list(s, raw, int),
    "numbers": lambda s, raw: _parse_list(s, raw, float),
    "choice": _parse_choice,
    "names": _parse_names,
    "text": lambda s, raw: raw,
}


def parse(name: str, raw: str) -> Any:
    """``raw`` as a value of the declared variable ``name``; raises :class:`SSRConfigError` naming it."""
    s = SETTINGS[name]
    return _PARSERS[s.kind](s, raw)


def is_set(name: str, env: Optional[Mapping[str, str]] = None) -> bool:
    """Whether the declared variable ``name`` is present (an empty value counts as present)."""
    if name not in SETTINGS:
        raise KeyError(f"{name} is not a declared SSR setting")
    return name in _env(env)


def get(name: str, env: Optional[Mapping[str, str]] = None) -> Any:
    """The value of ``name`` in ``env`` (default: ``os.environ``), or its declared default when unset."""
    if not is_set(name, env):
        return SETTINGS[name].default
    return parse(name, _env(env)[name])


def unknown(env: Optional[Mapping[str, str]] = None) -> List[Tuple[str, Optional[str]]]:
    """Each set ``SSR_*`` variable that is not declared, with the closest declared name (or None)."""
    import difflib

    out = []
    for name in sorted(_env(env)):
        if name.startswith(PREFIX) and name not in SETTINGS:
            close = difflib.get_close_matches(name, list(SETTINGS), n=1, cutoff=0.6)
            out.append((name, close[0] if close else None))
    return out


def check_environment(env: Optional[Mapping[str, str]] = None, warn: Optional[Callable[..., None]] = None) -> list:
    """Warn once (``warn``, default this module's logger) about set ``SSR_*`` variables that are not
    declared, then validate every declared one that is set: raises :class:`SSRConfigError` naming the
    first bad one. Returns the undeclared ones as :func:`unknown` does."""
    env = _env(env)
    found = unknown(env)
    if found:
        hints = "; ".join(f"{n} (did you mean {c}?)" if c else f"{n} (no close match)" for n, c in found)
        (warn or logger.warning)("SSR: unknown SSR_* environment variables, ignored: %s; the known ones are "
                                 "listed in docs/configuration.md", hints)
    for name in SETTINGS:
        if name in env:
            parse(name, env[name])
    return found


def _default_text(s: Setting) -> str:
    if s.default_text is not None:
        return s.default_text
    if s.default is None:
        return "unset"
    if isinstance(s.default, bool):
        return "1" if s.default else "0"
    if isinstance(s.default, tuple):
        return ",".join(map(str, s.default))
    return str(s.default)


def _allowed_text(s: Setting) -> str:
    if s.choices:
        return ("subset of " if s.kind == "names" else "") + ", ".join(s.choices)
    if s.low is not None or s.high is not None:
        lo = "-inf" if s.low is None else f"{s.low:g}"
        hi = "inf" if s.high is None else f"{s.high:g}"
        return f"[{lo}, {hi}]"
    return {"bool": "0/1", "ints": "comma-separated integers", "numbers": "comma-separated numbers",
            "text": "any text", "int": "integer"}.get(s.kind, s.kind) + (", or none" if s.optional else "")


def markdown() -> str:
    """The configuration reference (``docs/configuration.md``), generated from :data:`SETTINGS`."""
    lines = ["# Configuration reference", "",
             "<!-- Generated by `python -m ssr_sglang.settings --markdown > docs/configuration.md`; "
             "edit ssr_sglang/settings.py, not this file. -->", "",
             "SSR's server-wide settings are environment variables, inherited by SGLang's spawned processes, "
             "plus SGLang's own `--speculative-num-draft-tokens`. A bad value stops the server at start-up "
             "with an error naming the variable; a set `SSR_*` variable that is not listed here is reported "
             "in the server log at start-up, with the closest known name.", ""]
    for group, title in GROUPS.items():
        lines += [f"## {title}", "", "| variable | type | default | allowed | meaning |",
                  "|---|---|---|---|---|"]
        for s in SETTINGS.values():
            if s.group == group:
                name = f"`{s.name}`" + (f" (`{s.request_key}`)" if s.request_key else "")
                meaning = s.meaning + (f" (`{s.constant}`)" if s.constant else "")
                lines.append(f"| {name} | {s.kind} | {_default_text(s)} | {_allowed_text(s)} | {meaning} |")
        lines.append("")
    lines += ["Per request, `sampling_params.custom_params` (`/generate`) or `custom_params` in the OpenAI body "
              "(`extra_body`) carry the keys in brackets above, plus `ssr_draft` / `ssr_draft_<k>`: "
              "client-supplied draft answers as token ids.", ""]
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m ssr_sglang.settings",
                                description="The SSR_* settings: the configuration reference in Markdown "
                                            "(docs/configuration.md is this output).")
    p.add_argument("--markdown", action="store_true", help="print the reference as Markdown")
    args = p.parse_args(argv)
    if not args.markdown:
        p.print_help()
        return 0
    sys.stdout.write(markdown())
    return 0


if __name__ == "__main__":
    sys.exit(main())
