"""The runtime side of the per-GPU config store: find the config promoted for a call, refuse a stale one.

The drop-in kernels (``kernels.ssd_combined``, ``kernels.layernorm_gated``) import this module into a training
process, so it imports nothing but the standard library (and torch, already loaded, for the device name): no
engine, no report, no hypothesis. :mod:`parity.store` builds the writer side (promote, verify, list) on it.

The store is plain JSON under ``configs/``: one file per device and op, ``configs/<device>/<op>.json``,
holding entries keyed by implementation, dtype and shape bucket. Each entry carries the config, the hash of
the kernel source it was gated with, the helion/triton/torch versions and the gate's evidence.

:func:`promoted_config` runs on every forward of a drop-in kernel, so everything it derives is memoized
in-process: the device key, the library versions, the kernel source hashes and the default root for the
process lifetime (a kernel edited, or a library upgraded, mid-process is seen after a restart, or after
:func:`clear_caches`), and each lookup's result for as long as the store file's stat is unchanged (a new
promotion, which replaces the file, is seen on the next call). The steady-state cost is one ``os.stat``.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib
import importlib.metadata
import inspect
import json
import os
import re
import sys
import textwrap
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from parity.errors import ParityError

VERSIONED = ("helion", "triton", "torch")
FIELDS = ("op", "target", "dtype", "bucket", "config", "kernel_hash", "versions", "date", "evidence")
"""The fields every store entry has (what :meth:`parity.store.Store.put` writes)."""


STATIC_SHAPES = "static_shapes"
"""A kernel config's key (parity's, not Helion's): true runs the kernel's static-shape build (``kernels.launch``);
promoted configs carry it, so the launcher, the gate's config check and the tuner read it from here."""


class StaleConfigError(ParityError):
    """A promoted entry no longer matches the kernel source or the library versions."""


_DEVICE_KEYS: dict[int, str] = {}


def device_key(device: str) -> str:
    """A file-name-safe key for the device: GPU name and compute capability, or the CPU. ``"cuda"`` means the
    current CUDA device, ``"cuda:N"`` device N. Memoized per device index (a GPU's name never changes)."""
    if device == "cpu":
        return "cpu-interpreter"
    import torch

    index = torch.device(device).index
    index = torch.cuda.current_device() if index is None else index
    key = _DEVICE_KEYS.get(index)
    if key is None:
        major, minor = torch.cuda.get_device_capability(index)
        name = re.sub(r"[^a-z0-9]+", "-", torch.cuda.get_device_name(index).lower()).strip("-")
        key = _DEVICE_KEYS[index] = f"{name}-sm{major}{minor}"
    return key


@functools.cache
def _installed_versions() -> tuple[tuple[str, str], ...]:
    found = []
    for name in VERSIONED:
        try:
            found.append((name, importlib.metadata.version(name)))
        except importlib.metadata.PackageNotFoundError:
            found.append((name, "absent"))
    return tuple(found)


def versions() -> dict[str, str]:
    """Installed versions of the libraries whose code generation decides what a config computes (looked up
    once per process: the code running is the code imported at start)."""
    return dict(_installed_versions())


def _package_modules(module: ModuleType) -> dict[str, ModuleType]:
    """``module`` and every module of its top-level package it reaches through its globals (imported modules,
    and the modules of imported functions and classes), transitively: the code a kernel entry point runs."""
    top = module.__name__.partition(".")[0]
    found: dict[str, ModuleType] = {}
    stack = [module]
    while stack:
        current = stack.pop()
        if current.__name__ in found:
            continue
        found[current.__name__] = current
        for value in vars(current).values():
            name = value.__name__ if isinstance(value, ModuleType) else getattr(value, "__module__", None)
            if isinstance(name, str) and name.partition(".")[0] == top and name not in found:
                reached = sys.modules.get(name)
                if reached is not None and getattr(reached, "__file__", None):
                    stack.append(reached)
    return found


@functools.cache
def source_hash(target: str) -> str:
    """sha256 over the source files of the module named by ``"module:function"`` and of the modules of its
    package it uses (so editing a helper kernel module it calls makes its entries stale too). Memoized for
    the process lifetime: the code that runs is the code imported at start, so a kernel edited mid-process
    needs a restart (or :func:`clear_caches`) before its entries read as stale."""
    module = importlib.import_module(target.partition(":")[0])
    if getattr(module, "__file__", None) is None:
        raise ParityError(f"{target}: module has no source file to hash")
    digest = hashlib.sha256()
    for name, reached in sorted(_package_modules(module).items()):
        path = reached.__file__
        assert path is not None  # _package_modules reaches only modules with a source file, and module has one
        digest.update(name.encode() + b"\0" + Path(path).read_bytes() + b"\0")
    return digest.hexdigest()


