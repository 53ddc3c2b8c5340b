"""Think markers and forced-answer text for every reasoning parser SGLang 0.5.23 knows
(``ReasoningParser.DetectorMap``), Gemma 4's channel markers in particular, and gpt-oss refused."""

from __future__ import annotations

import logging

import pytest

from ssr_sglang.core.think_markers import UNSUPPORTED_PARSERS, markers_for, parser_force_text
from ssr_sglang.srt.think_ids import resolve_markers, think_ids


def _detector_markers(name, tokenizer):
    from sglang.srt.parser.reasoning_parser import ReasoningParser

    det = ReasoningParser(model_type=name, stream_reasoning=False, tokenizer=tokenizer).detector
    return getattr(det, "think_start_token", None), getattr(det, "think_end_token", None)


def _parsers():
    from sglang.srt.parser.reasoning_parser import ReasoningParser

    return sorted(ReasoningParser.DetectorMap)


def test_every_sglang_parser_resolves_or_is_refused(tokenizer, caplog):
    resolved = 0
    for name in _parsers():
        if name in UNSUPPORTED_PARSERS:
            continue
        try:
            start, end = _detector_markers(name, tokenizer)
        except Exception:  # noqa: BLE001  a detector that needs a request or a special tokenizer to exist
            continue
        markers = resolve_markers(tokenizer, "", name)
        if not start or not end:
            assert markers is None, name
            continue
        assert (markers.start, markers.end) == (start, end), name
        assert end in markers.force_answer and markers.force_answer == parser_force_text(name, end), name
        ids = think_ids(tokenizer, markers)  # the forced text ends the think block: the tail is what follows
        assert ids.force[: len(ids.force) - len(ids.force_tail)][-len(ids.end):] == ids.end, name
        resolved += 1
    assert resolved >= 20


def test_gemma4_channel_markers(tokenizer):
    start, end = _detector_markers("gemma4", tokenizer)
    assert (start, end) == ("<|channel>", "<channel|>")
    for markers in (resolve_markers(tokenizer, "gemma4_text", "gemma4"), resolve_markers(tokenizer, "", "gemma4"),
                    resolve_markers(tokenizer, "gemma4_text", None), markers_for("google/gemma-4-E4B-it")):
        # Gemma 4 writes its answer right after <channel|>: a draft is forced with the end marker alone
        assert (markers.start, markers.end, markers.force_answer) == ("<|channel>", "<channel|>", "<channel|>")
    ids = think_ids(tokenizer, resolve_markers(tokenizer, "", "gemma4"))
    assert ids.force == ids.end and ids.force_tail == []
    # the other families keep their own forced text
    assert parser_force_text("qwen3", "</think>") == "\n</think>\n\n"
    assert parser_force_text("glm45", "</think>") == "</think>\n" == markers_for("glm-4.5").force_answer


def test_gpt_oss_is_refused_with_the_reason(tokenizer, caplog):
    with caplog.at_level(logging.WARNING, logger="ssr_sglang.srt.think_ids"):
        assert resolve_markers(tokenizer, "gpt_oss", "gpt-oss") is None
    assert "harmony" in caplog.text and "drafts are off" in caplog.text
    with pytest.raises(ValueError, match="harmony"):
        parser_force_text("gpt-oss", "<|end|>")
    assert think_ids(tokenizer, None).force == []  # no markers: SSR serves the model as NGRAM
