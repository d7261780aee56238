"""The writer side of the per-GPU config store (promote, verify, list), built on :mod:`parity.lookup`, the
runtime side that the drop-in kernels import.

Writes take a lock (two promoters at once are safe) and replace the file atomically (an interrupted promote
leaves the previous file).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
from collections.abc import Iterator, Mapping
from typing import Any

from parity.lookup import Key, StoreReader, source_hash, versions
from parity.report import atomic_write


def _sort_key(entry: Any) -> tuple[str, str, str]:
    """Store files list entries by (target, dtype, bucket); a malformed entry (kept as found) sorts first."""
    if not isinstance(entry, dict):
        return ("", "", "")
    return (str(entry.get("target")), str(entry.get("dtype")), str(entry.get("bucket")))


class Store(StoreReader):
    """Read and write entries under one root directory."""

    def files(self) -> list[tuple[str, str]]:
        """(device, op) of every store file, sorted. Temporary files of a write (``.<op>.json.*.tmp``, left
        behind by a promote killed mid-write) and lock files are not store files."""
        if not self.root.exists():
            return []
        return sorted(
            (p.parent.name, p.stem) for p in self.root.glob("*/*.json") if p.is_file() and not p.name.startswith(".")
        )

    def _remove_stray_temps(self, device: str, op: str) -> None:
        """Delete the temporary files a killed write of this store file left behind. Called under the file's
        lock: every write takes it, so no live writer can own one of them."""
        path = self.path(device, op)
        for stray in path.parent.glob(f".{path.name}.*.tmp"):
            stray.unlink(missing_ok=True)

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

    def put(self, key: Key, config: Mapping[str, Any], evidence: Mapping[str, Any]) -> dict[str, Any]:
        """Add or replace the entry for ``key`` (under the lock, atomically)."""
        entry = {
            "op": key.op,
            "target": key.impl_target,
            "dtype": key.dtype,
            "bucket": key.bucket,
            "config": dict(config),
            "kernel_hash": source_hash(key.impl_target),
            "versions": versions(),
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "evidence": dict(evidence),
        }
        with self._locked(key.device, key.op):
            self._remove_stray_temps(key.device, key.op)
            kept = [e for e in self.entries(key.device, key.op) if not (isinstance(e, dict) and key.matches(e))]
            kept.append(entry)
            kept.sort(key=_sort_key)
            text = json.dumps({"device": key.device, "op": key.op, "entries": kept}, indent=1, sort_keys=True)
            atomic_write(self.path(key.device, key.op), text + "\n")
        return entry
