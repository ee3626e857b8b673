"""The disk fills during a build: run inside a private mount namespace (``unshare -m``), with the
index on a small tmpfs of its own. The subject is the `indexer` command's process (its exit status 3,
its one-line reason, its resume), so this runs the command, not the library facade.

    unshare -m python tests/indexer/disk_full.py MOUNTPOINT OUT_DIR indexer-build-args...

1. mounts a tmpfs (``SIZE``) on MOUNTPOINT (only this process and its children see it);
2. starts ``indexer build ... --index MOUNTPOINT/idx`` and, once two batches are committed, pauses it
   (SIGSTOP), fills the file system to the last byte with a ballast file and lets it go on
   (SIGCONT), so the build's next write fails;
3. records the build's exit status and stderr, runs ``indexer verify`` on what is left, copies the
   index out, deletes the ballast and runs the same build again (the resume), verifies again and
   copies the result out;
4. writes OUT_DIR/report.json. Everything is bounded by timeouts; the tmpfs goes away with the
   namespace when this process exits.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

SIZE = "32m"
TIMEOUT_S = 300


def _indexer(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "qaslr.commands.indexer", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, **kwargs)


def _fill(directory: Path) -> int:
    """Write zeros into directory/ballast until the file system is full; returns the bytes written."""
    written = 0
    block = b"\0" * (1 << 16)
    with open(directory / "ballast", "wb", buffering=0) as f:
        try:
            while True:
                written += f.write(block)
        except OSError:
            pass
        try:  # the last partial block, byte by byte down to nothing
            while f.write(b"\0" * 512):
                written += 512
        except OSError:
            pass
    return written


def main() -> int:
    mount, out, build = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(mount)], check=True)
    index = mount / "idx"
    report: dict = {"tmpfs": SIZE}
    proc = subprocess.Popen(
        [sys.executable, "-m", "qaslr.commands.indexer", *build, "--index", str(index)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + TIMEOUT_S
    filled = 0
    while proc.poll() is None and time.monotonic() < deadline:
        if not filled and len(list((index / "bank").glob("bank-*.npy"))) >= 2:
            # pause the build while the ballast is written: otherwise a fast build races the fill
            # and can commit every remaining video before the disk is full (seen in CI)
            os.kill(proc.pid, signal.SIGSTOP)
            try:
                report["committed_batches_before_full"] = len(list((index / "bank").glob("bank-*.npy")))
                filled = _fill(mount)
            finally:
                os.kill(proc.pid, signal.SIGCONT)
        time.sleep(0.002)
    stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
    report.update(first_status=proc.returncode, first_stderr=stderr[-4000:], ballast_bytes=filled)
    verify = _indexer(["verify", "--index", str(index)])
    report.update(verify_after_full=verify.returncode, verify_after_full_out=verify.stdout[-3000:])
    shutil.copytree(index, out / "after_full")
    (mount / "ballast").unlink(missing_ok=True)
    resumed = _indexer([*build, "--index", str(index)])
    report.update(
        resume_status=resumed.returncode,
        resume_stdout=resumed.stdout[-3000:],
        resume_stderr=resumed.stderr[-3000:],
    )
    verify = _indexer(["verify", "--index", str(index)])
    report.update(verify_after_resume=verify.returncode, verify_after_resume_out=verify.stdout[-3000:])
    shutil.copytree(index, out / "resumed")
    (out / "report.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
