"""Trace simulator: replay proposer + greedy verification offline.

Given the answer a greedy target model produced and the drafts it had, the
simulator performs exactly the per-step decisions of the engine: propose
from the answer so far, lay out a chain/tree, verify greedily against a
"target" that predicts the true answer, commit accepted tokens + bonus,
feed back the accepted count.  Output must equal ``answer`` token for token;
the step count measures the speedup that SSR would give on that trace
(proposal quality only: no timing model).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

import numpy as np

from .proposer import ANSWER_ID, DraftProposer, ProposerConfig
from .tree import build_chain, layout_tree
from .verify import verify_greedy

__all__ = ["SimReport", "simulate"]

END = -1  # target prediction past the end of the answer (never proposed)


@dataclass
class SimReport:
    output: List[int]
    steps: int
    plain_steps: int
    accepted_prefix: int
    accepted_suffix: int
    per_draft: Dict[int, int] = field(default_factory=dict)
    max_step_tokens: int = 0
    # Padding nodes (token 0 under the root) that matched by chance: a real
    # tree verifier accepts them too; counted apart from draft tokens.
    accepted_padding: int = 0

    @property
    def accepted(self) -> int:
        return self.accepted_prefix + self.accepted_suffix

    @property
    def mean_accept_len(self) -> float:
        """Tokens committed per verify step (1.0 = plain decoding)."""
        return self.plain_steps / self.steps if self.steps else 0.0

    @property
    def speedup_steps(self) -> float:
        return self.mean_accept_len

    def as_dict(self) -> dict:
        return {
            "steps": self.steps,
            "plain_steps": self.plain_steps,
            "accepted_prefix": self.accepted_prefix,
            "accepted_suffix": self.accepted_suffix,
            "accepted_padding": self.accepted_padding,
            "mean_accept_len": self.mean_accept_len,
            "per_draft": dict(self.per_draft),
        }


def _target_argmax(answer: Sequence[int], pos: int, tokens, parents) -> np.ndarray:
    """Argmax of an oracle target: the true next token on the true path.

    Nodes off the true path get END (their prediction is irrelevant: no
    child of theirs can be accepted).  Padding nodes are real tree nodes
    for the engine too (token 0 after the root), so they are treated alike.
    """
    n = len(tokens)
    out = np.full(n, END, dtype=np.int64)
    on_path = [False] * n
    depth = [0] * n
    on_path[0] = True
    for i in range(n):
        if i:
            p = int(parents[i])
            d = depth[i] = depth[p] + 1
            on_path[i] = on_path[p] and pos + d - 1 < len(answer) and int(tokens[i]) == answer[pos + d - 1]
        if on_path[i] and pos + depth[i] < len(answer):
            out[i] = answer[pos + depth[i]]
    return out


def simulate(
    answer: Sequence[int],
    drafts: Sequence[Sequence[int]],
    config: Optional[ProposerConfig] = None,
    num_nodes: int = 8,
    tree: bool = False,
    references: Sequence[Sequence[int]] = (),
    arrivals: Optional[Sequence[int]] = None,
    last_token: int = 0,
) -> SimReport:
    """Replay SSR decoding of ``answer`` with ``drafts``.

    ``num_nodes`` counts the verified nodes including the last committed
    token (so at most ``num_nodes - 1`` tokens are proposed per step).
    ``references`` are suffix-only sources (prompt, reasoning).
    ``arrivals[i]`` is the answer length at which draft ``i`` becomes
    available (default 0: all drafts exist before the answer starts).
    ``last_token`` is the committed token preceding the answer.
    """
    answer = [int(t) for t in answer]
    if num_nodes < 1:
        raise ValueError(f"num_nodes must be >= 1, got {num_nodes}")
    prop = DraftProposer(config)
    for ref in references:
        prop.add_reference(ref)
    arrivals = [0] * len(drafts) if arrivals is None else list(arrivals)
    if len(arrivals) != len(drafts):
        raise ValueError("arrivals must have one entry per draft")
    pending = sorted(range(len(drafts)), key=lambda i: arrivals[i])
    draft_ids: Dict[int, int] = {}  # proposer source id -> index in drafts
    out: List[int] = []
    steps = 0
    max_step = 0
    padding = 0
    while len(out) < len(answer):
        while pending and arrivals[pending[0]] <= len(out):
            i = pending.pop(0)
            draft_ids[prop.add_draft(drafts[i])] = i
        root = out[-1] if out else last_token
        if tree:
            branches = prop.propose_tree(out, num_nodes - 1)
            t = layout_tree(root, [b.tokens for b in branches], num_nodes)
            tokens, parents, num_real = t.tokens, t.parents, t.num_real
        else:
            p = prop.propose(out, num_nodes - 1)
            tokens, _, parents = build_chain(root, p.tokens, num_nodes)
            num_real = min(len(p.tokens), num_nodes - 1) + 1
        argmax = _target_argmax(answer, len(out), tokens, parents)
        path, bonus = verify_greedy(tokens, parents, argmax)
        new = [int(tokens[i]) for i in path[1:]]
        if bonus != END:
            new.append(bonus)
        out.extend(new)
        steps += 1
        max_step = max(max_step, len(new))
        last = path[-1]
        if last >= num_real:  # a padding node (token 0) happened to match
            padding += len(path) - 1
            prop.record(0)
        else:
            prop.record(len(path) - 1, int(t.labels[last]) if tree and last else 0)
    st = prop.stats
    # Keys: index into ``drafts``; references count under -1 - ref_index, the answer itself under "answer".
    per_draft = {("answer" if sid == ANSWER_ID else draft_ids.get(sid, -1 - sid)): n
                 for sid, n in st.per_draft.items()}
    return SimReport(out, steps, len(answer), st.accepted_prefix, st.accepted_suffix, per_draft, max_step, padding)