_CONSTANTS = (int, float, complex, str, bytes, bool, type(None), tuple, list, dict)
"""Types of the module-level values :func:`code_hash` takes by their repr. A value of a type of the package is taken
by its type's source and its repr, unless that repr holds an address; a value of any other type by nothing (the
library versions cover it)."""


@functools.cache
def code_hash(target: str) -> str:
    """sha256 over the source of the function named by ``"module:function"`` (a Helion kernel: its Python
    function) and of what its code names, transitively, within its top-level package: functions and classes by
    their source, modules by their whole file, other values by their repr. What the kernel's device code is
    generated from, and no more: an edit of the host code around it (the launcher, the op's glue, another kernel
    of its module) leaves it unchanged, so a kernel's tuning record (keyed by it) survives such an edit, while
    :func:`source_hash`, over every module the entry point reaches, keys what judges the whole op (the tuner's
    judgements, the store's entries). Memoized like :func:`source_hash`."""
    module_name, _, name = target.partition(":")
    module = importlib.import_module(module_name)
    top = module_name.partition(".")[0]
    digest = hashlib.sha256()
    seen: set[int] = set()
    stack: list[Any] = [_unwrapped(getattr(module, name))]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        label = f"{getattr(current, '__module__', '')}:{getattr(current, '__qualname__', '')}"
        digest.update(label.encode() + b"\0" + inspect.getsource(current).encode() + b"\0")
        if not inspect.isfunction(current):
            continue
        for ref in sorted(_names(current)):
            if ref not in current.__globals__:
                continue
            value = _unwrapped(current.__globals__[ref])
            if isinstance(value, ModuleType):
                if value.__name__.partition(".")[0] == top and getattr(value, "__file__", None):
                    digest.update(f"{ref}=module {value.__name__}\0".encode())
                    digest.update(Path(value.__file__).read_bytes() + b"\0")  # type: ignore[arg-type]
            elif inspect.isfunction(value) or inspect.isclass(value):
                if getattr(value, "__module__", "").partition(".")[0] == top:
                    stack.append(value)
            elif getattr(type(value), "__module__", "").partition(".")[0] == top:
                stack.append(type(value))
                shown = repr(value)
                digest.update(f"{ref}={type(value).__qualname__}{'' if ' at 0x' in shown else shown}\0".encode())
            elif isinstance(value, _CONSTANTS) or type(value).__module__ == "torch":
                digest.update(f"{ref}={value!r}\0".encode())
    return digest.hexdigest()


def _unwrapped(value: Any) -> Any:
    """The Python function behind a kernel object (a Helion kernel's ``fn``) or a decorated function."""
    fn = getattr(value, "fn", None)
    value = fn if inspect.isfunction(fn) else value
    return inspect.unwrap(value) if inspect.isfunction(value) else value


