"""The per-GPU config store: plain JSON under ``configs/``, reviewable in git.

One file per device and op, ``configs/<device>/<op>.json``, holding entries keyed by implementation,
dtype and shape bucket. Each entry carries the config, the hash of the kernel source it was gated
with, the helion/triton/torch versions and the gate's evidence. Writes take a lock (two promoters at
once are safe) and replace the file atomically (an interrupted promote leaves the previous file).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import importlib
import importlib.metadata
import json
import re
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parity.errors import ParityError
from parity.report import atomic_write

VERSIONED = ("helion", "triton", "torch")


class StaleConfigError(ParityError):
    """A promoted entry no longer matches the kernel source or the library versions."""


def device_key(device: str) -> str:
    """A file-name-safe key for the current device: GPU name and compute capability, or the CPU."""
    if device == "cpu":
        return "cpu-interpreter"
    import torch

    major, minor = torch.cuda.get_device_capability()
    name = re.sub(r"[^a-z0-9]+", "-", torch.cuda.get_device_name().lower()).strip("-")
    return f"{name}-sm{major}{minor}"


def versions() -> dict[str, str]:
    """Installed versions of the libraries whose code generation decides what a config computes."""
    found = {}
    for name in VERSIONED:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "absent"
    return found


def source_hash(target: str) -> str:
    """sha256 of the source file of the module named by ``"module:function"``."""
    module = importlib.import_module(target.partition(":")[0])
    path = getattr(module, "__file__", None)
    if path is None:
        raise ParityError(f"{target}: module has no source file to hash")
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def default_root() -> Path:
    """``configs/`` at the project root."""
    from parity.registry import project_root

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
            self.impl_target, self.dtype, self.bucket)


class Store:
    """Read and write entries under one root directory."""

    def __init__(self, root: Path | str | None = None):
        self.root = Path(root) if root is not None else default_root()

    def path(self, device: str, op: str) -> Path:
        return self.root / device / f"{op}.json"

    @contextlib.contextmanager
    def _locked(self, device: str, op: str) -> Iterator[None]:
        lock = self.path(device, op).with_suffix(".lock")
        lock.parent.mkdir(parents=True, exist_ok=True)
        with open(lock, "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

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

    def put(self, key: Key, config: Mapping[str, Any], evidence: Mapping[str, Any]) -> dict[str, Any]:
        """Add or replace the entry for ``key`` (under the lock, atomically)."""
        entry = {"op": key.op, "target": key.impl_target, "dtype": key.dtype, "bucket": key.bucket,
                 "config": dict(config), "kernel_hash": source_hash(key.impl_target), "versions": versions(),
                 "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "evidence": dict(evidence)}
        with self._locked(key.device, key.op):
            kept = [e for e in self.entries(key.device, key.op) if not key.matches(e)]
            kept.append(entry)
            kept.sort(key=lambda e: (e["target"], e["dtype"], e["bucket"]))
            text = json.dumps({"device": key.device, "op": key.op, "entries": kept}, indent=1, sort_keys=True)
            atomic_write(self.path(key.device, key.op), text + "\n")
        return entry

    def find(self, key: Key) -> dict[str, Any] | None:
        """The entry for ``key``, exact bucket first, then the wildcard bucket ``*``."""
        entries = self.entries(key.device, key.op)
        for bucket in (key.bucket, "*"):
            for entry in entries:
                if (entry.get("target"), entry.get("dtype"), entry.get("bucket")) == (
                        key.impl_target, key.dtype, bucket):
                    return entry
        return None

    def staleness(self, entry: Mapping[str, Any]) -> list[str]:
        """Why ``entry`` no longer applies (empty when it still does)."""
        reasons = []
        if entry.get("kernel_hash") != source_hash(entry["target"]):
            reasons.append(f"the source of {entry['target'].partition(':')[0]} changed since it was gated")
        now = versions()
        for name, version in entry.get("versions", {}).items():
            if now.get(name) != version:
                reasons.append(f"{name} is {now.get(name)}, the entry was gated with {version}")
        return reasons


_WARNED: set[tuple[str, ...]] = set()


def promoted_config(op: str, target: str, dtype: str, bucket: str, device: str,
                    store: Store | None = None) -> dict[str, Any] | None:
    """The promoted config for a runtime call, never autotuning.

    No entry: warn once per key and return None (the kernel then uses its documented default).
    A stale entry (kernel source or library versions changed): StaleConfigError saying how to re-gate.
    """
    store = store or Store()
    key = Key(device_key(device), op, target, dtype, bucket)
    entry = store.find(key)
    if entry is None:
        ident = (key.device, op, target, dtype, bucket)
        if ident not in _WARNED:
            _WARNED.add(ident)
            warnings.warn(f"parity: no promoted config for {op} {dtype} bucket {bucket} on {key.device}; "
                          "using the kernel's default config", stacklevel=2)
        return None
    reasons = store.staleness(entry)
    if reasons:
        raise StaleConfigError(
            f"promoted config for {op} {dtype} bucket {bucket} on {key.device} is stale: {'; '.join(reasons)}. "
            f"Re-gate it: parity promote {op} --config <file with its config> --dtype {dtype}")
    return dict(entry["config"])
