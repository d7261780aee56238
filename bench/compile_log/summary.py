"""Summarize a PARITY_COMPILE_LOG file (see sitecustomize.py here): per process and per kernel, how many
Triton compilations and Helion bindings, and their seconds; kernels compiled in more than one process.

    python bench/compile_log/summary.py compile.jsonl
"""

from __future__ import annotations

import collections
import json
import sys


def main(path: str) -> None:
    rows = [json.loads(line) for line in open(path) if line.strip()]
    by_pid: dict[int, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    by_kernel: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    pids_of: dict[tuple[str, str], set[int]] = collections.defaultdict(set)
    for r in rows:
        by_pid[r["pid"]][r["kind"]] += r["s"]
        by_pid[r["pid"]][r["kind"] + "_n"] += 1
        by_kernel[(r["kind"], r["name"])].append(r["s"])
        pids_of[(r["kind"], r["name"])].add(r["pid"])
    total = collections.Counter()
    for counts in by_pid.values():
        total.update(counts)
    print(
        f"{len(rows)} events in {len(by_pid)} processes; totals: "
        + ", ".join(f"{k} {v:.1f}" for k, v in sorted(total.items()))
    )
    for pid, counts in sorted(by_pid.items()):
        print(f"  pid {pid}: " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(counts.items())))
    print("by kernel (kind, name): count, seconds, processes")
    for (kind, name), secs in sorted(by_kernel.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {kind:12s} {name:50s} {len(secs):4d} {sum(secs):7.1f} s  {len(pids_of[(kind, name)])}")


if __name__ == "__main__":
    main(sys.argv[1])
