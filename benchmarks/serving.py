"""``qaslr serve`` in a subprocess on a free loopback port, for the benchmarks that measure the HTTP
service (so the clients' threads do not share the server's GIL)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class QaslrServe:
    """``with QaslrServe(["--index", ...], env={...}) as url:`` starts ``qaslr serve`` with those
    arguments on 127.0.0.1 and a free port, waits until ``/readyz`` answers 200 (``ready_s`` then
    says how long that took), and stops it on exit."""

    def __init__(self, args: list[str], *, env: dict[str, str] | None = None, timeout_s: float = 180.0):
        self.port = free_port()
        self.cmd = [sys.executable, "-m", "qaslr.cli", "--log-level", "WARNING", "serve", *args]
        self.cmd += ["--host", "127.0.0.1", "--port", str(self.port)]
        self.env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
        self.timeout_s = timeout_s
        self.ready_s = float("nan")

    def __enter__(self) -> str:
        import httpx

        t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            self.cmd, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + self.timeout_s
        while True:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError("qaslr serve did not start")
            try:
                if httpx.get(url + "/readyz", timeout=5).status_code == 200:
                    self.ready_s = time.perf_counter() - t0
                    return url
            except httpx.TransportError:
                pass
            time.sleep(0.1)

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
