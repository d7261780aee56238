"""The explicit-config launcher every kernel module shares: :func:`launch` runs a Helion kernel with one explicit
config (the kernel's default config when none is given), never autotuning, and keeps each compiled config per
argument signature.

Every kernel is declared with dynamic shapes: one compilation per config, dtype and size-0/1 pattern serves every
shape. A kernel config may ask for the build specialized to the call's shapes instead (:data:`STATIC`: compiled
once per shape; faster at the SSD's training shape, ``bench/results/h200-run9``), what a promoted config can
choose for training. Inside :func:`any_shape` (the gate's generated shapes) that request is ignored, so the gate
compiles little, and it judges the static build where training runs it: at the training shapes, outside the
context.

Index width. Helion 1.5.0's ``index_dtype`` is "auto" (None) by default: a bind picks int64 only when an argument's
*numel* exceeds 2**31 - 1, and that bit is part of its bound-kernel cache key; a strided view whose numel fits but
whose largest element offset does not (a slice of a larger buffer) gets, and reuses, the int32 build, and tensors the
kernel allocates itself are not looked at. :func:`launch` therefore runs the kernel's ``index_dtype=torch.int64``
twin (:func:`needs_int64`) whenever an argument, or a tensor the build's host code hands the device kernel (found by
running that host code on meta tensors, :func:`_device_args_need_int64`), has a numel or largest element offset
past 2**31 - 1; every other call keeps the default (int32) build.

Scratch allocator. A config with device-side tensor descriptors (``indexing`` "tensor_descriptor" without host
descriptors) builds a Triton kernel that allocates global scratch at launch, which fails with "no allocator was
set" unless one is installed; Helion 1.5.0's generated code installs it only for host-side descriptors, and Triton
keeps it per context (each thread: autograd runs a CUDA backward on its own device thread). :func:`launch`
therefore installs Helion's allocator, where none is set, before every launch (the H100's tuned bmm_chunk failed the
promote gate without it: ``bench/results/h200-run35/call3``)."""

from __future__ import annotations

import copy
import functools
import json
import warnings
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import helion
import torch

from parity.lookup import STATIC_SHAPES

ConfigLike = helion.Config | Mapping[str, Any] | None

_COMPILED: dict[tuple[Hashable, ...], _Replay] = {}

INT32_MAX = torch.iinfo(torch.int32).max
"""The largest element count or element offset an int32-indexed build addresses."""

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


def _arguments_key(args: tuple[Any, ...]) -> tuple[tuple[Hashable, ...], bool]:
    """(what a static-shape Helion kernel specializes on, argument by argument: a tensor's dtype, shape, strides,
    device, 16-byte alignment and the first argument it aliases, any other argument's value; whether a tensor has a
    size-1 dimension), in one pass: :func:`launch` runs it on every call."""
    key: list[Hashable] = []
    pointers: list[int] = []
    size_one = False
    for value in args:
        if isinstance(value, torch.Tensor):
            pointer, shape = value.data_ptr(), value.shape
            alias = pointers.index(pointer) if pointer in pointers else len(pointers)
            key.append((value.dtype, shape, value.stride(), value.device, pointer % 16 == 0, alias))
            pointers.append(pointer)
            size_one = size_one or 1 in shape
        else:
            key.append(value)
    return tuple(key), size_one


_FIELDS: dict[int, tuple[Any, Any, dict[str, Any], bool, str]] = {}
"""Per config object (by id): the object (kept, so that its id is not reused), a deep copy (a config changed in
place is read again), its fields without :data:`STATIC`, whether it asks for the static build, and its cache key.
Cleared when it reaches :data:`_FIELDS_MAX` entries (a caller that builds a new dict per call)."""

_FIELDS_MAX = 4096


def _fields(config: ConfigLike) -> tuple[dict[str, Any], bool, str]:
    """(the config's fields without :data:`STATIC`, whether it asks for the static build, its cache key), read once
    per config object: the drop-ins pass the same promoted dicts on every call. Don't mutate the fields."""
    if config is None:
        return {}, False, "{}"
    plain = config if type(config) is dict else dict(config)
    hit = _FIELDS.get(id(config))
    if hit is not None and hit[0] is config and hit[1] == plain:
        return hit[2], hit[3], hit[4]
    fields = dict(plain)
    wants_static = bool(fields.pop(STATIC, False))
    key = json.dumps(fields, sort_keys=True, default=str)
    if len(_FIELDS) >= _FIELDS_MAX:
        _FIELDS.clear()
    _FIELDS[id(config)] = (config, copy.deepcopy(plain), fields, wants_static, key)
    return fields, wants_static, key


