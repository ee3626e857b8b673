"""The backbone in processes of its own, one per batcher worker, for a CPU.

On a CPU the tiny and small backbones spend much of a call in Python (the transformers modules
between the matrix products), and Python in one process runs one thread at a time: two batcher
threads, plus the search threads and the event loop, share one interpreter lock, so under load the
server used about 1.5 of 2 cores (``benchmarks/bench_load.py``, ``server_cores``). A
:class:`ModelProcess` is a child process that loads the same checkpoint (its fingerprint is checked
against the server's backbone) with one torch thread, and runs the batcher's backbone calls for
query texts and images (engine.runtime.batching ``QUERIES`` and ``IMAGES``: the query embedding of a stage-2
search and the source frames that refine its moment, the backbone work of the default cascade).
Each batcher worker owns one: it sends a batch down a pipe and waits, without the lock, while its
child computes on a core of its own.

The heavy tier's clips still run on the batcher threads in the server (their encoder holds the
streaming head, its per-request queries and the early-exit gate). A GPU runs every call in the
server: there the work is in the device's kernels, not in Python.

The children run at the batcher's priority (``nice``), so the searches' cheap stages in the server
still take a core first. A child that dies (killed, out of memory) fails the batch it was running
with :class:`ModelProcessDied` and is started again for the next one.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np
import torch

from engine.errors import ModelProcessDied

__all__ = [
    "ModelProcess",
    "ModelProcessDied",
    "auto_model_processes",
    "available_memory",
    "start_model_processes",
    "weights_bytes",
]

logger = logging.getLogger(__name__)

START_TIMEOUT_S = 300.0  # loading a checkpoint in a fresh interpreter (imports, weights)
# what a model process holds besides its copy of the weights: the interpreter, torch and transformers
# (measured: about 460 MB of private memory beside 360 MB of shared libraries, tiny-world backbone)
PROCESS_OVERHEAD_BYTES = 512 * 2**20


def auto_model_processes(
    device, cores: int | None = None, *, weights_bytes: int = 0, available_bytes: int | None = None
) -> int:
    """Model processes for a backbone on ``device`` when none are configured: on a CPU of at least two
    cores, one per core (at most four), as long as they fit in half the memory available
    (``available_bytes``, default: what the system reports), each its copy of the weights
    (``weights_bytes``) and :data:`PROCESS_OVERHEAD_BYTES`;
    none on a GPU, on a single core, or when fewer than two copies fit (a lone model process does no
    better than the server's own threads)."""
    if str(device).startswith("cuda") or os.name != "posix":  # the pipe is a Unix socket pair
        return 0
    count = min(4, cores or os.cpu_count() or 1)
    available = available_memory() if available_bytes is None else available_bytes
    if available is not None:
        count = min(count, int(available // 2 // (weights_bytes + PROCESS_OVERHEAD_BYTES)))
    return count if count >= 2 else 0


def available_memory() -> int | None:
    """Bytes of memory available for new processes (Linux ``MemAvailable``; else free pages), or None."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def weights_bytes(backbone) -> int:
    """The bytes of ``backbone``'s parameters (what each model process holds again)."""
    net = getattr(backbone, "model", None)
    if net is None or not hasattr(net, "parameters"):
        return 0
    return sum(p.numel() * p.element_size() for p in net.parameters())


def _serve(conn, model: str, dtype: str, embed_dim: int, frame_size: int, nice: int) -> None:
    """The child (``python -m engine.runtime.model_process FD``, with what to load as its first message):
    load the backbone, say ``("ready", fingerprint)``, then answer each
    ``(kind, items, instruction)`` with ``("ok", embeddings)`` or ``("error", type name, message)``
    until ``None`` arrives or the pipe closes."""
    from engine.runtime.admission import lower_thread_priority

    lower_thread_priority(nice)  # before torch starts threads: they inherit it (as the batcher's do)
    torch.set_num_threads(1)  # one core each: the children, not torch's threads, use the cores
    from models.backbone import load_backbone

    try:
        backbone = load_backbone(model, device="cpu", dtype=dtype, embed_dim=embed_dim, frame_size=frame_size)
    except Exception as exc:  # the parent raises it: the same checkpoint loaded there a moment ago
        conn.send(("error", type(exc).__name__, str(exc)))
        return
    try:
        conn.send(("ready", backbone.fingerprint))
    except OSError:  # the parent closed before this one was ready (an engine closed at once): nothing to say
        return
    with torch.inference_mode():
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                return
            if message is None:
                return
            kind, items, instruction = message
            try:
                if kind == "texts":
                    out = backbone.embed_texts(list(items), instruction=instruction)
                else:
                    out = backbone.embed_images(list(items))
                conn.send(("ok", out.float().cpu().numpy()))
            except Exception as exc:  # the batch fails in the parent, with this message
                conn.send(("error", type(exc).__name__, str(exc)))


class ModelProcess:
    """A copy of ``backbone`` in a child process (``model``: the checkpoint it was loaded from).

    :meth:`start` begins loading it (and returns at once); the first call waits until it is ready.
    One caller at a time (each batcher worker owns one); :meth:`close` ends it."""

    def __init__(self, backbone, model: str, *, nice: int = 0):
        self.fingerprint = backbone.fingerprint
        self._args = (
            str(model),
            str(backbone.dtype).removeprefix("torch."),
            int(backbone.embed_dim),
            int(backbone.frame_size),
            int(nice),
        )
        self._lock = threading.Lock()
        self._proc = None
        self._conn = None
        self._ready = False
        self.starts = 0  # how many children were started (1 + restarts)
        self.calls = 0  # batches it answered

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def alive(self) -> bool:
        """Whether the child is running (False before :meth:`start`, and once it has exited)."""
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> ModelProcess:
        """Start the child (``python -m engine.runtime.model_process``, a fresh interpreter: forking a process
        that runs threads is unsafe, and multiprocessing's spawn would re-run the caller's main script)
        on one end of a socket pair, and send it what to load."""
        ours, theirs = socket.socketpair()
        root = str(Path(__file__).resolve().parents[2])  # where engine/ and models/ are importable
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "engine.runtime.model_process", str(theirs.fileno())],
                pass_fds=[theirs.fileno()], env=env, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        finally:
            theirs.close()
        conn = Connection(ours.detach())
        conn.send(self._args)
        self._proc, self._conn, self._ready = proc, conn, False
        self.starts += 1
        return self

    def _wait_ready(self) -> None:
        if self._proc is None:
            self.start()
        if self._ready:
            return
        if not self._conn.poll(START_TIMEOUT_S):
            self._stop()
            raise ModelProcessDied(f"the model process did not load the backbone in {START_TIMEOUT_S:.0f} s")
        reply = self._recv()
        if reply[0] != "ready":
            self._stop()
            raise RuntimeError(f"the model process could not load the backbone: {reply[1]}: {reply[2]}")
        if reply[1] != self.fingerprint:
            self._stop()
            raise RuntimeError(
                "the model process loaded another checkpoint than the server's (its fingerprint differs): "
                "was the checkpoint directory changed while the server ran?"
            )
        self._ready = True

    def _recv(self):
        try:
            return self._conn.recv()
        except (EOFError, OSError) as exc:
            code = self._proc.poll() if self._proc is not None else None
            self._stop()
            raise ModelProcessDied(
                f"the model process ended (exit code {code}); it restarts for the next batch"
            ) from exc

    def _call(self, kind: str, items: list, instruction: str | None) -> torch.Tensor:
        with self._lock:
            if self._proc is not None and not self.alive:
                self._stop()  # died while idle: a fresh one
            self._wait_ready()
            try:
                self._conn.send((kind, items, instruction))
            except (BrokenPipeError, OSError) as exc:
                self._stop()
                raise ModelProcessDied("the model process ended; it restarts for the next batch") from exc
            reply = self._recv()
            if reply[0] == "ok":
                self.calls += 1
        if reply[0] != "ok":
            raise RuntimeError(f"the model process failed the batch: {reply[1]}: {reply[2]}")
        return torch.from_numpy(reply[1])

    def warm_up(self, frame: np.ndarray, images: int = 8) -> None:
        """Wait until the child has loaded, and run a text and a batch of ``images`` copies of ``frame``
        through it (its first calls pay for lazy initialisation; a lone search's refine frames reach
        each process as a batch of 8, engine.runtime.batching's MIN_SPLIT_FRAMES)."""
        self.embed_texts(["warm-up"])
        self.embed_images([frame] * images)

    def embed_texts(self, texts: Sequence[str | None], *, instruction: str | None = None) -> torch.Tensor:
        """``Backbone.embed_texts`` in the child: [B, d] float32 on the CPU."""
        return self._call("texts", list(texts), instruction)

    def embed_images(self, frames: Sequence[np.ndarray]) -> torch.Tensor:
        """``Backbone.embed_images`` in the child: [B, d] float32 on the CPU."""
        return self._call("images", [np.ascontiguousarray(f) for f in frames], None)

    def _stop(self, timeout_s: float = 5.0) -> None:
        proc, conn, ready = self._proc, self._conn, self._ready
        self._proc = self._conn = None
        self._ready = False
        loading = False
        if conn is not None:
            try:
                loading = not ready and not conn.poll(0)  # no "ready" yet: still importing and loading
                conn.send(None)
            except (OSError, ValueError):
                pass
            conn.close()
        if proc is not None:
            if loading:  # it holds no work, and it would read the None only once loaded (seconds): end it now
                proc.kill()
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout_s)

    def close(self) -> None:
        with self._lock:
            self._stop()


def start_model_processes(backbone, model: str, count: int, *, nice: int = 0) -> list[ModelProcess]:
    """``count`` model processes for ``backbone``, all loading at once (each call waits for its own)."""
    procs = [ModelProcess(backbone, model, nice=nice).start() for _ in range(count)]
    logger.info("%d model process(es) loading the backbone (pids %s)", count, [p.pid for p in procs])
    return procs


if __name__ == "__main__":
    _conn = Connection(int(sys.argv[1]))
    _serve(_conn, *_conn.recv())
