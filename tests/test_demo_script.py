"""scripts/demo.sh and the demo's ready line (issue 40): an unknown option is refused with the demo's
own usage and exit status 2 before anything installs, and the queries to try are printed only once
the server answers /readyz."""

from __future__ import annotations

import http.server
import shutil
import subprocess
import threading
import time
from pathlib import Path

from tests.helpers import free_port

ROOT = Path(__file__).resolve().parents[1]


def test_an_unknown_option_prints_the_demos_usage_and_exits_2(tmp_path):
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "demo.sh", tmp_path / "scripts" / "demo.sh")
    for args, says in (
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["--port"], "expected one argument"),
    ):
        done = subprocess.run(["bash", str(tmp_path / "scripts" / "demo.sh"), *args],
                              capture_output=True, text=True, timeout=30)  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("usage: qaslr demo [-h]") and says in done.stderr
    assert not (tmp_path / ".venv").exists()  # refused before the install


def test_the_ready_line_waits_for_readyz(capsys):
    from qaslr.commands.demo import announce_when_ready

    ready = threading.Event()

    class Readyz(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            status = 200 if ready.is_set() else 503
            self.send_response(status)
            self.end_headers()
            self.wfile.write(b'{"status": "ready"}' if status == 200 else b'{"status": "loading"}')

        def log_message(self, *args):
            pass

    port = free_port()
    server = http.server.HTTPServer(("127.0.0.1", port), Readyz)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        done = []
        waiter = threading.Thread(
            target=lambda: done.append(
                announce_when_ready(f"http://127.0.0.1:{port}", "try: now", poll_s=0.05)
            )
        )
        waiter.start()
        time.sleep(0.5)
        assert not done and "try:" not in capsys.readouterr().out  # still loading: nothing printed
        ready.set()
        waiter.join(10)
        assert done == [True] and "try: now" in capsys.readouterr().out
    finally:
        server.shutdown()


def test_a_port_already_taken_is_refused_before_any_work(tmp_path):
    """An earlier demo still serving on the port: the second says so and exits 2 before it renders or
    indexes anything (it used to build, print the earlier server's ready line, then fail to bind)."""
    import socket
    import sys

    port = free_port()
    with socket.socket() as held:
        held.bind(("127.0.0.1", port))
        held.listen()
        qaslr = str(Path(sys.executable).parent / "qaslr")
        done = subprocess.run([qaslr, "demo", "--workdir", str(tmp_path / "demo"), "--port", str(port)],
                              capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"cannot serve on 127.0.0.1:{port}" in done.stderr and "--port" in done.stderr
    assert "ready" not in done.stdout and not (tmp_path / "demo").exists()
