"""Resolve the think markers of the served model to token ids (worker side)."""

from __future__ import annotations

import dataclasses
import logging
from typing import List, Optional

from ssr_sglang.core.think_markers import UNSUPPORTED_PARSERS, ThinkMarkers, custom, markers_for, parser_force_text

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class ThinkIds:
    """Token ids of the think markers for the served tokenizer."""

    start: List[int]
    end: List[int]
    force: List[int]  # appended to a draft's input to make it answer now
    force_tail: List[int]  # part of ``force`` after the think end: starts every draft answer


def _encode(tokenizer, text: str) -> list:
    return list(tokenizer.encode(text, add_special_tokens=False)) if text else []


def _family_markers(model_type: str) -> Optional[ThinkMarkers]:
    try:
        return markers_for(model_type) if model_type else None
    except ValueError:  # not a known reasoning family
        return None


def resolve_markers(tokenizer, model_type: str, reasoning_parser: Optional[str],
                    think_start: Optional[str] = None, think_end: Optional[str] = None,
                    force_text: Optional[str] = None) -> Optional[ThinkMarkers]:
    """Markers from (in order) explicit settings, ``--reasoning-parser``, the model family, the vocab."""
    if think_start and think_end:
        base = custom(think_start, think_end)
    elif reasoning_parser:
        if reasoning_parser.lower() in UNSUPPORTED_PARSERS:
            logger.warning("SSR: --reasoning-parser %s is not supported (%s); SSR drafts are off, requests are "
                           "served as under NGRAM (SSR_THINK_START/_END and SSR_FORCE_ANSWER_TEXT override)",
                           reasoning_parser, UNSUPPORTED_PARSERS[reasoning_parser.lower()])
            return None
        from sglang.srt.parser.reasoning_parser import ReasoningParser

        det = ReasoningParser(model_type=reasoning_parser, stream_reasoning=False, tokenizer=tokenizer).detector
        start = getattr(det, "think_start_token", None)
        end = getattr(det, "think_end_token", None)
        if not start or not end:
            logger.warning("SSR: reasoning parser %r has no think markers; SSR drafts are off", reasoning_parser)
            return None
        base = _family_markers(model_type)
        if base is None or (base.start, base.end) != (start, end):
            base = custom(start, end, parser_force_text(reasoning_parser, end))
    else:
        base = _family_markers(model_type)
        if base is None:
            vocab = tokenizer.get_vocab() if tokenizer is not None else {}
            if "<think>" in vocab and "</think>" in vocab:
                base = custom("<think>", "</think>", "\n</think>\n\n")
            else:
                return None
    if force_text is not None:
        base = ThinkMarkers(base.start, base.end, force_text, base.family)
    return base


def think_ids(tokenizer, markers: Optional[ThinkMarkers]) -> ThinkIds:
    if markers is None or tokenizer is None:
        return ThinkIds(start=[], end=[], force=[], force_tail=[])
    end = _encode(tokenizer, markers.end)
    force = _encode(tokenizer, markers.force_answer)
    tail = []
    for i in range(len(force) - len(end), -1, -1):
        if force[i:i + len(end)] == end:
            tail = force[i + len(end):]
            break
    else:
        raise ValueError(
            f"SSR_FORCE_ANSWER_TEXT={markers.force_answer!r} must contain the think end {markers.end!r}"
        )
    return ThinkIds(start=_encode(tokenizer, markers.start), end=end, force=force, force_tail=tail)


def from_config(tokenizer, model_type: str, reasoning_parser: Optional[str], cfg) -> ThinkIds:
    """The served model's think ids; ``cfg`` (a :class:`~ssr_sglang.srt.config.ServerConfig`) carries the
    explicit markers (``SSR_THINK_START``/``_END``, ``SSR_FORCE_ANSWER_TEXT``), which win when set."""
    markers = resolve_markers(tokenizer, model_type, reasoning_parser, cfg.think_start, cfg.think_end,
                              cfg.force_answer_text)
    ids = think_ids(tokenizer, markers)
    logger.info("SSR think markers: %s -> start=%s end=%s force=%s", markers, ids.start, ids.end, ids.force)
    return ids
