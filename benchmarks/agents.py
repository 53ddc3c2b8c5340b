"""Agent frameworks end to end against plain, NGRAM and SSR servers on CPU (issue 38 item 3).

The OpenAI Agents SDK and LangGraph each run a multi-turn tool-using task on the SmolLM2 reasoner (``--model
tiny``: the bundled model): three model turns forced to call ``set_stock`` (``tool_choice="required"``, the tool
executed locally), then a final turn without tools that gives the answer. Servers run with ``--reasoning-parser
qwen3 --tool-call-parser qwen``. Each turn's latency and ``meta_info["ssr"]`` (drafts, accepted tokens by
source) are recorded by an httpx hook on the framework's own client. On the SSR server (``SSR_CONTEXT=1``: the
prompt, i.e. earlier turns and tool results, and the reasoning are suffix sources) NGRAM is ``ssr: false`` and
"SSR without context" ``ssr_context: false``, per request (issue 38 item 4). One untimed round per server, then
``--rounds`` timed ones.

    OMP_NUM_THREADS=1 python benchmarks/agents.py [--model smollm2-reasoner|tiny] [--rounds 2] [--out DIR]

Status (2026-12-07, `benchmarks/results/agents-cpu-1207-exact`): both frameworks run three forced tool calls and a
final answer against every server, on the SmolLM2 reasoner (the bundled tiny model loops on the newlines SGLang's
tool-call tag admits inside the arguments: it was never trained on tool calls). With exact mode on every server,
NGRAM's and SSR's transcripts equal plain's in both frameworks and every round. The drafting policy forks no
draft on this traffic (its measured cost exceeds the saving: verify steps in exact mode cost about 12 decode rows).
With a tool-call parser SGLang 0.5.23 constrains a forced call by a structural tag whose argument schema is the
tool's parameters only for strict tools (function_call_parser.py: ``schema = function.parameters if is_strict
else {}``; ``{}`` admits any JSON value, a string of the model's own words included, which SGLang itself rejects
on the next turn), hence ``SGLANG_TOOL_STRICT_LEVEL=2``; the tag grammar starts only after ``</think>``, and
under ``--enable-strict-thinking`` reasoning is unbounded unless ``SGLANG_MAX_THINK_TOKENS`` ends it.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import pathlib
import sys
import time
from typing import Literal

import httpx

# run as a script, this file's folder is on sys.path and its name would shadow the Agents SDK (`agents`)
_HERE = pathlib.Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if pathlib.Path(p or ".").resolve() != _HERE]
sys.modules.pop("agents", None) if __name__ == "__main__" else None

ARGS = ("--reasoning-parser", "qwen3", "--tool-call-parser", "qwen", "--enable-strict-thinking",
        "--constrained-json-disable-any-whitespace", "--mem-fraction-static", "0.6")
# SGLang 0.5.23 with a tool-call parser constrains a forced tool call by a structural tag whose arguments follow
# the tool's schema only for strict tools (function_call_parser.py: ``schema = parameters if is_strict else {}``,
# and ``{}`` admits any JSON value, a string included, which SGLang itself rejects on the next turn); strict level 2
# (PARAMETER) makes every tool's parameters the schema. Reasoning under --enable-strict-thinking is unbounded unless
# SGLANG_MAX_THINK_TOKENS ends it, and the tool grammar starts only after </think>.
# SSR_CPU_EXACT_VERIFY, on every server (plain included, as the main job's --exact): in bf16 a verify row batched
# with others may round differently from a decode row, so a near-tie can go the other way (the SmolLM2 reasoner's
# first tool call: count 2 on plain, 10 on NGRAM and SSR). Exact mode changes how the CPU engine computes every
# row, prefills included, so a plain server without it rounds differently from an exact SSR server (run of
# 2026-12-07: the third call's item differed, plain against NGRAM and SSR alike).
SGLANG_ENV = {"SGLANG_TOOL_STRICT_LEVEL": "2", "SGLANG_MAX_THINK_TOKENS": "96", "SSR_CPU_EXACT_VERIFY": "1"}
# The drafting policy is the default (auto); SSR_CONTEXT=1 makes the prompt (earlier turns, tool results) and the
# reasoning suffix sources for every request, and one method switches them off per request (item 4).
SSR_ENV = {**SGLANG_ENV, "SSR_CONTEXT": "1"}
PROMPT = "Stock: 3 plums, 5 apples, 2 pears. Record each item's count with set_stock, then report the stock."
TOOL_TURNS = 3
MAX_TOKENS = 256


class Recorder:
    """Per-turn wall time and meta_info of every chat completion the framework's client makes. Before each
    request the server's radix cache is emptied (not timed), as the main job does: a prompt prefilled on top of
    a cached prefix rounds differently in bf16 from one prefilled whole, so without it a server that served
    other requests before (the SSR server serves NGRAM's too) could flip a near-tie that plain did not."""

    def __init__(self, url: str):
        self.url, self.turns, self._t0 = url, [], {}

    async def on_request(self, request):
        from ssr_sglang.testing.http import flush_cache

        await asyncio.to_thread(flush_cache, self.url)
        self._t0[id(request)] = time.perf_counter()

    async def on_response(self, response):
        await response.aread()
        dt = time.perf_counter() - self._t0.pop(id(response.request), time.perf_counter())
        try:
            meta = response.json()["choices"][0].get("meta_info") or {}
        except Exception:  # noqa: BLE001
            meta = {}
        ssr = meta.get("ssr") or {}
        self.turns.append({"latency_s": round(dt, 3), "completion_tokens": meta.get("completion_tokens"),
                           "ssr": ssr})

    def client(self):
        return httpx.AsyncClient(event_hooks={"request": [self.on_request], "response": [self.on_response]},
                                 timeout=600)


def _extra(custom_params):
    body = {"return_meta_info": True}
    if custom_params is not None:
        body["custom_params"] = custom_params
    return body


async def run_agents_sdk(url: str, custom_params=None) -> dict:
    from agents import (Agent, ModelSettings, OpenAIChatCompletionsModel, RunConfig, Runner, function_tool,
                        set_tracing_disabled)
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    rec, calls = Recorder(url), []
    client = AsyncOpenAI(base_url=url + "/v1", api_key="none", http_client=rec.client())
    holder = {}

    @function_tool
    def set_stock(item: Literal["plum", "apple", "pear", "fig"], count: int) -> str:
        """Set an item's count."""
        calls.append({"name": "set_stock", "arguments": {"item": item, "count": count}})
        if len(calls) >= TOOL_TURNS:  # enough tool turns: the next model turn answers without tools
            a = holder["agent"]
            a.model_settings = dataclasses.replace(a.model_settings, tool_choice="none")
        return f"ok: {item}={count}"

    agent = Agent(name="stock", instructions=None, tools=[set_stock], reset_tool_choice=False,
                  model=OpenAIChatCompletionsModel(model="m", openai_client=client),
                  model_settings=ModelSettings(temperature=0, max_tokens=MAX_TOKENS, tool_choice="required",
                                               parallel_tool_calls=False, extra_body=_extra(custom_params)))
    holder["agent"] = agent
    result = await Runner.run(agent, PROMPT, max_turns=TOOL_TURNS + 2, run_config=RunConfig(tracing_disabled=True))
    return {"calls": calls, "final": result.final_output, "turns": rec.turns}


async def run_langgraph(url: str, custom_params=None) -> dict:
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode

    rec, calls = Recorder(url), []

    @tool
    def set_stock(item: Literal["plum", "apple", "pear", "fig"], count: int) -> str:
        """Set an item's count."""
        calls.append({"name": "set_stock", "arguments": {"item": item, "count": count}})
        return f"ok: {item}={count}"

    llm = ChatOpenAI(model="m", base_url=url + "/v1", api_key="none", temperature=0, max_tokens=MAX_TOKENS,
                     http_async_client=rec.client(), extra_body=_extra(custom_params))
    forced = llm.bind_tools([set_stock], tool_choice="required", parallel_tool_calls=False)

    async def model(state):  # no annotations: this file's postponed ones name a locally imported type
        done = sum(isinstance(m, ToolMessage) for m in state["messages"])
        return {"messages": [await (forced if done < TOOL_TURNS else llm).ainvoke(state["messages"])]}

    def route(state):
        return "tools" if getattr(state["messages"][-1], "tool_calls", None) else END

    g = StateGraph(MessagesState)
    g.add_node("model", model)
    g.add_node("tools", ToolNode([set_stock]))
    g.add_edge(START, "model")
    g.add_conditional_edges("model", route, ["tools", END])
    g.add_edge("tools", "model")
    out = await g.compile().ainvoke({"messages": [HumanMessage(PROMPT)]}, {"recursion_limit": 20})
    return {"calls": calls, "final": out["messages"][-1].content, "turns": rec.turns}


FRAMEWORKS = {"openai-agents": run_agents_sdk, "langgraph": run_langgraph}


def transcript(run: dict) -> dict:
    return {"calls": run["calls"], "final": run["final"]}


def model_and_env(model: str):
    """(model path, extra SSR env) for ``--model``."""
    if model == "tiny":
        from ssr_sglang.models import bundled_model_path

        return bundled_model_path(), {}
    from ssr_sglang.models.smollm2_reasoner.build import SSR_ENV as REASONER_ENV, cached_reasoner

    return str(cached_reasoner()), dict(REASONER_ENV)


METHODS = {"plain": None, "ngram": {"ssr": False}, "ssr": None, "ssr_no_context": {"ssr_context": False}}


def _round(url: str, custom_params) -> dict:
    return {f: asyncio.run(fn(url, custom_params)) for f, fn in FRAMEWORKS.items()}


def run_all(start_server, model: str = "smollm2-reasoner", rounds: int = 2) -> dict:
    """{method: {framework: [run per round]}}; ``start_server(path, *args, env=, name=)`` is a context manager.
    Each server first serves one untimed round (warm-up; on SSR it also gives the policy its history); on the
    SSR server the methods' order rotates from round to round."""
    path, extra = model_and_env(model)
    out = {m: {f: [] for f in FRAMEWORKS} for m in METHODS}

    def timed(url, methods):
        for r in range(rounds):
            for m in methods[r % len(methods):] + methods[:r % len(methods)]:
                for f, run in _round(url, METHODS[m]).items():
                    out[m][f].append(run)

    with start_server(path, *ARGS, env=SGLANG_ENV, name="agents-plain") as s:
        _round(s.url, None)
        timed(s.url, ["plain"])
    with start_server(path, *ARGS, "--speculative-algorithm", "SSR", env={**SSR_ENV, **extra}, name="agents-ssr") as s:
        _round(s.url, None)
        timed(s.url, ["ssr", "ngram", "ssr_no_context"])
    return out


def _start(path, *args, env=None, name="server"):
    from ssr_sglang.testing.server import Server, cpu_server_args

    return Server(cpu_server_args(path, *args), env=env)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/agents-cpu")
    ap.add_argument("--model", default="smollm2-reasoner", choices=["smollm2-reasoner", "tiny"],
                    help="smollm2-reasoner (built by `python -m ssr_sglang.models.smollm2_reasoner build`); tiny: the "
                         "bundled tiny reasoner, which loops on the whitespace SGLang's tool-call tag admits")
    ap.add_argument("--rounds", type=int, default=2, help="timed rounds per method (after one warm-up round)")
    a = ap.parse_args()
    res = run_all(_start, a.model, a.rounds)
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(res, indent=1, default=str))
    lines = ["# Agent frameworks on CPU: per-turn latency, plain / NGRAM / SSR\n",
             f"Command: `OMP_NUM_THREADS=1 .venv/bin/python benchmarks/agents.py --model {a.model} --out {a.out}`\n",
             f"Model {a.model}, `{' '.join(ARGS)}`, temperature 0, SGLang env {SGLANG_ENV}; SSR env {SSR_ENV}; "
             "NGRAM = the SSR server with `ssr: false`, SSR without context = `ssr_context: false` (issue 38 item 4). "
             "Accepted = answer tokens accepted from aligned drafts (prefix) / suffix matches in drafts / in the "
             "prompt and reasoning (context).\n"]
    methods = tuple(METHODS)
    mean = lambda xs: sum(xs) / len(xs) if xs else None
    for f in FRAMEWORKS:
        first = transcript(res["plain"][f][0])
        same = {m: sum(transcript(run) == first for run in res[m][f]) for m in methods}
        lines += [f"\n## {f}\n", "Runs whose transcript (tool calls and their arguments, final answer) equals plain's "
                  "first: " + ", ".join(f"{m} {same[m]}/{len(res[m][f])}" for m in methods) + "\n",
                  "Mean over rounds, seconds per turn:\n",
                  "| turn | plain s | NGRAM s | SSR s | SSR no-context s | tokens | reasoning | SSR drafts | "
                  "SSR accepted prefix/suffix/context | no-context accepted |", "|---|" + "---|" * 9]
        total = dict.fromkeys(methods, 0.0)
        for i, t in enumerate(res["plain"][f][0]["turns"]):
            lat = {m: mean([run["turns"][i]["latency_s"] for run in res[m][f] if i < len(run["turns"])]) for m in methods}
            for m in methods:
                total[m] += lat[m] or 0.0
            sr, nc = (res[m][f][0]["turns"][i]["ssr"] if i < len(res[m][f][0]["turns"]) else {}
                      for m in ("ssr", "ssr_no_context"))
            acc = lambda c: (f"{c.get('accepted_prefix')}/{c.get('accepted_suffix', 0) - c.get('accepted_suffix_context', 0)}"
                             f"/{c.get('accepted_suffix_context')}")
            lines.append(f"| {i + 1} | " + " | ".join(f"{lat[m]:.3f}" if lat[m] is not None else "-" for m in methods) +
                         f" | {t['completion_tokens']} | {sr.get('reasoning_tokens')} | {sr.get('drafts_started')} | "
                         f"{acc(sr)} | {acc(nc)} |")
        lines.append("| all | " + " | ".join(f"{total[m]:.3f}" for m in methods) + " | | | | | |")
        lines.append(f"\nEnd to end, all turns: SSR {total['plain'] / max(total['ssr'], 1e-9):.2f}x plain, "
                     f"{total['ngram'] / max(total['ssr'], 1e-9):.2f}x NGRAM; the prompt and reasoning as sources "
                     f"(context on) {total['ssr_no_context'] / max(total['ssr'], 1e-9):.2f}x context off. Drafts and "
                     "accepted tokens from the first round.\n")
        lines.append(f"Transcript (plain, first round): `{json.dumps(first)}`\n")
    (out / "results.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
