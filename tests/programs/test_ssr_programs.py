"""SSR ``@sgl.function`` programs (``programs/``) against real CPU servers with the bundled tiny model.

One stock server and one SSR server (``--reasoning-parser qwen3``) are started in parallel and
shared by the module.  Every task seed is used once, so radix-cache hits come from the program
itself (its own reasoning segments), not from an earlier test.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import start_server

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "programs"))

from ssr_sglang.frontend import SSREndpoint, speculative_generate  # noqa: E402
from ssr_sglang.models import bundled_model_path  # noqa: E402
from ssr_sglang.models.tasks import EOS, THINK_END, format_chat, make_example  # noqa: E402

import agent_openai  # noqa: E402
from ssr_program import iterative_ssr, result, ssr_reasoning  # noqa: E402

pytestmark = pytest.mark.server

MODEL = bundled_model_path()
FIGURES = {}  # printed at the end of the module (pytest -s), for the report


@pytest.fixture(scope="module")
def servers():
    stock = start_server(MODEL, name="programs-stock")
    ssr = start_server(MODEL, "--speculative-algorithm", "SSR", "--speculative-num-draft-tokens", "8",
                       "--reasoning-parser", "qwen3", name="programs-ssr")
    try:
        with cf.ThreadPoolExecutor(2) as pool:
            for f in [pool.submit(stock.start), pool.submit(ssr.start)]:
                f.result()
        yield stock, ssr
    finally:
        stock.stop()
        ssr.stop()
        for k, v in FIGURES.items():
            print(f"\n[figures] {k}: {json.dumps(v)}")


@pytest.fixture(scope="module")
def stock(servers):
    return servers[0]


@pytest.fixture(scope="module")
def ssr(servers):
    return servers[1]


@pytest.fixture(scope="module")
def client_backend(stock):
    return SSREndpoint(stock.url)


@pytest.fixture(scope="module")
def server_backend(ssr):
    return SSREndpoint(ssr.url)


def task_prompt(seed: int) -> str:
    return format_chat(str(make_example(random.Random(seed))["prompt"]))


def greedy(server, prompt: str) -> dict:
    """Plain one-shot greedy decoding: ids, reasoning text and answer text."""
    out = server.generate(text=prompt, max_new_tokens=700, sampling={"skip_special_tokens": False})
    text = out["text"]
    assert THINK_END in text, text
    reasoning, answer = text.split(THINK_END, 1)
    return {"ids": out["output_ids"], "reasoning": reasoning.strip(), "answer": answer.replace(EOS, "").strip()}


def overlaps(a: dict, b: dict) -> bool:
    return a["client_t0"] < b["client_t1"] and b["client_t0"] < a["client_t1"]


def check_forks_reuse_prefix(state, backend) -> list:
    """Each draft request's prompt is the reasoning so far + the forced think end; all but the last
    token of the reasoning (whose KV a finished request never writes) comes from the radix cache."""
    force = len(backend.force_ids)
    cached = []
    for m in state["draft_meta"]:
        cv = m.get("client_verify")
        prompt = len(m["prompt_ids"])
        hit = cv["first_cached_tokens"] if cv else m["cached_tokens"]  # cv: the first verify request
        assert cv or m["prompt_tokens"] == prompt
        assert hit >= prompt - force - 1, (hit, prompt, force)
        cached.append([hit, prompt])
    return cached


def check_result(r: dict, ref: dict) -> None:
    assert r["output_ids"] == ref["ids"]
    assert r["answer"] == ref["answer"]
    assert r["reasoning"].strip() == ref["reasoning"]
    assert r["drafts"] and len(r["drafts"]) == len(r["fork_points"]) == len(r["draft_ids"])
    for d in r["drafts"]:
        assert "stock = {" in d, d


def test_ssr_program_on_stock_server_equals_greedy_and_verifies_on_client(stock, client_backend):
    assert client_backend.mode == "client" and not client_backend.ssr_server
    tot = {"steps": 0, "tokens": 0, "accepted_prefix": 0, "accepted_suffix": 0}
    cached, overlapped = [], 0
    for seed in (101, 102, 103):
        prompt = task_prompt(seed)
        ref = greedy(stock, prompt)
        state = ssr_reasoning.run(prompt, checkpoints=[30, 60], backend=client_backend)
        r = result(state)
        check_result(r, ref)
        assert r["fork_points"] == [30, 60]
        cv = r["answer_client_verify"]
        assert cv["accepted"] > 0 and cv["steps"] < cv["output_tokens"], cv
        for k in ("steps", "accepted_prefix", "accepted_suffix"):
            tot[k] += cv[k]
        tot["tokens"] += cv["output_tokens"]
        cached += check_forks_reuse_prefix(state, client_backend)
        # The draft forked at checkpoint k is in flight while the main branch reasons on.
        overlapped += sum(overlaps(d, s) for d, s in zip(state["draft_meta"], state["segment_meta"][1:]))
    assert overlapped >= 3, overlapped  # of 6 fork/segment pairs; normally all 6
    tot["accept_length"] = round(tot["tokens"] / tot["steps"], 3)
    assert tot["accept_length"] > 5, tot  # 6.34 measured (2026-11-30)
    FIGURES["stock ssr_reasoning answer (client verify, 3 tasks)"] = tot
    FIGURES["stock draft forks [cached, prompt]"] = cached
    FIGURES["stock fork/segment overlaps of 6"] = overlapped


def test_iterative_program_on_stock_server_seeds_drafts(stock, client_backend):
    seeded = []
    for seed in (104, 105):
        prompt = task_prompt(seed)
        ref = greedy(stock, prompt)
        state = iterative_ssr.run(prompt, every=20, max_drafts=3, draft_max_tokens=160, backend=client_backend)
        r = result(state)
        check_result(r, ref)
        assert len(r["drafts"]) >= 2
        assert r["draft_ssr"][0] is None  # the first draft has nothing to be seeded with: plain
        for k in range(1, len(r["drafts"])):
            cv = r["draft_ssr"][k]
            assert cv is not None and cv["accepted"] > 0, cv
            seeded.append(cv["accept_length"])
            # Seeding changes speed only: the draft is what plain greedy decoding gives.
            meta = state["draft_meta"][k]
            plain = stock.generate(input_ids=meta["prompt_ids"], max_new_tokens=160)["output_ids"]
            assert r["draft_ids"][k] == plain
        check_forks_reuse_prefix(state, client_backend)
    assert min(seeded) > 4, seeded  # 5.6 to 7.8 measured (2026-11-30)
    FIGURES["stock iterative seeded drafts accept_length"] = seeded


def test_ssr_program_on_ssr_server_hands_drafts_to_the_server(stock, ssr, server_backend):
    assert server_backend.mode == "server" and server_backend.ssr_server
    tot = {"steps": 0, "tokens": 0, "accepted_prefix": 0, "accepted_suffix": 0}
    cached = []
    for seed in (106, 107, 108):
        prompt = task_prompt(seed)
        ref = greedy(stock, prompt)
        state = ssr_reasoning.run(prompt, checkpoints=[30, 60], backend=server_backend)
        r = result(state)
        check_result(r, ref)
        info = r["answer_ssr"]
        assert info is not None and info["phase"] == "answer", info
        assert state.get_meta_info("answer")["drafts_sent"] == [len(d) + 2 for d in r["draft_ids"]]  # + "\n\n"
        assert info["accepted_prefix"] > 0, info
        assert info["answer_accept_length"] > 2, info
        for k, kk in (("steps", "answer_verify_steps"), ("accepted_prefix", "accepted_prefix"),
                      ("accepted_suffix", "accepted_suffix")):
            tot[k] += info[kk]
        tot["tokens"] += info["answer_tokens"]
        # The program forks; the server does not fork drafts of its own for these requests.
        assert all(m["ssr"]["drafts_started"] == 0 for m in state["segment_meta"])
        cached += check_forks_reuse_prefix(state, server_backend)
    tot["accept_length"] = round(tot["tokens"] / tot["steps"], 3)
    assert tot["accept_length"] > 5.5, tot  # 6.88 measured (2026-11-30)
    FIGURES["ssr-server ssr_reasoning answer (meta_info.ssr, 3 tasks)"] = tot
    FIGURES["ssr-server draft forks [cached, prompt]"] = cached


def test_iterative_program_on_ssr_server(stock, server_backend):
    seeded = []
    for seed in (109, 110):
        prompt = task_prompt(seed)
        ref = greedy(stock, prompt)
        state = iterative_ssr.run(prompt, every=20, max_drafts=3, draft_max_tokens=160, backend=server_backend)
        r = result(state)
        check_result(r, ref)
        assert r["draft_ssr"][0]["phase"] == "plain"  # no drafts to verify against
        assert len(r["drafts"]) >= 2, r["fork_points"]  # else no draft was seeded: nothing below is checked
        for k in range(1, len(r["drafts"])):
            info = r["draft_ssr"][k]
            assert info["phase"] == "answer" and info["accepted_prefix"] + info["accepted_suffix"] > 0, info
            seeded.append(info["answer_accept_length"])
        assert r["answer_ssr"]["accepted_prefix"] > 0
    assert min(seeded) > 5, seeded  # 6.4 to 6.8 measured (2026-11-30)
    FIGURES["ssr-server iterative seeded drafts answer_accept_length"] = seeded


def test_client_verification_is_lossless_with_wrong_drafts(stock, client_backend):
    prompt = task_prompt(111)
    ref = greedy(stock, prompt)
    ids = client_backend.ids_for(prompt)
    end = ref["ids"].index(client_backend.end_ids[0]) + 1
    prefix, answer = ids + ref["ids"][:end], ref["ids"][end:]
    edited = list(answer)
    for i in (8, 30, 55):  # prefix verification stops at the first; the suffix index re-anchors
        edited[i] = (edited[i] + 7) % 400
    out, st = speculative_generate(client_backend.client, prefix, [edited], 400, eos_ids=client_backend.eos_ids())
    assert out == answer
    # measured (2026-11-30): 8 tokens from the prefix up to the first wrong one, 66 from suffix matches
    assert st.accepted_suffix >= 50 and st.accepted_prefix >= 7, st
    junk, st2 = speculative_generate(client_backend.client, prefix, [list(range(5, 120))], 400,
                                     eos_ids=client_backend.eos_ids())
    assert junk == answer
    assert st2.steps <= len(answer)
    FIGURES["client verify, 3 wrong tokens in the draft"] = st.as_dict()


def test_cli_runs(ssr, capsys):
    import ssr_program

    # One real subprocess (the documented command line) ...
    out = subprocess.run([sys.executable, str(ROOT / "programs" / "ssr_program.py"), "--url", ssr.url,
                          "--task-seed", "112", "--checkpoints", "30,60", "--json"],
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout)
    assert r["verified_on"] == "server" and "stock = {" in r["answer"] and len(r["drafts"]) == 2
    assert r["answer_ssr"]["accepted_prefix"] > 0
    # ... and the printed form of the iterative program, in-process (saves another sglang import).
    assert ssr_program.main(["--url", ssr.url, "--task-seed", "113", "--iterative", "--every", "24",
                             "--max-drafts", "2"]) == 0
    text = capsys.readouterr().out
    assert "# answer" in text and "# draft 1" in text and "verified on the server" in text


def test_openai_streaming_separates_reasoning_and_answer(stock, ssr):
    seed = 114
    ref = greedy(stock, task_prompt(seed))
    user = str(make_example(random.Random(seed))["prompt"])
    seen = {"reasoning": 0, "content": 0}
    res = agent_openai.stream_chat(ssr.url, [{"role": "user", "content": user}], max_tokens=700,
                                   custom_params={"ssr_checkpoints": [40]},
                                   on_reasoning=lambda t: seen.__setitem__("reasoning", seen["reasoning"] + 1),
                                   on_content=lambda t: seen.__setitem__("content", seen["content"] + 1))
    assert res["reasoning"].strip() == ref["reasoning"]
    assert res["content"].strip() == ref["answer"]
    assert THINK_END not in res["reasoning"] and THINK_END not in res["content"]
    assert seen["reasoning"] > 5 and seen["content"] > 5, seen  # streamed, not one chunk each
    assert res["finish_reason"] == "stop"
    FIGURES["openai stream chunks (reasoning, content)"] = [seen["reasoning"], seen["content"]]
