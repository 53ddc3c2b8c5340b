"""Test servers listen below the kernel's ephemeral range, so no TP rank's socket can take their port first."""

import socket

from ssr_sglang.testing.server import _ephemeral_low, free_port


def test_free_port_is_below_the_ephemeral_range_and_bindable():
    low = _ephemeral_low()
    for _ in range(20):
        port = free_port()
        assert 10000 <= port < low
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_kernel_chosen_port_is_ephemeral():
    # the premise of free_port: bind(0) hands out ports from the range free_port avoids
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        assert s.getsockname()[1] >= _ephemeral_low()
