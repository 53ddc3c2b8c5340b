"""Agent-framework example: the OpenAI Python client against an SSR server, streaming.

Any framework that talks to an OpenAI-compatible endpoint works the same way; SSR runs inside the
server, so the client changes nothing but, optionally, per-request SSR knobs in ``extra_body``.
Start the server with the SSR algorithm **and a reasoning parser**, so the reasoning and the answer
arrive separated (``delta.reasoning_content`` vs ``delta.content``)::

    python -m sglang.launch_server --model-path ssr_sglang/models/tiny-reasoner \\
        --speculative-algorithm SSR --speculative-num-draft-tokens 8 --reasoning-parser qwen3 --port 30000
    # (on CPU add: --device cpu, see ssr_sglang/testing/server.py for the full argument list)
    python programs/agent_openai.py --url http://127.0.0.1:30000 --task-seed 3

``qwen3`` is right for the bundled tiny model: its markers are ``<think>`` / ``</think>``
(``ssr_sglang/models/tasks.py``), and its chat template opens the think block in the prompt, which
the parser handles (text before ``</think>`` is reasoning).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Iterable, Optional


def stream_chat(base_url: str, messages: list, max_tokens: int = 512, custom_params: Optional[dict] = None,
                on_reasoning=None, on_content=None, temperature: float = 0.0) -> dict:
    """One streamed chat turn; returns ``reasoning``, ``content``, ``chunks`` and timing.

    ``custom_params``: SSR per-request knobs (``ssr_checkpoints``, ``ssr_every``, ... see
    ``ssr_sglang/srt/config.py``); ``on_reasoning`` / ``on_content``: callbacks per text delta.
    """
    from openai import OpenAI

    client = OpenAI(base_url=base_url.rstrip("/") + "/v1", api_key="none")
    model = client.models.list().data[0].id
    extra = {"separate_reasoning": True}
    if custom_params:
        extra["custom_params"] = custom_params
    t0 = time.time()
    first_content = None
    reasoning, content, chunks, finish = [], [], 0, None
    stream = client.chat.completions.create(model=model, messages=messages, stream=True, max_tokens=max_tokens,
                                            temperature=temperature, extra_body=extra)
    for chunk in stream:
        if not chunk.choices:
            continue
        chunks += 1
        choice = chunk.choices[0]
        delta = choice.delta
        r = getattr(delta, "reasoning_content", None)
        if r:
            reasoning.append(r)
            if on_reasoning:
                on_reasoning(r)
        if delta.content:
            if first_content is None:
                first_content = time.time() - t0
            content.append(delta.content)
            if on_content:
                on_content(delta.content)
        if choice.finish_reason:
            finish = choice.finish_reason
    return {"reasoning": "".join(reasoning), "content": "".join(content), "chunks": chunks,
            "finish_reason": finish, "seconds": time.time() - t0, "first_content_s": first_content}


def agent_turns(base_url: str, user_turns: Iterable[str], **kw) -> list:
    """A minimal agent loop: each answer (not its reasoning) goes back into the conversation."""
    messages, results = [], []
    for text in user_turns:
        messages.append({"role": "user", "content": text})
        res = stream_chat(base_url, messages, **kw)
        messages.append({"role": "assistant", "content": res["content"]})
        results.append(res)
    return results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:30000")
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--prompt")
    src.add_argument("--task-seed", type=int, default=3, help="a task of the bundled tiny model (default 3)")
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--checkpoints", default=None, help="per-request ssr_checkpoints, e.g. 40,80")
    args = ap.parse_args(argv)
    if args.prompt is None:
        import random

        try:
            from ssr_sglang.models.tasks import make_example
        except ImportError:
            from pathlib import Path

            sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
            from ssr_sglang.models.tasks import make_example
        args.prompt = str(make_example(random.Random(args.task_seed))["prompt"])
    cp = {"ssr_checkpoints": [int(x) for x in args.checkpoints.split(",")]} if args.checkpoints else None
    state = {"phase": None}

    def show(phase):
        def emit(text):
            if state["phase"] != phase:
                print(f"\n--- {phase} ---", flush=True)
                state["phase"] = phase
            print(text, end="", flush=True)
        return emit

    res = stream_chat(args.url, [{"role": "user", "content": args.prompt}], max_tokens=args.max_tokens,
                      custom_params=cp, on_reasoning=show("reasoning"), on_content=show("answer"))
    print(f"\n--- {res['chunks']} chunks, finish {res['finish_reason']}, {res['seconds']:.2f} s ---")
    return 0


if __name__ == "__main__":
    sys.exit(main())
