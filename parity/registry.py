"""The op registry. Spec modules call :func:`register`; the modules to import are listed in
``pyproject.toml`` under ``[tool.parity] specs`` (or given explicitly)."""

from __future__ import annotations

import importlib
import tomllib
from collections.abc import Iterable
from pathlib import Path

from parity.errors import ParityError
from parity.lookup import project_root
from parity.spec import OpSpec

_REGISTRY: dict[str, OpSpec] = {}
_LOADED = False


def register(spec: OpSpec) -> OpSpec:
    """Add ``spec``; names are unique."""
    if spec.name in _REGISTRY and _REGISTRY[spec.name] is not spec:
        raise ParityError(f"op {spec.name!r} is registered twice")
    _REGISTRY[spec.name] = spec
    return spec


def spec_modules(root: Path | None = None) -> list[str]:
    """Module names listed under ``[tool.parity] specs`` in the project's pyproject.toml."""
    path = project_root(root) / "pyproject.toml"
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ParityError(f"{path}: malformed TOML: {exc}") from exc
    modules = data.get("tool", {}).get("parity", {}).get("specs", [])
    if not isinstance(modules, list) or not all(isinstance(m, str) for m in modules):
        raise ParityError(f"{path}: [tool.parity] specs must be a list of module names")
    return modules


def load(modules: Iterable[str] | None = None) -> dict[str, OpSpec]:
    """Import the spec modules once and return the registry."""
    global _LOADED
    from parity.device import ensure_configured

    ensure_configured()  # spec modules may import triton, which must see TRITON_INTERPRET first
    if not _LOADED or modules is not None:
        for name in spec_modules() if modules is None else modules:
            importlib.import_module(name)
        _LOADED = True
    return dict(_REGISTRY)


def get(name: str) -> OpSpec:
    """The spec of op ``name``; a clear error naming the known ops otherwise."""
    specs = load()
    if name not in specs:
        raise ParityError(f"unknown op {name!r}: known ops are {', '.join(sorted(specs)) or '(none)'}")
    return specs[name]
