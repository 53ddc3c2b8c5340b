"""Think-section markers per model family, and a streaming end detector.

``ThinkMarkers.force_answer`` is the text the engine appends to a forked
draft request to end its reasoning early (SSR drafts); it follows what the
model itself emits after reasoning, so the draft answer starts in the same
state as a natural answer.

Families included are those whose format is documented in their chat
templates: Qwen3 / Qwen3.5 / QwQ and DeepSeek-R1 (``<think>…</think>\\n\\n``),
GLM-4.5 / 4.6 (``<think>…</think>\\n``), Gemma 4 (``<|channel>thought\\n…<channel|>``,
the answer right after the end marker).  gpt-oss (harmony channels) is not
covered: its ``<|end|>`` ends every message, not only the reasoning, and its
answer opens a new message (:data:`UNSUPPORTED_PARSERS`); use :func:`custom`.

:func:`parser_force_text` is the forced text for the markers of an SGLang
``--reasoning-parser`` (``ReasoningParser.DetectorMap``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence

__all__ = ["ThinkMarkers", "markers_for", "custom", "ThinkEndMatcher", "KNOWN_FAMILIES", "parser_force_text",
           "UNSUPPORTED_PARSERS"]


@dataclass(frozen=True)
class ThinkMarkers:
    start: str
    end: str
    force_answer: str
    family: str = "custom"


def custom(start: str, end: str, force: Optional[str] = None) -> ThinkMarkers:
    """Markers for an unlisted model; ``force`` defaults to ``end``."""
    if not start or not end:
        raise ValueError("start and end markers must be non-empty")
    return ThinkMarkers(start, end, end if force is None else force, "custom")


_QWEN = ThinkMarkers("<think>", "</think>", "\n</think>\n\n", "qwen3")
_DEEPSEEK_R1 = ThinkMarkers("<think>", "</think>", "\n</think>\n\n", "deepseek-r1")
_GLM = ThinkMarkers("<think>", "</think>", "</think>\n", "glm-4.5")
_GEMMA4 = ThinkMarkers("<|channel>", "<channel|>", "<channel|>", "gemma4")

# (substring of the normalised name or model_type, markers); first hit wins,
# so specific names come before the generic model types they contain.
_TABLE = [
    ("deepseek-r1", _DEEPSEEK_R1),
    ("deepseek_r1", _DEEPSEEK_R1),
    ("qwq", ThinkMarkers("<think>", "</think>", "\n</think>\n\n", "qwq")),
    ("qwen3.5", ThinkMarkers("<think>", "</think>", "\n</think>\n\n", "qwen3.5")),
    ("qwen3_5", ThinkMarkers("<think>", "</think>", "\n</think>\n\n", "qwen3.5")),
    ("qwen3", _QWEN),  # also model_type qwen3 / qwen3_moe
    ("glm-4.5", _GLM),
    ("glm-4.6", ThinkMarkers("<think>", "</think>", "</think>\n", "glm-4.6")),
    ("glm4_moe", _GLM),  # HF model_type of GLM-4.5 / 4.6
    ("gemma-4", _GEMMA4),
    ("gemma4", _GEMMA4),  # also model_type gemma4_text
]

# SGLang reasoning parsers whose model writes something other than "\n" + end + "\n\n" after its reasoning.
_PARSER_FORCE_AFTER_END = {"glm45": "\n", "gemma4": ""}
# Parsers SSR cannot force to answer, with the reason (drafts stay off; requests are served as under NGRAM).
UNSUPPORTED_PARSERS = {
    "gpt-oss": "gpt-oss reasons in harmony channels: '<|end|>' closes every message, not only the analysis "
               "channel, and the answer opens a new '<|start|>assistant<|channel|>final<|message|>' message, "
               "so no fixed think end and forced text exist",
    "beam": "beam reasons in harmony channels like gpt-oss: the analysis message's end is followed by a new "
            "message whose channel the model chooses, so no fixed forced text exists",
    "inkling": "inkling frames reasoning with typed content blocks whose native token ids differ from the "
               "encoded marker text, so the think end cannot be matched from its text",
}


def parser_force_text(parser: str, end: str) -> str:
    """The text that makes a model served with ``--reasoning-parser parser`` answer now (its think end
    ``end`` plus what its chat template writes after it)."""
    key = parser.lower()
    if key in UNSUPPORTED_PARSERS:
        raise ValueError(f"--reasoning-parser {parser}: {UNSUPPORTED_PARSERS[key]}")
    if key in _PARSER_FORCE_AFTER_END:
        return end + _PARSER_FORCE_AFTER_END[key]
    return "\n" + end + "\n\n"

KNOWN_FAMILIES = sorted({m.family for _, m in _TABLE})


def markers_for(model: str, default: Optional[ThinkMarkers] = None) -> ThinkMarkers:
    """Markers for a model name/path or HF ``model_type``.

    Matching is by case-insensitive substring (``Qwen/Qwen3-8B`` and
    ``qwen3_moe`` both give Qwen3).  Raises ``ValueError`` for unknown
    models unless ``default`` is given.
    """
    key = model.lower()
    for needle, markers in _TABLE:
        if needle in key:
            return markers
    if default is not None:
        return default
    raise ValueError(f"no think markers known for {model!r}; known families: {KNOWN_FAMILIES}; use custom()")


class ThinkEndMatcher:
    """Streaming detector of a token-id sequence (e.g. ``</think>``).

    Knuth-Morris-Pratt automaton: O(1) amortized per token, O(len(pattern))
    memory.  ``feed`` returns the absolute index (in the stream of all fed
    tokens) of the token completing the first occurrence, or -1.
    """

    def __init__(self, end_ids: Sequence[int]) -> None:
        pat = [int(t) for t in end_ids]
        if not pat:
            raise ValueError("end_ids must be non-empty")
        self.pattern = pat
        fail = [0] * len(pat)
        k = 0
        for i in range(1, len(pat)):
            while k and pat[i] != pat[k]:
                k = fail[k - 1]
            if pat[i] == pat[k]:
                k += 1
            fail[i] = k
        self._fail = fail
        self.reset()

    def reset(self) -> None:
        self._state = 0
        self._seen = 0
        self.found_at = -1

    @property
    def done(self) -> bool:
        return self.found_at >= 0

    def feed(self, tokens: Sequence[int]) -> int:
        """Consume tokens; return the completion index or -1.

        After the first completion the matcher stays done (further tokens
        are only counted).
        """
        if self.found_at >= 0:
            self._seen += len(tokens)
            return self.found_at
        pat, fail, k, m = self.pattern, self._fail, self._state, len(self.pattern)
        for j, t in enumerate(tokens):
            while k and t != pat[k]:
                k = fail[k - 1]
            if t == pat[k]:
                k += 1
                if k == m:
                    self.found_at = self._seen + j
                    self._seen += len(tokens)
                    self._state = 0
                    return self.found_at
        self._state = k
        self._seen += len(tokens)
        return -1

    def feed_one(self, token: int) -> bool:
        return self.feed((token,)) >= 0


def find_all(pattern: Sequence[int], tokens: Sequence[int]) -> List[int]:
    """End indices of all occurrences (brute force; for tests/debugging)."""
    m = len(pattern)
    return [i + m - 1 for i in range(len(tokens) - m + 1) if list(tokens[i : i + m]) == list(pattern)]
