"""The explicit-config launcher every kernel module shares: :func:`launch` runs a Helion kernel with one explicit
config (the kernel's default config when none is given), never autotuning, and keeps each compiled config per
argument signature.

Every kernel is declared with dynamic shapes: one compilation per config, dtype and size-0/1 pattern serves every
shape. A kernel config may ask for the build specialized to the call's shapes instead (:data:`STATIC`: compiled
once per shape; faster at the SSD's training shape, ``bench/results/h200-run9``), what a promoted config can
choose for training. Inside :func:`any_shape` (the gate's generated shapes) that request is ignored, so the gate
compiles little, and it judges the static build where training runs it: at the training shapes, outside the
context."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Hashable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import helion
import torch

from parity.lookup import STATIC_SHAPES

ConfigLike = helion.Config | Mapping[str, Any] | None

_COMPILED: dict[tuple[Hashable, ...], Callable[..., Any]] = {}

STATIC = STATIC_SHAPES
"""A kernel config's key (:data:`parity.lookup.STATIC_SHAPES`): true runs the kernel's static-shape build outside
:func:`any_shape`, except on arguments with a size-1 dimension, where Helion 1.5.0's static builds fail (e.g. the
SSD's chunk_state at one chunk of one head: "'NoneType' object has no attribute 'type'" in the interpreter)."""

_ANY_SHAPE = [0]
"""How many :func:`any_shape` contexts are open. Process-wide, not a context variable: autograd runs a CUDA
backward on its own device thread, which must see the context the forward was called in."""


@contextmanager
def any_shape() -> Iterator[None]:
    """Launches within (from any thread of the process) run each kernel's dynamic-shape build whatever its config
    asks (one compilation serves every shape)."""
    _ANY_SHAPE[0] += 1
    try:
        yield
    finally:
        _ANY_SHAPE[0] -= 1


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
    """Run ``kernel(*args)`` with ``config`` (the kernel's default config when None or empty), never autotuning.
    Compiles once per argument signature and config; later calls skip Helion's binding entirely. A config with
    :data:`STATIC` true runs the static-shape twin (compiled per shape) outside :func:`any_shape`.

    ``static``: the static twin always. For a kernel that tiles one tensor's extent and indexes another tensor
    with that tile, when that extent is 1: Helion 1.5.0's dynamic shapes drop the index of the size-1 dim while
    the tile keeps its block size (wrong results, e.g. a 1-row norm)."""
    fields = {} if config is None else dict(config)
    wants_static = bool(fields.pop(STATIC, False)) and not _ANY_SHAPE[0] and not _has_size_one(args)
    if (static or wants_static) and not kernel.settings.static_shapes:
        kernel = _static_twin(kernel)
    config_key = json.dumps(fields, sort_keys=True, default=str)
    pointers = [arg.data_ptr() for arg in args if isinstance(arg, torch.Tensor)]
    aliasing = tuple(pointers.index(p) for p in pointers)  # Helion also specializes on aliased inputs
    key = (kernel, config_key, aliasing, *map(_signature, args))
    compiled = _COMPILED.get(key)
    if compiled is None:
        bound = kernel.bind(args)
        cfg = as_config(fields) if fields else bound.config_spec.default_config()
        compiled = _COMPILED[key] = bound.compile_config(cfg)
    return compiled(*args)


def _has_size_one(args: tuple[Any, ...]) -> bool:
    """Whether a tensor argument has a dimension of size 1."""
    return any(isinstance(arg, torch.Tensor) and 1 in arg.shape for arg in args)
