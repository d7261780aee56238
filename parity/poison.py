"""Pre-fill fresh allocations so that outputs an implementation forgets to write cannot pass by luck.

Inside :func:`poisoned`, every floating tensor returned by ``torch.empty``, ``empty_like``,
``empty_strided`` and ``Tensor.new_empty`` is filled with a pattern before the implementation sees
it: NaN (unwritten outputs become non-finite) or a large finite garbage value (catches code that
masks NaN or reads its output before writing it). Allocations made through ``zeros`` are untouched.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from parity.errors import ParityError

PATTERNS: dict[str, float] = {"nan": float("nan"), "garbage": -7.25e4}
_FACTORIES = {torch.empty, torch.empty_like, torch.empty_strided, torch.Tensor.new_empty}


class _Poison(TorchFunctionMode):
    def __init__(self, value: float):
        super().__init__()
        self.value = value

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if func in _FACTORIES and isinstance(out, torch.Tensor) and out.is_floating_point():
            with torch.no_grad():
                out.fill_(self.value)
        return out


def poisoned(fn: Callable[..., Any], pattern: str) -> Callable[..., Any]:
    """``fn`` with its fresh allocations pre-filled with ``pattern`` ("nan" or "garbage")."""
    if pattern not in PATTERNS:
        raise ParityError(f"unknown poison pattern {pattern!r}: expected one of {', '.join(PATTERNS)}")

    def wrapper(**kwargs: Any) -> Any:
        with _Poison(PATTERNS[pattern]):
            return fn(**kwargs)

    return wrapper