def max_offset(shape: Sequence[int], stride: Sequence[int]) -> int:
    """The largest element offset of a strided tensor from its first element, ``sum((size - 1) * |stride|)``; 0 for
    an empty tensor (nothing is addressed)."""
    if 0 in shape:
        return 0
    return sum((size - 1) * abs(step) for size, step in zip(shape, stride, strict=True))


def needs_int64(value: Any) -> bool:
    """Whether a kernel argument needs 64-bit offsets: a tensor whose numel or largest element offset exceeds
    :data:`INT32_MAX`, or a list, tuple or dict holding one. Helion 1.5.0's "auto" index dtype looks at numel only."""
    if isinstance(value, torch.Tensor):
        return value.numel() > INT32_MAX or max_offset(value.shape, value.stride()) > INT32_MAX
    if isinstance(value, list | tuple):
        return any(needs_int64(item) for item in value)
    if isinstance(value, Mapping):
        return any(needs_int64(item) for item in value.values())
    return False


def _meta(value: Any) -> Any:
    """A tensor's meta twin (same dtype, shape and strides, no storage); containers mapped; anything else as is."""
    if isinstance(value, torch.Tensor):
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
    if isinstance(value, list | tuple) and not hasattr(value, "_fields"):
        return type(value)(_meta(item) for item in value)
    return value


def _device_args_need_int64(compiled: Callable[..., Any], args: tuple[Any, ...]) -> bool:
    """Whether the build's host code hands its device kernel a tensor that needs 64-bit offsets (outputs it
    allocates included: a chunk matrix can be larger than every input): the host code runs on meta copies of the
    arguments with a launcher that records the device kernel's arguments instead of launching it. If the host code
    cannot run on meta tensors, True (the int64 build is correct on any input) with a warning."""
    seen: list[bool] = []

    def record(_kernel: Any, _grid: Any, *kernel_args: Any, **_options: Any) -> None:
        seen.append(needs_int64(kernel_args))

    device = next((arg.device for arg in args if isinstance(arg, torch.Tensor)), None)
    try:
        with _sm_count_of(device):
            compiled(*map(_meta, args), _launcher=record)
    except Exception as error:  # unknown: answered with the build that is always correct
        warnings.warn(f"index-width probe failed ({error!r}); running the int64-indexed build", stacklevel=3)
        return True
    return any(seen)


@contextmanager
def _sm_count_of(device: torch.device | None) -> Iterator[None]:
    """Within, Helion's ``get_num_sm`` answers for ``device`` when asked about the meta device: a persistent
    config's host code sizes its grid by the SM count of its arguments' device, which meta tensors do not have."""
    original = helion.runtime.get_num_sm

    def count(asked: torch.device, **options: Any) -> int:
        return original(device if asked.type == "meta" and device is not None else asked, **options)

    helion.runtime.get_num_sm = count
    try:
        yield
    finally:
        helion.runtime.get_num_sm = original


@functools.cache
def _twin(kernel: helion.Kernel, *, static: bool, wide: bool) -> helion.Kernel:
    """The same kernel compiled per shape (``static_shapes=True``) and/or with 64-bit offsets
    (``index_dtype=torch.int64``); the kernel itself when neither is asked or it already has them."""
    changes: dict[str, Any] = {}
    if static and not kernel.settings.static_shapes:
        changes["static_shapes"] = True
    if wide and kernel.settings.index_dtype != torch.int64:
        changes["index_dtype"] = torch.int64
    return helion.kernel(kernel.fn, settings=kernel.settings.copy(**changes)) if changes else kernel


def _compile(kernel: helion.Kernel, args: tuple[Any, ...], fields: Mapping[str, Any]) -> Callable[..., Any]:
    """``kernel`` bound to ``args`` and compiled with the config ``fields`` (its default config when empty)."""
    bound = kernel.bind(args)
    cfg = as_config(fields) if fields else bound.config_spec.default_config()
    return bound.compile_config(cfg)


