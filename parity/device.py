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
"""How many processes may run a large (training-shape) problem on one GPU at once (``PARITY_LARGE_SLOTS``,
default 3, per GPU): its fp64 oracle and every implementation's outputs and gradients take tens of GB, and a
pytest-xdist or ``--workers`` run holds a dozen processes per GPU. Every training-shape case of a run passes
through these slots (its compile included), so too few make them the run's critical path."""


_pinned: list[int | None] = [None]
"""The GPU index this process was pinned to by :func:`pin_worker` (None: not pinned, it runs on the default)."""


def worker_number(worker: int | str | None) -> int | None:
    """The index of a worker process: pytest-xdist's worker id (``"gw3"`` -> 3) or a pool index as it is; None
    for the controller or a process that is no worker (None, "" or "master")."""
    if worker is None or isinstance(worker, int):
        return worker
    digits = worker.removeprefix("gw")
    return int(digits) if digits.isdigit() else None


def gpu_for_worker(worker: int, gpus: int) -> int:
    """The GPU that worker number ``worker`` runs on among ``gpus`` visible ones: round robin (worker K on GPU
    K mod ``gpus``), so that N workers over G GPUs put N // G or N // G + 1 on each."""
    return worker % gpus if gpus > 1 else 0


def workers_on_gpu(workers: int, gpus: int, gpu: int) -> int:
    """How many of ``workers`` worker processes :func:`gpu_for_worker` puts on GPU ``gpu`` (at least 1: the
    process asking is one of them)."""
    gpus = max(gpus, 1)
    return max(1, len(range(gpu, max(workers, 1), gpus)))


def pin_worker(worker: int | str | None) -> int:
    """Pin this process to its GPU (:func:`gpu_for_worker` over the visible GPUs) with torch.cuda.set_device,
    before any CUDA work: tensors made on ``"cuda"``, Triton's launches, the caches and memory statistics then
    use that GPU. With one visible GPU (or no worker number) nothing is set: the process stays on GPU 0, as
    before. Returns the GPU index."""
    import torch

    number = worker_number(worker)
    gpus = torch.cuda.device_count()
    gpu = 0 if number is None else gpu_for_worker(number, gpus)
    if gpus > 1:
        torch.cuda.set_device(gpu)
        _pinned[0] = gpu
    return gpu


def current_gpu() -> int:
    """The GPU index this process runs on: the one :func:`pin_worker` chose, else the current CUDA device once
    CUDA is initialized, else 0 (never initializes CUDA)."""
    if _pinned[0] is not None:
        return _pinned[0]
    import torch

    return torch.cuda.current_device() if torch.cuda.is_initialized() else 0


def physical_gpu(gpu: int) -> str:
    """A host-wide name for visible GPU ``gpu``: its entry in ``CUDA_VISIBLE_DEVICES`` (so that processes that
    see different GPUs under the same index do not share slots), else the index."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    name = visible[gpu] if gpu < len(visible) else str(gpu)
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)


def slot_folder(gpu: int | None = None) -> Path:
    """The lock files of the large-problem slots of one GPU (default: this process's, :func:`current_gpu`)."""
    name = physical_gpu(current_gpu() if gpu is None else gpu)
    return Path(tempfile.gettempdir()) / f"parity-large-slots-{os.getuid()}" / f"gpu{name}"


@contextlib.contextmanager
def large_problem_slot(wanted: bool = True, gpu: int | None = None) -> Iterator[None]:
    """Hold one of :data:`LARGE_SLOTS` slots of this process's GPU (``gpu``: of that one), host-wide lock files
    shared by every process on that GPU, while the block runs; a no-op if not ``wanted``."""
    if not wanted:
        yield
        return
    folder = slot_folder(gpu)
    folder.mkdir(parents=True, exist_ok=True)
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
