"""Invalid SSR server settings fail at start-up, naming the setting (no server comes up)."""

from __future__ import annotations

import concurrent.futures as cf
import os
import subprocess
import sys

import pytest

from ssr_sglang.testing.server import CPU_ENV, cpu_server_args, free_port

CASES = [  # (extra env, extra args, what the error must name): real launches, one wave in parallel
    # one of each path to the launcher's error: a bad SSR_* value, a bad SSR flag, a refused deployment. The
    # other values and deployments take the same paths and are checked without a launch each: ENV_CASES
    # (SSR_MAX_KV_USAGE, ...) and UNSUPPORTED (--disaggregation-mode, SGLANG_RUST_SERVER, ...) below.
    ({"SSR_EVERY": "abc", "SSR_MAX_BACH": "4"}, [], "SSR_EVERY"),  # the misspelt name is reported first
    ({}, ["--speculative-num-draft-tokens", "0"], "--speculative-num-draft-tokens"),
    ({}, ["--pp-size", "2"], "--pp-size"),
]
# The same check as the launcher runs (``SSRSpecAlgo.handle_server_args``), without a launch each.
ENV_CASES = [
    ({"SSR_MAX_KV_USAGE": "lots"}, "SSR_MAX_KV_USAGE"),
    ({"SSR_MAX_KV_USAGE": "-0.1"}, "SSR_MAX_KV_USAGE"),
    ({"SSR_MAX_BATCH": "0"}, "SSR_MAX_BATCH"),
    ({"SSR_MAX_BATCH": "many"}, "SSR_MAX_BATCH"),
    ({"SSR_CHECKPOINTS": "10,x"}, "SSR_CHECKPOINTS"),
    ({"SSR_CHECKPOINTS": "-5"}, "SSR_CHECKPOINTS"),
    ({"SSR_ENABLED": "maybe"}, "SSR_ENABLED"),
    ({"SSR_REASONING_FALLBACK": "eagle"}, "SSR_REASONING_FALLBACK"),
    ({"SSR_MAX_DRAFT_TOKENS": "-3"}, "SSR_MAX_DRAFT_TOKENS"),
    ({"SSR_MAX_DRAFT_TOKENS": "1e9"}, "SSR_MAX_DRAFT_TOKENS"),
    ({"SSR_EVERY": "10"}, "SSR_MAX_DRAFTS"),  # iterative SSR needs a bound on the number of drafts
    ({"SSR_FRACTIONS": "0.5"}, "SSR_THINKING_BUDGET"),
    ({"SSR_FRACTIONS": "1.5", "SSR_THINKING_BUDGET": "100"}, "SSR_FRACTIONS"),
    ({"SSR_THINKING_BUDGET": "-1", "SSR_FRACTIONS": "0.5"}, "SSR_THINKING_BUDGET"),
    ({"SSR_PREFIX": "2"}, "SSR_PREFIX"),
]


@pytest.mark.parametrize("env,name", ENV_CASES)
def test_invalid_env_named(env, name):
    from ssr_sglang.srt.config import SSRConfigError
    from ssr_sglang.srt.spec import SSRSpecAlgo

    class Args:  # what handle_server_args reads before it validates anything else
        device = "cpu"

    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with pytest.raises(SSRConfigError, match=name):
            SSRSpecAlgo.handle_server_args(None, Args())
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k)
            else:
                os.environ[k] = v


def _launch(model, env, args):
    port = free_port()
    cmd = [sys.executable, "-m", "sglang.launch_server",
           *cpu_server_args(model, "--speculative-algorithm", "SSR", *args), "--host", "127.0.0.1", "--port", str(port)]
    try:
        p = subprocess.run(cmd, env={**os.environ, **CPU_ENV, **env}, capture_output=True, text=True, timeout=240,
                           start_new_session=True)
    except subprocess.TimeoutExpired as e:
        return None, str(e.stdout or "")[-2000:]
    return p.returncode, p.stdout + p.stderr


