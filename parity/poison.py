"""Pre-fill fresh allocations so that outputs an implementation forgets to write cannot pass by luck.

Inside :func:`poisoned`, every floating tensor returned by ``torch.empty``, ``empty_like``,
``empty_strided`` and ``Tensor.new_empty`` is filled with a pattern before the implementation sees
it: NaN (unwritten outputs become non-finite) or a large finite garbage value (catches code that
masks NaN or reads its output before writing it). Allocations made through ``zeros`` are untouched.

The garbage value depends on the dtype of the tensor filled: it must be finite there (a value that
overflows makes the fill itself raise, failing every correct kernel), so see :func:`garbage`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from parity.errors import ParityError

GARBAGE = -7.25e4
"""The garbage fill of dtypes wide enough to hold it (fp64, fp32, bf16): far outside any input's range."""


@functools.cache
def garbage(dtype: torch.dtype) -> float:
    """The garbage fill of ``dtype``, exactly as stored: :data:`GARBAGE`, or half the dtype's most negative
    finite value where that is smaller in magnitude (fp16: -32752; 7.25e4 overflows fp16's 65504), so it is
    representable and stays finite when a kernel adds an input-sized term to it."""
    value = max(GARBAGE, -torch.finfo(dtype).max / 2)
    return float(torch.tensor(value, dtype=torch.float64).to(dtype))


def _nan(dtype: torch.dtype) -> float:
    return float("nan")


PATTERNS: dict[str, Callable[[torch.dtype], float]] = {"nan": _nan, "garbage": garbage}
"""Pattern name -> the fill value for a tensor of a given dtype."""

_FACTORIES = {torch.empty, torch.empty_like, torch.empty_strided, torch.Tensor.new_empty}


class _Poison(TorchFunctionMode):
    def __init__(self, fill: Callable[[torch.dtype], float]):
        super().__init__()
        self.fill = fill

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if func in _FACTORIES and isinstance(out, torch.Tensor) and out.is_floating_point():
            with torch.no_grad():
                out.fill_(self.fill(out.dtype))
        return out


def poisoned(fn: Callable[..., Any], pattern: str) -> Callable[..., Any]:
    """``fn`` with its fresh allocations pre-filled with ``pattern`` ("nan" or "garbage")."""
    if pattern not in PATTERNS:
        raise ParityError(f"unknown poison pattern {pattern!r}: expected one of {', '.join(PATTERNS)}")

    def wrapper(**kwargs: Any) -> Any:
        with _Poison(PATTERNS[pattern]):
            return fn(**kwargs)

    return wrapper
