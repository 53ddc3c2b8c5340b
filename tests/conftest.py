"""Shared fixtures: locally built test models and real SGLang servers on CPU.

Servers are expensive (about 25 s to start), so the plain reference server is shared by the whole
session and each module starts at most one more.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Tests that import SGLang's scheduler-side modules in this process (the SSR worker, NGRAM) need the CPU
# engine's sgl_kernel stand-ins, as a server's processes get them: request the CPU engine before anything
# imports sgl_kernel (the .pth bootstrap ran at start-up, before this variable was set).
os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
from ssr_sglang.cpu import bootstrap  # noqa: E402

bootstrap.install()
os.environ.setdefault("SSR_TEST_MODEL_DIR", str(ROOT / ".cache" / "test-models"))
LOG_DIR = ROOT / ".cache" / "test-logs"


# Tiers (scripts/test.sh): a test that starts a server is marked ``server``; the fast tier leaves those
# out except the one module marked ``smoke`` (``-m "not slow and (not server or smoke)"``). The guard below makes an unmarked test that starts a server
# fail, so a missing mark cannot slip a server into the fast tier.
_MAY_START_SERVER = {"now": True}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Runs before the item's fixtures are set up, so module-scoped server fixtures are covered too."""
    _MAY_START_SERVER["now"] = item.get_closest_marker("server") is not None


def _guard_server_starts() -> None:
    from ssr_sglang.testing.server import Server

    start = Server.start

    def guarded_start(self) -> None:
        if not _MAY_START_SERVER["now"]:
            raise RuntimeError("this test starts an SGLang server but is not marked @pytest.mark.server "
                               "(the fast tier starts only the smoke module's)")
        start(self)

    Server.start = guarded_start


_guard_server_starts()

# Scheduling for the full run (scripts/test.sh: -n 2 --dist loadfile --no-loadscope-reorder): xdist hands the
# files out in collection order, so the longest go first and the many short ones fill in behind them (longest
# processing time first); xdist's own reorder (most tests first) left the few-test, many-server files for
# last, one worker running them alone. By each file's time in the fresh-clone run of 2026-12-07
# (benchmarks/results/test-suite-1207/c70eeb0, less what the later cuts saved), longest first; a file not listed
# keeps its place after these.
LONGEST_FIRST = (
    "tests/srt/test_exact_smollm2.py", "tests/srt/test_parallel_cpu.py", "tests/srt/test_spec_sampling_server.py",
    "tests/srt/test_ssr_hybrid.py", "tests/reliability/test_context_limit.py", "tests/benchmarks/test_bench_smoke.py",
    "tests/srt/test_constrained.py", "tests/test_main_job.py", "tests/srt/test_cpu_serving.py",
    "tests/programs/test_ssr_programs.py", "tests/srt/test_token_counts_smollm2.py", "tests/reliability/test_faults.py",
    "tests/srt/test_ssr_server.py", "tests/srt/test_ssr_bundled_model.py", "tests/reliability/test_bad_settings.py",
    "tests/benchmarks/test_grammar_kits.py", "tests/srt/test_ssr_hybrid_reasoner.py", "tests/srt/test_ssr_overlap_cpu.py",
    "tests/reliability/test_lifecycle.py", "tests/reliability/test_soak.py", "tests/models/test_smollm2_reasoner.py",
)


def pytest_collection_modifyitems(config, items):
    rank = {f: i for i, f in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))  # stable: files stay whole


PROMPT_TOPICS = [
    "count the items then add", "check the table row", "sum the price and qty", "list the names",
    "what is 12 + 7", "first add then check", "return the total", "print each item",
    "get the value", "set the id and name", "so because the answer", "then step first",
    "def init self value", "class reasoning answer", "count in if else", "the total step",
]


@pytest.fixture(scope="session")
def tiny_qwen3() -> Path:
    from ssr_sglang.testing.tiny_models import cached_tiny_model

    return cached_tiny_model("qwen3")


@pytest.fixture(scope="session")
def tiny_llama() -> Path:
    from ssr_sglang.testing.tiny_models import cached_tiny_model

    return cached_tiny_model("llama")


@pytest.fixture(scope="session")
def tokenizer(tiny_qwen3):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_qwen3)


@pytest.fixture(scope="session")
def chat_prompts(tokenizer) -> list:
    """Token ids of chat prompts whose generation starts inside an open ``<think>`` block."""
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True,
                                           tokenize=False) for t in PROMPT_TOPICS]
    return [tokenizer(t, add_special_tokens=False).input_ids for t in texts]


def _bench_data_root() -> Path:
    """Where the benchmarks look for their data (``bench_utils.DEFAULT_DATA_ROOT``, the one definition)."""
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_utils import DEFAULT_DATA_ROOT

    return DEFAULT_DATA_ROOT


BENCH_DATA = _bench_data_root()


def require_bench_data(path: Path) -> Path:
    """Benchmark data (ClassEval, LongProc) lives outside the repository (``../shared/data``; not ours
    to commit). Where it is absent the test is skipped with the reason, except in CI (``CI=true``),
    which is meant to have it: there a missing file fails the test."""
    if path.exists():
        return path
    msg = (f"benchmark data missing at {path} (ClassEval / LongProc are kept outside the repository, "
           f"under ../shared/data; see benchmarks/bench_utils.py)")
    if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
        pytest.fail(msg + "; CI=true, so this is a failure, not a skip")
    pytest.skip(msg)


def start_server(model, *extra, env=None, name="server"):
    """A CPU server logging to ``.cache/test-logs/<name>.log``, or ``<name>.<worker>.log`` under pytest-xdist:
    a session-scoped server starts once per worker, and two servers writing one file garble it."""
    from ssr_sglang.testing.server import Server, cpu_server_args

    LOG_DIR.mkdir(parents=True, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    log = LOG_DIR / (f"{name}.{worker}.log" if worker else f"{name}.log")
    return Server(cpu_server_args(model, *extra), env=env, log_path=str(log))


def check_client_draft(server, prompt, tokenizer) -> dict:
    """Close ``prompt``'s think block, then send it with a client draft equal to its own output: the output
    is unchanged and nearly every step accepts the whole tree depth (measured 8.08 tokens a step, 84 of 97
    answer tokens from the draft; 2026-11-30); a wrong draft changes nothing either. Returns the
    drafted request's ``meta_info["ssr"]``."""
    closed = list(prompt) + tokenizer("\n</think>\n\n", add_special_tokens=False).input_ids
    run = lambda draft=None: server.generate(  # noqa: E731
        input_ids=closed, max_new_tokens=96, sampling={"ignore_eos": True},
        custom_params={"ssr_draft": draft} if draft is not None else None)
    first = run()["output_ids"]
    again = run(first)
    assert again["output_ids"] == first
    ssr = again["meta_info"]["ssr"]
    assert ssr["phase"] == "answer" and ssr["answer_accept_length"] >= 7, ssr
    assert ssr["accepted_prefix"] >= 80, ssr
    assert run([(t + 1) % 500 for t in first])["output_ids"] == first
    return ssr


@pytest.fixture(scope="session")
def plain_server(tiny_qwen3):
    with start_server(tiny_qwen3, name="plain") as s:
        yield s


@pytest.fixture(scope="session")
def plain_outputs(plain_server, chat_prompts) -> list:
    """Greedy reference: plain decoding of every chat prompt, 128 new tokens."""
    return [plain_server.generate(input_ids=p, max_new_tokens=128)["output_ids"] for p in chat_prompts]
