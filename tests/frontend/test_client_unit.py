"""``ServerClient``'s transport: a dropped connection is sent again, an HTTP error is not."""

from __future__ import annotations

import pytest
import requests

from ssr_sglang.frontend import client as client_mod
from ssr_sglang.frontend.client import ServerClient


class _Reply:
    def __init__(self, status: int, body: dict):
        self.status_code, self._body, self.text = status, body, str(body)

    def json(self) -> dict:
        return self._body

    def raise_for_status(self) -> None:
        if self.status_code != 200:
            raise requests.HTTPError(str(self.status_code))


def _scripted(c: ServerClient, replies: list) -> list:
    calls = []

    def request(method, url, **kw):
        calls.append((method, url))
        r = replies.pop(0)
        if isinstance(r, Exception):
            raise r
        return r

    c.session.request = request
    return calls


def test_dropped_connection_is_sent_again_on_a_fresh_one():
    c = ServerClient("http://127.0.0.1:1")
    calls = _scripted(c, [requests.ConnectionError("RemoteDisconnected"), _Reply(200, {"tokens": [1, 2]})])
    assert c._post("/tokenize", {"prompt": "x"}) == {"tokens": [1, 2]}
    assert calls == [("POST", "http://127.0.0.1:1/tokenize")] * 2


def test_connection_errors_past_the_retries_are_raised():
    c = ServerClient("http://127.0.0.1:1")
    calls = _scripted(c, [requests.ConnectionError("down")] * (client_mod.RETRIES + 1))
    with pytest.raises(requests.ConnectionError):
        c._get("/server_info")
    assert len(calls) == client_mod.RETRIES + 1


def test_http_errors_and_timeouts_are_not_retried():
    c = ServerClient("http://127.0.0.1:1")
    calls = _scripted(c, [_Reply(400, {"error": "max_new_tokens"})])
    with pytest.raises(RuntimeError, match="HTTP 400"):
        c._post("/generate", {})
    assert len(calls) == 1
    calls = _scripted(c, [requests.ReadTimeout("slow")])
    with pytest.raises(requests.ReadTimeout):
        c._post("/generate", {})
    assert len(calls) == 1