def launch(kernel: helion.Kernel, args: tuple[Any, ...], config: ConfigLike, *, static: bool = False) -> Any:
    """Run ``kernel(*args)`` with ``config`` (the kernel's default config when None or empty), never autotuning.
    Compiles once per argument signature and config; later calls skip Helion's binding entirely, and on CUDA
    Triton's too (:class:`_Replay`). A config with
    :data:`STATIC` true runs the static-shape twin (compiled per shape) outside :func:`any_shape`.

    ``static``: the static twin always. For a kernel that tiles one tensor's extent and indexes another tensor
    with that tile, when that extent is 1: Helion 1.5.0's dynamic shapes drop the index of the size-1 dim while
    the tile keeps its block size (wrong results, e.g. a 1-row norm).

    Whatever the build, a call whose arguments or device-kernel tensors need 64-bit offsets (see the module
    docstring) runs its ``index_dtype=torch.int64`` twin; the choice is made once per signature, like the build.
    Every call runs this function (training's host time): its steady state is two dict lookups and one pass over
    the arguments."""
    fields, wants_static, config_key = _fields(config)
    arguments, size_one = _arguments_key(args)
    kernel = _shape_build(kernel, wants_static, size_one, static)
    key = (kernel, config_key, arguments)  # Helion also specializes on aliased inputs: in the arguments' key
    replay = _COMPILED.get(key)
    if replay is None:
        replay = _COMPILED[key] = _Replay(_choose(kernel, args, fields)[1])
    helion.runtime.set_triton_allocator()  # this thread's context may have none (module docstring)
    return replay(args)


class _Replay:
    """One compiled build on one arguments' key of :func:`launch`. Its first call runs through Helion's launcher and
    records the Triton kernels it compiled; later calls launch those directly (``CompiledKernel[grid](*args)``),
    skipping Triton's ``JITFunction.run``: its binding, specialization and cache lookup are most of a launch's host
    time. The key fixes all Triton specializes on (dtypes, 16-byte alignment, and the integers the host code passes,
    derived from the shapes and strides it fixes; tensors the host code allocates are always aligned), so that lookup
    would pick the same kernel. Builds whose launches are not all plain (other launcher options; the CPU interpreter,
    which returns no compiled kernel) keep Helion's launcher."""

    __slots__ = ("compiled", "kernels")

    def __init__(self, compiled: Callable[..., Any]) -> None:
        self.compiled = compiled
        self.kernels: list[tuple[Any, Any]] | None = None
        """(Triton JITFunction, its CompiledKernel) per launch of a call, in order; None before the first call,
        empty when the build keeps Helion's launcher."""

    def __call__(self, args: tuple[Any, ...]) -> Any:
        if self.kernels is None:
            return self._record(args)
        if not self.kernels:
            return self.compiled(*args)
        launches = iter(self.kernels)

        def replay(triton_kernel: Any, grid: tuple[int, ...], *kernel_args: Any, **_options: Any) -> None:
            jit, compiled = next(launches)
            if jit is not triton_kernel:  # the key fixes the host code's path: checked, not assumed
                raise RuntimeError(f"{triton_kernel} launched where {jit} was recorded")
            compiled[(*grid, 1, 1)[:3]](*kernel_args)

        return self.compiled(*args, _launcher=replay)

    def _record(self, args: tuple[Any, ...]) -> Any:
        recorded: list[tuple[Any, Any]] = []
        plain = True

        def record(triton_kernel: Any, grid: tuple[int, ...], *kernel_args: Any, **options: Any) -> Any:
            nonlocal plain
            result = helion.runtime.default_launcher(triton_kernel, grid, *kernel_args, **options)
            plain = plain and set(options) <= {"num_warps", "num_stages"} and hasattr(result, "packed_metadata")
            recorded.append((triton_kernel, result))
            return result

        out = self.compiled(*args, _launcher=record)
        self.kernels = recorded if plain else []
        return out


def _choose(
    kernel: helion.Kernel, args: tuple[Any, ...], fields: Mapping[str, Any]
) -> tuple[helion.Kernel, Callable[..., Any]]:
    """The build to run on ``args`` (``kernel``, or its int64 twin where offsets need 64 bits) and its compiled
    config."""
    if not needs_int64(args):
        compiled = _compile(kernel, args, fields)
        if not _device_args_need_int64(compiled, args):
            return kernel, compiled
    wide = _twin(kernel, static=False, wide=True)
    return wide, _compile(wide, args, fields)


def build(kernel: helion.Kernel, args: tuple[Any, ...], config: ConfigLike, *, static: bool = False) -> helion.Kernel:
    """The kernel object (the kernel or one of its twins) :func:`launch` runs on these arguments with this config;
    for tests and benchmarks that inspect or time one build."""
    fields, wants_static, _ = _fields(config)
    kernel = _shape_build(kernel, wants_static, _arguments_key(args)[1], static)
    return _choose(kernel, args, fields)[0]


def _shape_build(kernel: helion.Kernel, wants_static: bool, size_one: bool, static: bool) -> helion.Kernel:
    """The kernel or its static-shape twin: ``static``, or a config that asks for it (``wants_static``) outside
    :func:`any_shape` and off size-1 dims (``size_one``)."""
    return _twin(kernel, static=static or (wants_static and not _ANY_SHAPE[0] and not size_one), wide=False)
