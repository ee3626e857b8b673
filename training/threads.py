"""Torch's thread count for one training run: set for the run, given back after it.

``torch.set_num_threads`` is process-wide. A run that set it and left it set changed every later
computation in the process: in the test suite, a backbone test left 2 threads behind and the selection
query trained after it by the same seeded recipe named a held-out change's event first 0.78 of the time
instead of 0.90 (tests/training/test_selection_query.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    """Run the block with ``threads`` torch threads, then restore the count it found."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
