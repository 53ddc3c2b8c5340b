"""Engine-free core of SSR (Self-Speculation for Reasoning models).

Pure Python + NumPy; no torch / sglang imports, so everything here runs
and is tested without a GPU.

* :mod:`.suffix_index` -- ``SuffixIndex``: incremental suffix automata over
  growing token sources; longest-suffix match of a context with the tokens
  that follow (``Match``), incremental ``MatchCursor``.
* :mod:`.proposer` -- ``DraftProposer`` (one per request): prefix
  verification against aligned drafts + suffix decoding over all drafts;
  ``propose`` (chain) / ``propose_tree`` (branches) / ``record`` feedback;
  ``ProposerConfig``, ``Proposal`` (= ``Branch``), ``ProposerStats``.
* :mod:`.tree` -- ``build_tree`` / ``build_chain`` / ``layout_tree``:
  BFS token tree + ancestor mask in SGLang NGRAM verify format.
* :mod:`.verify` -- reference ``verify_greedy`` / ``verify_stochastic``.
* :mod:`.budgets` -- ``BudgetSchedule`` (when to fork drafts),
  ``seed_from_previous`` (iterative SSR).
* :mod:`.think_markers` -- ``ThinkMarkers`` per model family,
  ``markers_for``, ``custom``, streaming ``ThinkEndMatcher``.
* :mod:`.simulator` -- ``simulate``: offline replay of proposer + greedy
  verification on a trace -> ``SimReport``.

Typical engine loop for one request in its answer phase::

    prop = DraftProposer(ProposerConfig(max_tokens=num_nodes - 1))
    prop.add_draft(draft_answer_ids)             # at each checkpoint
    ...
    branches = prop.propose_tree(answer_ids, num_nodes - 1)
    tree = layout_tree(last_token, [b.tokens for b in branches], num_nodes)
    # verify tree.tokens / tree.mask on the target model -> accepted path
    # (labels[i] == -1 for root/padding: record() then counts nothing)
    prop.record(len(path) - 1, int(tree.labels[path[-1]]))
"""

from .budgets import BudgetSchedule, common_prefix_len, seed_from_previous
from .proposer import Branch, DraftProposer, Proposal, ProposerConfig, ProposerStats
from .simulator import SimReport, simulate
from .suffix_index import Match, MatchCursor, SuffixIndex
from .think_markers import ThinkEndMatcher, ThinkMarkers, custom, markers_for
from .tree import TokenTree, build_chain, build_tree, layout_tree, node_labels, trie_size
from .verify import accepted_tokens, children_lists, verify_greedy, verify_stochastic

__all__ = [
    "BudgetSchedule", "common_prefix_len", "seed_from_previous",
    "Branch", "DraftProposer", "Proposal", "ProposerConfig", "ProposerStats",
    "SimReport", "simulate",
    "Match", "MatchCursor", "SuffixIndex",
    "ThinkEndMatcher", "ThinkMarkers", "custom", "markers_for",
    "TokenTree", "build_chain", "build_tree", "layout_tree", "node_labels", "trie_size",
    "accepted_tokens", "children_lists", "verify_greedy", "verify_stochastic",
]