@pytest.mark.server  # real launches (each stops before a model loads)
def test_invalid_settings_fail_at_startup_naming_them(tiny_qwen3):
    with cf.ThreadPoolExecutor(3) as pool:  # start-up fails before any model loads: cheap
        results = list(pool.map(lambda c: _launch(tiny_qwen3, c[0], c[1]), CASES))
    failures = []
    for (env, args, name), (rc, out) in zip(CASES, results):
        if rc in (None, 0) or name not in out:
            failures.append((env, args, rc, out[-600:]))
    assert not failures, failures
    assert "SSR_MAX_BACH (did you mean SSR_MAX_BATCH?)" in results[0][1], results[0][1][-2000:]


# -- deployments SSR refuses, and servers it must leave alone -------------------------------------------
UNSUPPORTED = [  # (server args, environment, what the error must name)
    ({"disaggregation_mode": "prefill"}, {}, "--disaggregation-mode prefill"),
    ({"disaggregation_mode": "decode"}, {}, "--disaggregation-mode decode"),
    ({"pp_size": 2}, {}, "--pp-size 2"),
    ({"enable_dp_attention": True}, {}, "--enable-dp-attention"),
    ({}, {"SGLANG_RUST_SERVER": "1"}, "SGLANG_RUST_SERVER"),
]


@pytest.mark.parametrize("args,env,name", UNSUPPORTED)
def test_unsupported_deployments_refused_naming_the_flag(args, env, name, monkeypatch):
    from ssr_sglang.srt.spec import refuse_unsupported

    for k, v in env.items():
        monkeypatch.setenv(k, v)
    sa = type("Args", (), {"device": "cpu", "disaggregation_mode": "null", "pp_size": 1, **args})()
    with pytest.raises(ValueError, match=name.replace("-", "\\-")):
        refuse_unsupported(sa)


def test_supported_deployment_passes(monkeypatch):
    from ssr_sglang.srt.spec import refuse_unsupported

    monkeypatch.delenv("SGLANG_RUST_SERVER", raising=False)
    refuse_unsupported(type("Args", (), {"device": "cpu", "disaggregation_mode": "null", "pp_size": 1})())


STREAMER_CHECK = r"""
from types import SimpleNamespace as NS
from sglang.srt.plugins import load_plugins
from sglang.srt.plugins.hook_registry import HookRegistry
load_plugins()
HookRegistry.apply_hooks()
from sglang.srt.managers.scheduler import Scheduler
from sglang.srt.managers.scheduler_components.output_streamer import SchedulerOutputStreamer
for algo in (None, "NGRAM", "EAGLE", "SSR", "ssr"):
    cls = Scheduler.get_output_streamer_class(NS(server_args=NS(speculative_algorithm=algo)))
    print(algo, cls is SchedulerOutputStreamer, cls.has_additional_customized_info)
"""


@pytest.mark.slow  # a subprocess that imports SGLang's scheduler
def test_output_streamer_hook_only_on_ssr_servers():
    """The plugin's streamer (customized output, which SGLang's Rust egress refuses) is used only by a
    server that serves SSR; any other server in the same environment keeps SGLang's own class."""
    p = subprocess.run([sys.executable, "-c", STREAMER_CHECK], env={**os.environ, **CPU_ENV}, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    lines = [ln.split() for ln in p.stdout.splitlines() if ln.split()[:1] and ln.split()[0] in
             ("None", "NGRAM", "EAGLE", "SSR", "ssr")]
    assert lines == [["None", "True", "False"], ["NGRAM", "True", "False"], ["EAGLE", "True", "False"],
                     ["SSR", "False", "True"], ["ssr", "False", "True"]], p.stdout


@pytest.mark.server
def test_plain_server_with_rust_egress_untouched_by_the_plugin():
    """A plain server in an environment with the plugin installed starts and serves with
    SGLANG_RUST_SERVER=1 (before, the plugin's streamer was installed everywhere and SGLang's Rust
    egress refused it at start-up)."""
    from ssr_sglang.models import bundled_model_path
    from ssr_sglang.testing.server import Server

    with Server(cpu_server_args(bundled_model_path()), env={"SGLANG_RUST_SERVER": "1"}) as s:
        out = s.generate(text="count the items", max_new_tokens=4)
        assert len(out["output_ids"]) == 4