def _names(fn: Any) -> set[str]:
    """Every bare name in a function's source: its body, nested code, default values, annotations and decorators
    (a Helion kernel's settings may be a module-level dict passed to its decorator)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}


def project_root(start: Path | None = None) -> Path:
    """The nearest directory at or above ``start`` (default: cwd, then this package) with pyproject.toml."""
    candidates = [start or Path.cwd(), Path(__file__).resolve().parent]
    for base in candidates:
        for path in (base, *base.parents):
            if (path / "pyproject.toml").is_file() and (path / "tolerances.toml").is_file():
                return path
    raise ParityError("cannot find the project root (a directory with pyproject.toml and tolerances.toml)")


def default_root() -> Path:
    """``configs/`` at the project root."""
    return project_root() / "configs"


@dataclass(frozen=True)
class Key:
    """Where an entry lives and what it is for."""

    device: str
    op: str
    impl_target: str
    dtype: str
    bucket: str

    def matches(self, entry: Mapping[str, Any]) -> bool:
        return (entry.get("target"), entry.get("dtype"), entry.get("bucket")) == (
            self.impl_target,
            self.dtype,
            self.bucket,
        )


class StoreReader:
    """Read the entries under one root directory (:class:`parity.store.Store` adds writing)."""

    def __init__(self, root: Path | str | None = None):
        self.root = Path(root) if root is not None else default_root()

    def path(self, device: str, op: str) -> Path:
        return self.root / device / f"{op}.json"

    def entries(self, device: str, op: str) -> list[dict[str, Any]]:
        """Every entry of one device and op ([] when there is no file)."""
        path = self.path(device, op)
        if not path.exists():
            return []
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ParityError(f"{path}: malformed JSON: {exc}") from exc
        if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
            raise ParityError(f"{path}: expected an object with a list 'entries'")
        return data["entries"]

    def find(self, key: Key) -> dict[str, Any] | None:
        """The entry for ``key``, exact bucket first, then the wildcard bucket ``*``."""
        entries = self.entries(key.device, key.op)
        for bucket in (key.bucket, "*"):
            for entry in entries:
                if isinstance(entry, dict) and (entry.get("target"), entry.get("dtype"), entry.get("bucket")) == (
                    key.impl_target,
                    key.dtype,
                    bucket,
                ):
                    return entry
        return None

    def staleness(self, entry: Any, *, compare_versions: bool = True) -> list[str]:
        """Why ``entry`` no longer applies (empty when it still does): the kernel source or (``compare_versions``)
        a library version changed, or the entry is malformed (not an object, a field missing, a kernel module that
        no longer imports) - never an exception."""
        if not isinstance(entry, dict):
            return [f"invalid entry: not an object ({type(entry).__name__})"]
        missing = [f for f in FIELDS if f not in entry]
        if missing:
            return [f"invalid entry: missing field(s) {', '.join(missing)}"]
        target = entry["target"]
        if not isinstance(target, str) or not isinstance(entry["versions"], dict):
            return ["invalid entry: 'target' must be a string and 'versions' an object"]
        module, _, function = target.partition(":")
        try:
            current = source_hash(target)
        except Exception as exc:  # a renamed or deleted kernel module, or one that no longer imports
            return [f"the kernel {target} cannot be loaded: {type(exc).__name__}: {exc}"]
        if function and not hasattr(importlib.import_module(module), function):
            return [f"the kernel {target} cannot be loaded: {module} has no {function!r}"]
        reasons = []
        if entry["kernel_hash"] != current:
            reasons.append(f"the source of {target.partition(':')[0]} changed since it was gated")
        if compare_versions:
            now = versions()
            for name, version in entry["versions"].items():
                if now.get(name) != version:
                    reasons.append(f"{name} is {now.get(name)}, the entry was gated with {version}")
        return reasons


_WARNED: set[Key] = set()

Stamp = tuple[int, int, int] | None
_PROMOTED: dict[tuple[Path, Key], tuple[Path, Stamp, dict[str, Any] | None]] = {}
"""(store root, key) -> (the store file, its stamp when it was read, the config found there or None)."""


@functools.cache
def _default_store() -> StoreReader:
    """The runtime's store, rooted once per process (finding the project root costs ~0.1 ms)."""
    return StoreReader()


def _stamp(path: Path) -> Stamp:
    """(st_mtime_ns, st_ino, st_size) of ``path``, None when absent: an atomic replace or an edit changes it."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_mtime_ns, st.st_ino, st.st_size


def clear_caches() -> None:
    """Forget every memoized device key, version, source and code hash, default root and lookup (as a restart would)."""
    _DEVICE_KEYS.clear()
    _installed_versions.cache_clear()
    source_hash.cache_clear()
    code_hash.cache_clear()
    _default_store.cache_clear()
    _PROMOTED.clear()


def promoted_config(
    op: str, target: str, dtype: str, bucket: str, device: str, store: StoreReader | None = None
) -> dict[str, Any] | None:
    """The promoted config for a runtime call, never autotuning.

    No entry: warn once per key and return None (the kernel then uses its documented default).
    A stale entry (kernel source or library versions changed): StaleConfigError saying how to re-gate, on
    every call (only passing lookups and missing entries are cached). A cached result is reused while the
    store file's stat is unchanged. The returned dict is a shallow copy: don't mutate its nested values.
    """
    store = store or _default_store()
    key = Key(device_key(device), op, target, dtype, bucket)
    slot = (store.root, key)
    cached = _PROMOTED.get(slot)
    path = store.path(key.device, key.op) if cached is None else cached[0]
    stamp = _stamp(path)  # taken before reading: a write racing the read leaves a stale stamp, so a re-read
    if cached is not None and cached[1] == stamp:
        return None if cached[2] is None else dict(cached[2])
    entry = store.find(key)
    if entry is None:
        if key not in _WARNED:
            _WARNED.add(key)
            warnings.warn(
                f"parity: no promoted config for {op} {dtype} bucket {bucket} on {key.device}; "
                "using the kernel's default config",
                stacklevel=2,
            )
        _PROMOTED[slot] = (path, stamp, None)
        return None
    reasons = store.staleness(entry)
    if reasons:
        raise StaleConfigError(
            f"promoted config for {op} {dtype} bucket {bucket} on {key.device} is stale: {'; '.join(reasons)}. "
            f"Re-gate it: parity promote {op} --config <file with its config> --dtype {dtype}"
        )
    _PROMOTED[slot] = (path, stamp, entry["config"])
    return dict(entry["config"])
