"""A request that fails inside an SSR program surfaces its own error, not SGLang's bare ``KeyError``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from sglang.lang.backend.base_backend import BaseBackend

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "programs"))

from ssr_program import ssr_reasoning  # noqa: E402


class _Refusing(BaseBackend):
    """A backend whose every generation fails the way a dropped connection does."""

    def __init__(self):
        super().__init__()
        self.is_chat_model = False

    def get_chat_template(self):
        from sglang.lang.chat_template import get_chat_template

        return get_chat_template("default")

    def generate(self, s, sampling_params):
        raise ConnectionError("server went away")


def test_failed_reasoning_segment_raises_the_request_error():
    with pytest.raises(RuntimeError, match="reasoning_0.*server went away"):
        ssr_reasoning.run("Q: 1+1?", checkpoints=[8], backend=_Refusing())
