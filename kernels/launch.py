"""The explicit-config launcher every kernel module shares: :func:`launch` runs a Helion kernel with one explicit
config (the kernel's default config when none is given), never autotuning, and keeps each compiled config per
argument signature.

Every kernel is declared with dynamic shapes; which build runs is chosen here. Training runs each kernel
specialized to its call's shapes (Helion's ``static_shapes=True``: compiled once per shape, and faster at the
training shape, see ``bench/results/h200-run9``). Inside :func:`any_shape` a launch runs the dynamic build, compiled
once per config, dtype and size-0/1 pattern whatever the shapes: what a gate over many generated shapes needs.
The gate judges both: the static build at the training shapes, the dynamic one on the generated shapes."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Hashable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import helion
import torch

ConfigLike = helion.Config | Mapping[str, Any] | None

_COMPILED: dict[tuple[Hashable, ...], Callable[..., Any]] = {}

_ANY_SHAPE: ContextVar[bool] = ContextVar("parity_any_shape", default=False)


@contextmanager
def any_shape() -> Iterator[None]:
    """Launches within run each kernel's dynamic-shape build (one compilation serves every shape)."""
    token = _ANY_SHAPE.set(True)
    try:
        yield
    finally:
        _ANY_SHAPE.reset(token)


def as_config(config: helion.Config | Mapping[str, Any]) -> helion.Config:
    """A ``helion.Config`` from a Config or a plain dict of its fields."""
    return config if isinstance(config, helion.Config) else helion.Config(**dict(config))


def _signature(value: Any) -> Hashable:
    """What a static-shape Helion kernel specializes on: a tensor's dtype, shape, strides, device and 16-byte
    alignment; any other argument's value."""
    if isinstance(value, torch.Tensor):
        return (value.dtype, tuple(value.shape), value.stride(), value.device, value.data_ptr() % 16 == 0)
    return value


@functools.cache
def _static_twin(kernel: helion.Kernel) -> helion.Kernel:
    """The same kernel compiled per shape (``static_shapes=True``)."""
    return helion.kernel(kernel.fn, settings=kernel.settings.copy(static_shapes=True))


def launch(kernel: helion.Kernel, args: tuple[Any, ...], config: ConfigLike, *, static: bool = False) -> Any:
    """Run ``kernel(*args)`` with ``config`` (the kernel's default config when None), never autotuning.
    Compiles once per argument signature and config; later calls skip Helion's binding entirely. Runs the
    kernel's static-shape twin (compiled per shape) outside :func:`any_shape`.

    ``static``: the static twin even inside :func:`any_shape`. For a kernel that tiles one tensor's extent and
    indexes another tensor with that tile, when that extent is 1: Helion 1.5.0's dynamic shapes drop the index
    of the size-1 dim while the tile keeps its block size (wrong results, e.g. a 1-row norm)."""
    if (static or not _ANY_SHAPE.get()) and not kernel.settings.static_shapes:
        kernel = _static_twin(kernel)
    config_key = None if config is None else json.dumps(dict(config), sort_keys=True, default=str)
    pointers = [arg.data_ptr() for arg in args if isinstance(arg, torch.Tensor)]
    aliasing = tuple(pointers.index(p) for p in pointers)  # Helion also specializes on aliased inputs
    key = (kernel, config_key, aliasing, *map(_signature, args))
    compiled = _COMPILED.get(key)
    if compiled is None:
        bound = kernel.bind(args)
        cfg = bound.config_spec.default_config() if config is None else as_config(config)
        compiled = _COMPILED[key] = bound.compile_config(cfg)
    return compiled(*args)
