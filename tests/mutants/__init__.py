"""Deliberately broken Helion kernels, each defined as a source patch of a real kernel module.

A :class:`Mutant` names a kernel module under ``kernels/``, one or more (original snippet, replacement)
pairs, the failure class it models and the op, dtype, problem and config that should expose it.
:func:`load_mutant` applies the patches to the module's current source text and executes the result as a
fresh module (registered in ``sys.modules`` and ``linecache`` so that Helion can read the patched kernel
source back). A module that is only reached through another one (the SSD backward kernels, called by the
combined op's autograd function) names that module as ``via``: the wrapper then comes from a fresh copy of
``via`` whose reference to the module is the patched one. A snippet that no longer occurs exactly once in the
kernel source raises :class:`StaleMutant`: the catalog must follow the kernels, never silently test nothing.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import linecache
import sys
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


class StaleMutant(AssertionError):
    """A patch whose original snippet is missing from (or ambiguous in) the current kernel source."""


DETERMINISM = "determinism"
"""``Mutant.expect`` of a mutant whose values are right but not bitwise reproducible: only the gate's determinism
rerun (``parity.gate._determinism``: identical inputs, bitwise comparison) may reject it."""


@dataclass(frozen=True)
class Mutant:
    """One broken variant of a kernel and where the gate must see it.

    patches: (original, replacement) pairs applied in order; each original must occur exactly once.
    function: the wrapper the candidate Impl calls (the op's signature plus ``config=``).
    config: index into the kernel module's CONFIGS (None: the kernel's default config), or a literal
        config mapping.
    backward: whether gradients are judged (the kernel has an autograd backward).
    expect: the quantity (output or ``grad.<input>``) whose verdict must fail, an engine error text, or
        :data:`DETERMINISM`: every value passes, and the gate's bitwise rerun check must reject it.
    gpu: only observable on a GPU (the Triton interpreter hides it); not run on CPU.
    via: the module that imports ``module`` and defines ``function`` (and CONFIGS), when ``function`` is
        not in ``module`` itself.
    extra: ``harmless`` = (config, problem or None for the same problem) under which the mutant is expected
        to pass (its bug depends on blocks); ``cpu_problem`` = a problem on which a GPU-only mutant passes on
        CPU (why it is GPU-only).
    """

    name: str
    failure_class: str
    module: str
    function: str
    patches: tuple[tuple[str, str], ...]
    op: str
    problem: Mapping[str, Any]
    expect: str
    dtype: str = "float32"
    config: int | Mapping[str, Any] | None = None
    backward: bool = False
    gpu: bool = False
    note: str = ""
    seed: int = 0
    extra: Mapping[str, Any] = field(default_factory=dict)
    via: str = ""

    @property
    def entry(self) -> str:
        """The module that defines the wrapper (``via``, else ``module``)."""
        return self.via or self.module


class _SourceLoader(importlib.abc.InspectLoader):
    """Serves a patched module's source to ``inspect``/``linecache`` (Helion re-reads kernel source)."""

    def __init__(self, source: str):
        self.source = source

    def get_source(self, fullname: str) -> str:
        return self.source


def source_path(module: str) -> Path:
    """The file of kernel module ``module`` (e.g. ``kernels.bmm_chunk``)."""
    return ROOT.joinpath(*module.split(".")).with_suffix(".py")


def patched_source(mutant: Mutant) -> str:
    """The kernel module's current source with the mutant's patches applied; StaleMutant if a snippet is
    missing or ambiguous, or a patch changes nothing."""
    path = source_path(mutant.module)
    if not path.is_file():
        raise StaleMutant(f"mutant {mutant.name}: kernel module {mutant.module} ({path}) does not exist")
    text = path.read_text()
    for original, replacement in mutant.patches:
        count = text.count(original)
        if count != 1:
            what = "no longer occurs" if count == 0 else f"occurs {count} times"
            raise StaleMutant(
                f"stale mutant {mutant.name}: the snippet {original!r} {what} in {path}; "
                f"update tests/mutants/catalog.py to the current kernel"
            )
        if original == replacement:
            raise StaleMutant(f"mutant {mutant.name}: a patch replaces {original!r} by itself")
        text = text.replace(original, replacement)
    return text


def _execute(name: str, filename: str, source: str) -> types.ModuleType:
    """Run ``source`` as a new top-level module ``name``, its text served to inspect/linecache."""
    # mtime None: linecache.checkcache keeps the entry (there is no file to compare against).
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    spec = importlib.util.spec_from_loader(name, _SourceLoader(source), origin=filename)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__file__ = filename
    sys.modules[name] = module
    exec(compile(source, filename, "exec"), module.__dict__)
    return module


def load_mutant(mutant: Mutant) -> types.ModuleType:
    """Execute the patched source as a new top-level module ``parity_mutant_<name>`` (fresh on every call;
    Helion's generated code imports its kernel's module by name, so it must be in ``sys.modules``)."""
    name = f"parity_mutant_{mutant.name}"
    return _execute(name, f"<mutant {mutant.name} of {source_path(mutant.module)}>", patched_source(mutant))


def load_entry(mutant: Mutant) -> types.ModuleType:
    """The module defining the mutant's wrapper: the patched module itself, or a fresh copy of ``via`` whose
    global bound to the module (``from package import module``) is the patched module."""
    patched = load_mutant(mutant)
    if not mutant.via:
        return patched
    path = source_path(mutant.via)
    entry = _execute(f"parity_mutant_{mutant.name}_via", f"<{path} for mutant {mutant.name}>", path.read_text())
    attr = mutant.module.rpartition(".")[2]
    if getattr(entry, attr, None) is not importlib.import_module(mutant.module):
        raise StaleMutant(f"mutant {mutant.name}: {mutant.via} does not import {mutant.module} as {attr!r}")
    setattr(entry, attr, patched)
    return entry


def resolve_config(mutant: Mutant, config: int | Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """An explicit config: ``CONFIGS[config]`` of the real entry module for an index, else ``config`` as is."""
    if not isinstance(config, int):
        return config
    configs = getattr(importlib.import_module(mutant.entry), "CONFIGS", None)
    if configs is None or not 0 <= config < len(configs):
        raise StaleMutant(f"mutant {mutant.name}: {mutant.entry}.CONFIGS has no entry {config}")
    return configs[config]


def real_function(mutant: Mutant) -> Any:
    """The unpatched wrapper (the control)."""
    fn = getattr(importlib.import_module(mutant.entry), mutant.function, None)
    if fn is None:
        raise StaleMutant(f"mutant {mutant.name}: {mutant.entry} has no function {mutant.function!r}")
    return fn


def mutant_function(mutant: Mutant) -> Any:
    """The patched wrapper, from a freshly loaded mutant module."""
    fn = getattr(load_entry(mutant), mutant.function, None)
    if fn is None:
        raise StaleMutant(f"mutant {mutant.name}: the patched {mutant.entry} has no function {mutant.function!r}")
    return fn
