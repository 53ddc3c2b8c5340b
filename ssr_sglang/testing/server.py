"""Start and stop a real SGLang server on CPU for tests, benchmarks and the main job."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

import requests

# SGLANG_CPU_OMP_THREADS_BIND is left to the CPU bootstrap's default, which TP/DP servers widen per rank
CPU_ENV = {"SGLANG_USE_CPU_ENGINE": "1", "OMP_NUM_THREADS": "1"}


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A port that is free now and lies below the kernel's ephemeral range.

    A port the kernel hands out for ``bind(0)`` is ephemeral, so the kernel can hand it out again before the
    server binds it (about 20 s later), for example to a TP rank's gloo socket; uvicorn then exits with 3.
    Ports below the ephemeral range are never handed out that way."""
    low = max(_ephemeral_low(), 12000)
    for _ in range(200):
        port = random.randrange(10000, low - 1000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")


def cpu_server_args(model_path: str, *extra: str, max_total_tokens: int = 16384) -> list:
    return [
        "--model-path", str(model_path), "--device", "cpu", "--dtype", "bfloat16",
        "--max-total-tokens", str(max_total_tokens), "--max-running-requests", "32",
        # --mem-fraction-static 0.8: on CPU SGLang budgets the KV pool from the machine's free memory measured
        # before and after loading the weights; other servers and test workers starting in between often took
        # over 30% of it ("Loaded weights leave no GPU memory"). --max-total-tokens caps the pool itself.
        "--mem-fraction-static", "0.8", "--sleep-on-idle",  # an idle scheduler otherwise spins a core
        "--skip-server-warmup", "--log-level", "warning", *extra,
    ]


class Server:
    """``python -m sglang.launch_server ...`` in a subprocess; a context manager."""

    def __init__(self, args: Sequence[str], env: Optional[dict] = None, log_path: Optional[str] = None,
                 port: Optional[int] = None, timeout: float = 240.0):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = [sys.executable, "-m", "sglang.launch_server", *args, "--host", "127.0.0.1", "--port", str(self.port)]
        self.env = {**os.environ, **CPU_ENV, **(env or {})}
        self.log_path = log_path
        self.timeout = timeout
        self.proc: Optional[subprocess.Popen] = None

    def __enter__(self) -> "Server":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        log = open(self.log_path, "w") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(self.args, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.time() + self.timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sglang server exited with {self.proc.returncode}; log: {self.log_path}\n"
                                   + self.log_tail())
            try:
                if requests.get(self.url + "/health", timeout=2).status_code == 200:
                    self._freeze_gc()
                    return
            except requests.RequestException:
                pass
            time.sleep(0.5)
        self.stop()
        raise TimeoutError(f"sglang server not healthy after {self.timeout}s; log: {self.log_path}\n" + self.log_tail())

    def _freeze_gc(self) -> None:
        """Move the server's start-up objects out of the garbage collector's reach (SGLang's ``/freeze_gc``).

        SGLang does this after its warm-up request, but with ``--skip-server-warmup`` its call races the HTTP
        server's start and mostly fails ("post-warmup freeze_gc failed" in the log). An unfrozen scheduler then
        walks its million start-up objects in every full collection: on the bundled model at 16 concurrent
        requests, 3 collections of about 0.5 s each in a 12 s run (2026-12-01). Whether a server won that race
        made it slower or faster for its whole life, so every server started here is frozen once it is up."""
        try:
            requests.post(self.url + "/freeze_gc", timeout=120).raise_for_status()
        except requests.RequestException as e:
            print(f"warning: {self.url}/freeze_gc failed ({e}); the server's GC stays unfrozen", file=sys.stderr)

    def log_tail(self, n: int = 60) -> str:
        if not self.log_path or not Path(self.log_path).exists():
            return ""
        return "\n".join(Path(self.log_path).read_text(errors="replace").splitlines()[-n:])

    def stop(self, grace: float = 2.0) -> None:
        """SIGTERM to the server's process group, SIGKILL after ``grace`` seconds: SGLang's own shutdown spends
        about 5 s looking for crashed schedulers to trace, and a test server has nothing to flush."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=grace)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=10)

    # -- small client helpers ---------------------------------------------------
    def generate(self, input_ids=None, text=None, max_new_tokens=64, temperature=0.0, custom_params=None,
                 timeout=300, **extra) -> dict:
        sp = {"max_new_tokens": max_new_tokens, "temperature": temperature, **extra.pop("sampling", {})}
        if custom_params is not None:
            sp["custom_params"] = custom_params
        body = {"sampling_params": sp, **extra}
        if input_ids is not None:
            body["input_ids"] = list(input_ids)
        else:
            body["text"] = text
        r = requests.post(self.url + "/generate", json=body, timeout=timeout)
        r.raise_for_status()
        return r.json()

    def loads(self) -> dict:
        return requests.get(self.url + "/v1/loads", timeout=10).json()

    def wait_idle(self, timeout: float = 60.0) -> dict:
        """Poll ``/v1/loads`` until nothing runs, waits or holds KV (or ``timeout``); return the last load."""
        deadline = time.time() + timeout
        while True:
            load = self.loads()["loads"][0]
            idle = load["num_running_reqs"] == 0 and load["num_waiting_reqs"] == 0 and load["num_used_tokens"] == 0
            if idle or time.time() > deadline:
                return load
            time.sleep(0.2)

    def server_info(self) -> dict:
        return requests.get(self.url + "/server_info", timeout=10).json()
