"""HTTP helpers for an SGLang server, and client-side speculative verification with SSR drafts.

:func:`speculative_generate` is what an SSR program does on a *stock* server (no
``--speculative-algorithm SSR``): the draft answers go into the core's
:class:`~ssr_sglang.core.proposer.DraftProposer` (prefix verification + suffix index), and every
step is **one prefill request** over ``prefix + answer so far + proposed tokens`` with
``return_logprob``, ``logprob_start_len``, ``top_logprobs_num=1`` and ``max_new_tokens=1``.
Input logprobs come from the raw logits, so each position's top-1 token is the greedy token there:
the longest run of proposed tokens equal to those top-1 tokens is accepted, plus one bonus token
(the top-1 at the first mismatch, or the generated token when everything matched).  The result is
greedy decoding, token for token, as far as prefill and decode numerics agree (see
``programs/README.md``).
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Dict, Iterable, List, Optional, Sequence

import requests

from ssr_sglang.core.proposer import DraftProposer, ProposerConfig

__all__ = ["ServerClient", "VerifyStats", "speculative_generate"]

RETRIES = 2  # resends of a request whose connection failed (see ServerClient._send)


class ServerClient:
    """A thin client for the native endpoints a program needs (``/generate``, ``/tokenize``, ...)."""

    def __init__(self, base_url: str, api_key: Optional[str] = None, timeout: float = 600.0):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.session = requests.Session()
        if api_key:
            self.session.headers["Authorization"] = f"Bearer {api_key}"
        self._lock = threading.Lock()
        self._server_info: Optional[dict] = None
        self._model_info: Optional[dict] = None
        self.max_model_len: Optional[int] = None  # context length, learned from /tokenize

    def _send(self, method: str, path: str, **kw) -> requests.Response:
        """One request, sent again (``RETRIES`` times at most) on a fresh connection when it failed to connect
        or its connection was closed under it (a pooled keep-alive connection the server dropped while idle:
        the request never reached it). A timeout or an HTTP error status is not retried."""
        url = self.base_url + path
        for _ in range(RETRIES):
            try:
                return self.session.request(method, url, timeout=self.timeout, **kw)
            except requests.exceptions.ConnectionError:
                pass
        return self.session.request(method, url, timeout=self.timeout, **kw)

    def _post(self, path: str, body: dict) -> dict:
        r = self._send("POST", path, json=body)
        if r.status_code != 200:
            raise RuntimeError(f"{path} failed with HTTP {r.status_code}: {r.text[:2000]}")
        return r.json()

    def _get(self, path: str) -> dict:
        r = self._send("GET", path)
        r.raise_for_status()
        return r.json()

    # -- server facts ----------------------------------------------------------
    def server_info(self) -> dict:
        if self._server_info is None:
            self._server_info = self._get("/server_info")
        return self._server_info

    def model_info(self) -> dict:
        if self._model_info is None:
            self._model_info = self._get("/get_model_info")
        return self._model_info

    def is_ssr_server(self) -> bool:
        return str(self.server_info().get("speculative_algorithm") or "").upper() == "SSR"

    # -- tokenizer (the server's own) -----------------------------------------
    def tokenize(self, text: str, add_special_tokens: bool = False) -> List[int]:
        res = self._post("/tokenize", {"prompt": text, "add_special_tokens": add_special_tokens})
        self._note_len(res)
        return list(res["tokens"])

    def _note_len(self, res: dict) -> None:
        n = res.get("max_model_len")
        if isinstance(n, int) and n > 0:
            self.max_model_len = n

    def context_length(self) -> Optional[int]:
        if self.max_model_len is None:
            self.tokenize("a")
        return self.max_model_len

    def tokenize_chat(self, messages: List[dict]) -> List[int]:
        """Token ids of ``messages`` under the server's chat template, with the generation prompt."""
        res = self._post("/tokenize", {"messages": messages, "add_generation_prompt": True})
        self._note_len(res)
        return list(res["tokens"])

    def detokenize(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return self._post("/detokenize", {"tokens": list(ids), "skip_special_tokens": skip_special_tokens})["text"]

    # -- generation ------------------------------------------------------------
    def generate(self, input_ids: Sequence[int], sampling_params: dict, **extra) -> dict:
        return self._post("/generate", {"input_ids": list(input_ids), "sampling_params": sampling_params, **extra})


@dataclasses.dataclass
class VerifyStats:
    """What client-side verification did for one answer (mirrors the server's ``meta_info["ssr"]``)."""

    steps: int = 0  # verify requests (one prefill each)
    proposed: int = 0
    accepted_prefix: int = 0
    accepted_suffix: int = 0
    output_tokens: int = 0
    prompt_tokens: int = 0  # summed over the verify requests
    cached_tokens: int = 0  # of which served from the radix cache
    first_prompt_tokens: int = 0  # the first request alone: how much of the prefix was cached
    first_cached_tokens: int = 0

    @property
    def accepted(self) -> int:
        return self.accepted_prefix + self.accepted_suffix

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["accepted"] = self.accepted
        d["accept_length"] = round(self.output_tokens / self.steps, 4) if self.steps else None
        return d


def _top1(entry) -> Optional[int]:
    """Token id of a ``input_top_logprobs`` entry: ``[[logprob, token_id, text], ...]`` or None."""
    if not entry:
        return None
    first = entry[0]
    return int(first[1]) if first is not None else None


def speculative_generate(
    client: ServerClient,
    prefix_ids: Sequence[int],
    drafts: Iterable[Sequence[int]],
    max_new_tokens: int,
    eos_ids: Iterable[int] = (),
    num_tokens: int = 8,
    references: Iterable[Sequence[int]] = (),
    use_prefix: bool = True,
    use_suffix: bool = True,
    extra_sampling: Optional[Dict] = None,
) -> tuple:
    """Greedy continuation of ``prefix_ids`` (at most ``max_new_tokens`` tokens, EOS included as plain
    decoding returns it), verified on the server one prefill per step with proposals from ``drafts``.

    ``drafts``: candidate continuations of ``prefix_ids`` (token ids), e.g. SSR draft answers;
    ``references``: extra suffix-only sources (the prompt, the reasoning); ``num_tokens``: proposal
    length per step.  Returns ``(output_ids, VerifyStats)``.
    """
    if not prefix_ids:
        raise ValueError("prefix_ids must not be empty")
    eos = {int(t) for t in eos_ids}
    prop = DraftProposer(ProposerConfig(max_tokens=max(1, num_tokens), use_prefix=use_prefix, use_suffix=use_suffix))
    for d in drafts:
        if len(d):
            prop.add_draft(list(d))
    for r in references:
        if len(r):
            prop.add_reference(list(r))
    prefix = list(prefix_ids)
    out: List[int] = []
    st = VerifyStats()
    sp = {"max_new_tokens": 1, "temperature": 0.0, **(extra_sampling or {})}
    while len(out) < max_new_tokens:
        room = max_new_tokens - len(out) - 1  # the bonus token always comes
        toks = list(prop.propose(out, max_tokens=room).tokens) if room > 0 else []
        start = len(prefix) + len(out) - 1  # entry 0 (this position) has no logprob; entry 1+j scores toks[j]
        res = client.generate(prefix + out + toks, sp, return_logprob=True, logprob_start_len=start,
                              top_logprobs_num=1)
        meta = res["meta_info"]
        tops = [_top1(e) for e in meta["input_top_logprobs"][1:]]
        if len(tops) != len(toks):
            raise RuntimeError(f"expected {len(toks)} input top-1 tokens, got {len(tops)}")
        j = 0
        while j < len(toks) and tops[j] == toks[j]:
            j += 1
        bonus = int(res["output_ids"][0]) if j == len(toks) else tops[j]
        prop.record(j)
        new = toks[:j] + [bonus]
        if st.steps == 0:
            st.first_prompt_tokens = int(meta.get("prompt_tokens", 0))
            st.first_cached_tokens = int(meta.get("cached_tokens", 0))
        st.steps += 1
        st.proposed += len(toks)
        st.prompt_tokens += int(meta.get("prompt_tokens", 0))
        st.cached_tokens += int(meta.get("cached_tokens", 0))
        fin = meta.get("finish_reason") or {}
        if j == len(toks) and isinstance(fin.get("matched"), int):
            eos.add(int(fin["matched"]))  # the server said the bonus token was a stop token
        stop_at = next((i for i, t in enumerate(new) if t in eos), -1)
        if stop_at >= 0:
            new = new[: stop_at + 1]
        out.extend(new)
        if stop_at >= 0:
            break
    st.accepted_prefix = prop.stats.accepted_prefix
    st.accepted_suffix = prop.stats.accepted_suffix
    st.output_tokens = len(out)
    return out, st
