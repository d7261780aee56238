"""What every op's spec shares: seeded random inputs, and error inputs built from one valid call.

Importing it installs the Triton interpreter shims (``reference/_triton_shims.py``): under the interpreter (CPU)
they apply to every Triton kernel, mamba-ssm's and the Triton that Helion generates. No-op on CUDA.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from parity.spec import ErrorInput
from reference import _triton_shims

_triton_shims.install()


def gen(seed: int) -> torch.Generator:
    """A CPU generator seeded with ``seed`` (inputs are drawn on the CPU, then moved: the same on every device)."""
    return torch.Generator().manual_seed(seed)


def randn(
    gen: torch.Generator, *shape: int, dtype: torch.dtype, device: torch.device, scale: float = 1.0
) -> torch.Tensor:
    """N(0, 1) times ``scale``, drawn in fp32, then cast."""
    return (torch.randn(*shape, generator=gen, dtype=torch.float32) * scale).to(device=device, dtype=dtype)


def log_uniform(gen: torch.Generator, n: int, bounds: Any) -> torch.Tensor:
    """n fp32 values log-uniform in [lo, hi]."""
    lo, hi = bounds
    return torch.exp(torch.rand(n, generator=gen) * (math.log(hi) - math.log(lo)) + math.log(lo))


def full(*shape: int, dtype: torch.dtype = torch.float32) -> Callable[[torch.device], torch.Tensor]:
    """device -> a tensor of ``shape`` filled with 0.5 (an integer dtype: zeros), for error inputs."""
    return lambda device: torch.full(shape, 0 if not dtype.is_floating_point else 0.5, dtype=dtype, device=device)


ErrorRow = tuple[str, str, dict[str, Any], str] | tuple[str, str, dict[str, Any], str, type[Exception]]
"""(description, offending argument, changed arguments, match[, error type (default ValueError)])."""


def error_inputs(valid: dict[str, Any], rows: list[ErrorRow]) -> tuple[ErrorInput, ...]:
    """ErrorInputs from a valid call and one row per invalid call; a value that is callable is called with the
    device (a tensor maker such as :func:`full`)."""

    def maker(changes: dict[str, Any]) -> Callable[[torch.device], dict[str, Any]]:
        def make(device: torch.device) -> dict[str, Any]:
            return {k: v(device) if callable(v) else v for k, v in {**valid, **changes}.items()}

        return make

    return tuple(
        ErrorInput(
            description=row[0],
            argument=row[1],
            make=maker(row[2]),
            match=row[3],
            error_type=row[4] if len(row) > 4 else ValueError,  # type: ignore[misc]
        )
        for row in rows
    )
