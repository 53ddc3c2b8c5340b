"""``SSREndpoint``: a token-exact SGLang ``RuntimeEndpoint`` that hands SSR drafts to each request.

The stock :class:`sglang.lang.backend.runtime_endpoint.RuntimeEndpoint` sends the program's text
(``s.text_``), so the server re-tokenizes everything generated so far at every ``sgl.gen``, and a
greedy program that generates in segments may drift from one-shot greedy decoding.  This backend
sends ``input_ids`` instead: it remembers the exact ids behind every text it produced (prompt ids
+ ``output_ids``) and tokenizes only the text appended since (with the server's tokenizer,
``/tokenize``); so ``prompt + reasoning segment 1 + segment 2 ...`` is the same token sequence
one-shot decoding would see, and a forked draft's ``force_answer`` text is tokenized on its own,
like the SSR server and the bundled model's training data build it.

Per-``sgl.gen`` SSR input goes through :func:`ssr_gen`:

* on an SSR server (``--speculative-algorithm SSR``) the drafts become ``custom_params``
  ``ssr_draft_0``, ``ssr_draft_1``, ... (token ids) and the server's verifier uses them; the
  response's ``meta_info["ssr"]`` says how (``accepted_prefix``, ``accepted_suffix``, ...);
* on a stock server the answer is verified on the client
  (:func:`ssr_sglang.frontend.client.speculative_generate`), and ``meta_info["client_verify"]``
  holds the counters.

Requests without drafts on an SSR server get ``ssr_checkpoints: [2**24]`` (no server-side forks:
the program forks its own drafts) unless ``server_forks=True``.

Generation is always returned with ``skip_special_tokens=False`` and ``no_stop_trim=True`` so the
text is what the ids say (a ``</think>`` stop stays in the text); a final EOS token is dropped from
the text (and from the ids remembered for it) but kept in ``meta_info["output_ids"]``.
``max_new_tokens`` is clamped to the context length left (``/tokenize``'s ``max_model_len``).
"""

from __future__ import annotations

import collections
import json
import threading
import time
from pathlib import Path
from typing import List, Optional, Sequence

from sglang.lang.backend.runtime_endpoint import RuntimeEndpoint
from sglang.lang.global_config import global_config

from ssr_sglang.core.budgets import MAX_REASONING_TOKENS
from ssr_sglang.core.think_markers import ThinkMarkers, markers_for

from .client import ServerClient, speculative_generate

__all__ = ["SSREndpoint", "ssr_gen", "SSR_REQUEST_VAR", "NO_SERVER_FORKS"]

SSR_REQUEST_VAR = "__ssr_request__"
NO_SERVER_FORKS = MAX_REASONING_TOKENS  # a checkpoint no request reaches
_QWEN = markers_for("qwen3")
_LOGPROB_ITEMS = ("return_logprob", "logprob_start_len", "top_logprobs_num", "return_text_in_logprobs")


def ssr_gen(s, name: str, drafts: Sequence[Sequence[int]] = (), references: Sequence[Sequence[int]] = (),
            custom_params: Optional[dict] = None, **gen_kwargs):
    """``s += sgl.gen(name, **gen_kwargs)`` with SSR draft answers (token ids) for that request.

    Drafts continue the answer from where a forced think end leaves it (``force_answer``, e.g.
    ``"\\n</think>\\n\\n"``); when the prompt ends with the model's own think end instead, the
    backend prepends the rest of ``force_answer`` itself.  ``references``: suffix-only sources
    for client-side verification; ``custom_params``: more per-request keys for the server.
    Waits for ``s``'s queued work first (the request data is handed over in a state variable).
    """
    import sglang as sgl

    s.sync()
    s.set_var(SSR_REQUEST_VAR, {"drafts": [list(d) for d in drafts], "references": [list(r) for r in references],
                                "custom_params": dict(custom_params or {})})
    s += sgl.gen(name, **gen_kwargs)
    return s


