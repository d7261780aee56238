"""Select where kernels run. On CPU, Triton kernels run in the Triton interpreter, which must be
enabled before triton is first imported."""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from parity.errors import ParityError

DEVICES = ("cpu", "cuda")
_configured: str | None = None


def configure(device: str) -> None:
    """Prepare the process for running kernels on ``device`` ("cpu" or "cuda")."""
    global _configured
    if device not in DEVICES:
        raise ParityError(f"unknown device {device!r}: expected one of {', '.join(DEVICES)}")
    if _configured is not None and _configured != device:
        raise ParityError(f"this process is already set up for {_configured}; cannot switch to {device}")
    if device == "cpu":
        if os.environ.get("HELION_INTERPRET") == "1":
            raise ParityError("HELION_INTERPRET=1 cannot be combined with the Triton interpreter; unset it")
        if os.environ.get("TRITON_INTERPRET") != "1" and "triton" in sys.modules:
            raise ParityError(
                "triton was imported before parity could set TRITON_INTERPRET=1; "
                "set TRITON_INTERPRET=1 in the environment for CPU runs"
            )
        os.environ["TRITON_INTERPRET"] = "1"
        _configured = device
        return
    import torch

    if not torch.cuda.is_available():
        raise ParityError("--device cuda requested but torch sees no CUDA device")
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise ParityError("TRITON_INTERPRET=1 is set, but --device cuda compiles kernels; unset it")
    _configured = device


def default_device() -> str:
    """The device used when none is given: CPU, so that the main job runs anywhere."""
    return "cpu"


def ensure_configured() -> str:
    """Configure the default device unless a device was chosen already; return the device."""
    if _configured is None:
        configure(default_device())
    assert _configured is not None
    return _configured


LARGE_SLOTS = int(os.environ.get("PARITY_LARGE_SLOTS", "3"))
"""How many processes on one host may run a large (training-shape) problem on the GPU at once
(``PARITY_LARGE_SLOTS``, default 3): its fp64 oracle and every implementation's outputs and gradients take tens
of GB, and a pytest-xdist or ``--workers`` run holds a dozen processes. Every training-shape case of a run passes
through these slots (its compile included), so too few make them the run's critical path."""


@contextlib.contextmanager
def large_problem_slot(wanted: bool = True) -> Iterator[None]:
    """Hold one of :data:`LARGE_SLOTS` host-wide slots (lock files) while the block runs; no-op if not ``wanted``."""
    if not wanted:
        yield
        return
    folder = Path(tempfile.gettempdir()) / f"parity-large-slots-{os.getuid()}"
    folder.mkdir(exist_ok=True)
    while True:
        for slot in range(LARGE_SLOTS):
            handle = open(folder / f"{slot}.lock", "w")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
                handle.close()
            return
        time.sleep(0.2)
