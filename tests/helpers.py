"""Helpers for tests that run the service as a real process on a loopback port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_ready(proc: subprocess.Popen, url: str, output, timeout: float) -> None:
    """Poll ``url``/readyz until it answers 200; raise AssertionError (with the end of ``output()``,
    what the process printed) if the process exits first or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited ({proc.returncode}):\n{output()[-3000:]}")
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"the server was not ready in {timeout:g} s:\n{output()[-3000:]}")
        time.sleep(0.2)


class ServerProcess:
    """``with ServerProcess(cmd, env=env, port=port) as server:`` starts ``cmd``, waits until
    ``/readyz`` answers 200 (failing with the process output if it exits or times out), and on exit
    stops it with ``stop_signal``; ``server.output`` then holds everything it printed. Output goes to
    a temporary file, so a chatty server never blocks on a full pipe."""

    def __init__(
        self,
        cmd: list[str],
        *,
        env: dict[str, str],
        port: int,
        ready_timeout: float = 120.0,
        stop_signal: int = signal.SIGTERM,
    ):
        self.cmd, self.env, self.ready_timeout, self.stop_signal = cmd, env, ready_timeout, stop_signal
        self.url = f"http://127.0.0.1:{port}"
        self._log = None
        self._final_output: str | None = None

    @property
    def output(self) -> str:
        """What the process has printed so far (all of it once stopped)."""
        if self._final_output is not None:
            return self._final_output
        if self._log is None:
            return ""
        fd = self._log.fileno()  # pread leaves the offset the child writes at alone
        return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")

    def __enter__(self) -> ServerProcess:
        self._log = tempfile.TemporaryFile(mode="w+b")
        self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=self._log, stderr=subprocess.STDOUT)
        try:
            wait_until_ready(self.proc, self.url, lambda: self.output, self.ready_timeout)
        except AssertionError:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(self.stop_signal)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._final_output is None:
            self._final_output = self.output
            self._log.close()
        return self._final_output