class SSREndpoint(RuntimeEndpoint):
    """``RuntimeEndpoint`` that sends token ids and SSR drafts; see the module docstring.

    ``mode``: ``"auto"`` (server-side verification on an SSR server, client-side otherwise),
    ``"server"`` or ``"client"``.  ``num_tokens``: client-side proposal length (default: the
    server's ``--speculative-num-draft-tokens`` minus one, else 7).  ``eos_ids``: stop tokens for
    client-side verification (default: the model's ``eos_token_id`` when its files are readable
    here, plus every EOS a response reported).  ``markers``: think markers (default: by the
    served model type, Qwen3-style when unknown).
    """

    def __init__(self, base_url: str, api_key: Optional[str] = None, verify: Optional[str] = None,
                 chat_template_name: Optional[str] = "default", mode: str = "auto",
                 num_tokens: Optional[int] = None, eos_ids: Optional[Sequence[int]] = None,
                 markers: Optional[ThinkMarkers] = None, server_forks: bool = False, max_known: int = 4096):
        super().__init__(base_url, api_key=api_key, verify=verify, chat_template_name=chat_template_name)
        if mode not in ("auto", "server", "client"):
            raise ValueError(f"mode must be 'auto', 'server' or 'client', got {mode!r}")
        self.client = ServerClient(base_url, api_key=api_key)
        self.ssr_server = self.client.is_ssr_server()
        self.mode = ("server" if self.ssr_server else "client") if mode == "auto" else mode
        if num_tokens is None:
            n = self.client.server_info().get("speculative_num_draft_tokens")
            num_tokens = max(1, int(n) - 1) if n else 7
        self.num_tokens = int(num_tokens)
        self.server_forks = server_forks
        model_type = str(self.model_info.get("model_type") or self.model_info.get("model_path") or "")
        self.markers = markers or markers_for(model_type, default=_QWEN)
        self._explicit_eos = None if eos_ids is None else {int(t) for t in eos_ids}
        self._learned_eos: set = set()
        self._known: "collections.OrderedDict[str, List[int]]" = collections.OrderedDict()
        self._max_known = max_known
        self._lock = threading.Lock()
        self._token_text: dict = {}
        self._force_ids: Optional[List[int]] = None
        self._end_ids: Optional[List[int]] = None

    # -- token bookkeeping -----------------------------------------------------
    def remember(self, text: str, ids: Sequence[int]) -> None:
        with self._lock:
            self._known[text] = list(ids)
            self._known.move_to_end(text)
            while len(self._known) > self._max_known:
                self._known.popitem(last=False)

    def ids_for(self, text: str) -> List[int]:
        """Token ids of ``text``: known ids of its longest remembered prefix + the rest tokenized alone."""
        with self._lock:
            ids = self._known.get(text)
            best = None
            if ids is None:
                for k in self._known:
                    if (best is None or len(k) > len(best)) and text.startswith(k):
                        best = k
                base = list(self._known[best]) if best is not None else None
        if ids is not None:
            return list(ids)
        if best is None:
            ids = self.client.tokenize(text, add_special_tokens=True)  # as /generate would for this text
        else:
            ids = base + (self.client.tokenize(text[len(best):]) if len(text) > len(best) else [])
        self.remember(text, ids)
        return ids

    def tokenize(self, text: str) -> List[int]:
        return self.client.tokenize(text)

    def chat_prompt(self, messages: List[dict]) -> str:
        """The server's chat template applied to ``messages`` (generation prompt included), as text
        whose exact token ids this backend remembers."""
        ids = self.client.tokenize_chat(messages)
        text = self.client.detokenize(ids)
        self.remember(text, ids)
        return text

    def token_text(self, tok: int) -> str:
        if tok not in self._token_text:
            self._token_text[tok] = self.client.detokenize([tok])
        return self._token_text[tok]

    @property
    def end_ids(self) -> List[int]:
        if self._end_ids is None:
            self._end_ids = self.client.tokenize(self.markers.end)
        return self._end_ids

    @property
    def force_ids(self) -> List[int]:
        if self._force_ids is None:
            self._force_ids = self.client.tokenize(self.markers.force_answer)
        return self._force_ids

    @property
    def force_tail_ids(self) -> List[int]:
        """The part of ``force_answer`` after the think end (what starts every draft answer)."""
        f, e = self.force_ids, self.end_ids
        for i in range(len(f) - len(e), -1, -1):
            if f[i:i + len(e)] == e:
                return f[i + len(e):]
        return []

    def as_continuation(self, prompt_ids: Sequence[int], draft: Sequence[int]) -> List[int]:
        """A draft answer as a continuation of ``prompt_ids`` (see :func:`ssr_gen`)."""
        f, e = self.force_ids, self.end_ids
        n = len(prompt_ids)
        if f and n >= len(f) and list(prompt_ids[n - len(f):]) == f:
            return list(draft)
        if e and n >= len(e) and list(prompt_ids[n - len(e):]) == e:
            return self.force_tail_ids + list(draft)
        return list(draft)

    def eos_ids(self) -> set:
        if self._explicit_eos is not None:
            return set(self._explicit_eos)
        out = set(self._learned_eos)
        path = Path(str(self.model_info.get("model_path", "")))
        for name in ("generation_config.json", "config.json"):
            try:
                v = json.loads((path / name).read_text()).get("eos_token_id")
            except (OSError, ValueError):
                continue
            if v is not None:
                out.update(v if isinstance(v, list) else [v])
        return out

    # -- generation ------------------------------------------------------------
    def generate(self, s, sampling_params):
        sp = sampling_params
        self._handle_dtype_to_regex(sp)
        req = s.variables.pop(SSR_REQUEST_VAR, None) or {}
        prompt_ids = self.ids_for(s.text_)
        params = {
            "skip_special_tokens": False,
            "spaces_between_special_tokens": global_config.spaces_between_special_tokens_in_out,
            **sp.to_srt_kwargs(),
            "no_stop_trim": True,
        }
        extra = {k: getattr(sp, k) for k in _LOGPROB_ITEMS if getattr(sp, k, None) is not None}
        drafts = [self.as_continuation(prompt_ids, d) for d in req.get("drafts", ()) if len(d)]
        custom = dict(req.get("custom_params") or {})
        ctx = self.client.context_length()
        if ctx and sp.max_new_tokens is not None and len(prompt_ids) + sp.max_new_tokens > ctx:
            # Plain decoding cannot go past the context either: clamp instead of a 400.
            sp.max_new_tokens = params["max_new_tokens"] = max(0, ctx - len(prompt_ids))
        greedy = sp.temperature <= 1e-5 or sp.top_k == 1
        t0 = time.time()
        if drafts and self.mode == "client" and greedy and not extra:
            obj = self._client_verified(prompt_ids, drafts, req.get("references", ()), sp)
        else:
            if self.ssr_server:
                if drafts:
                    custom.setdefault("ssr", True)
                    custom.update({f"ssr_draft_{i}": d for i, d in enumerate(drafts)})
                elif not self.server_forks:
                    custom.setdefault("ssr_checkpoints", [NO_SERVER_FORKS])
            if custom:
                params["custom_params"] = custom
            obj = self.client.generate(prompt_ids, params, **extra)
        out_ids = list(obj["output_ids"])
        text = obj["text"]
        meta = dict(obj["meta_info"])
        keep = out_ids
        if out_ids and self._ends_with_eos(meta.get("finish_reason"), sp, out_ids[-1]):
            eos_text = self.token_text(out_ids[-1])
            if eos_text and text.endswith(eos_text):
                text = text[: -len(eos_text)]
                keep = out_ids[:-1]
        self.remember(s.text_ + text, prompt_ids + keep)
        meta["output_ids"] = out_ids
        meta["prompt_ids"] = prompt_ids
        meta["client_t0"], meta["client_t1"] = t0, time.time()  # when the request(s) were in flight
        if drafts:
            meta["drafts_sent"] = [len(d) for d in drafts]
        return text, meta

    def generate_stream(self, s, sampling_params):
        # Token-exact bookkeeping needs the final ids: one chunk, at the end.
        yield self.generate(s, sampling_params)

    def _ends_with_eos(self, finish, sp, last_id: int) -> bool:
        if not isinstance(finish, dict) or finish.get("type") != "stop":
            return False
        matched = finish.get("matched")
        if isinstance(matched, int) and not isinstance(matched, bool):
            if matched in set(sp.stop_token_ids or ()):
                return False  # a stop the program asked for: keep it
            self._learned_eos.add(matched)
            return matched == last_id
        # A stop string the chat template added (``<|im_end|>``-like) ends the turn like EOS.
        return isinstance(matched, str) and matched in (self.chat_template.stop_str or ())

    def _client_verified(self, prompt_ids, drafts, references, sp) -> dict:
        eos = self.eos_ids() | {int(t) for t in (sp.stop_token_ids or ())}
        out, st = speculative_generate(self.client, prompt_ids, drafts, sp.max_new_tokens, eos_ids=eos,
                                       num_tokens=self.num_tokens, references=references)
        if out and out[-1] in eos:
            finish = {"type": "stop", "matched": out[-1]}
        else:
            finish = {"type": "length", "length": len(out)}
        return {
            "text": self.client.detokenize(out),
            "output_ids": out,
            "meta_info": {"finish_reason": finish, "prompt_tokens": len(prompt_ids), "completion_tokens": len(out),
                          "cached_tokens": st.cached_tokens, "client_verify": st.as_dict()},
        }
