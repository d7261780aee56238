"""One-off: re-key the committed tuning records from ``source_hash`` (every kernels/ module the kernel reaches) to
``code_hash`` (the kernel's own device code, parity.lookup.code_hash). For each record, the commit of kernels/ whose
source_hash of the record's target equals the record's is found (HEAD first, then every commit that touched
kernels/, newest first); the record gets that commit's code_hash of the target. A record whose kernel code is
unchanged since then is thus current again; one whose code changed stays stale; one whose commit is not found keeps
its old key (stale). Run from the repository root: .venv/bin/python bench/results/tuned-rekey/rekey.py"""

import glob
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.getcwd()
CHILD = """
import json, sys
sys.path.insert(0, {root!r})
from parity import lookup
sys.path.remove({root!r})
sys.path.insert(0, {tree!r})
out = {{}}
for target in {targets!r}:
    try:
        out[target] = [lookup.source_hash(target), lookup.code_hash(target)]
    except Exception as error:
        out[target] = repr(error)
print(json.dumps(out))
"""


def hashes_at(commit: str, targets: list[str]) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tree:
        subprocess.run(["git", "worktree", "add", "--detach", "-q", tree, commit], check=True)
        try:
            code = CHILD.format(root=ROOT, tree=tree, targets=targets)
            done = subprocess.run([sys.executable, "-c", code], cwd="/tmp", capture_output=True, text=True)
            return json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {}
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", tree], check=True)


def main() -> None:
    paths = sorted(p for p in glob.glob("tuned/*/*/*/kernels/*.json") if not p.endswith(".context-lost.json"))
    records = {p: json.load(open(p)) for p in paths}
    todo = {p: r for p, r in records.items() if "source_hash" in r}
    targets = sorted({r["target"] for r in todo.values()})
    head = hashes_at("HEAD", targets)
    log = subprocess.run(["git", "log", "--format=%H", "--", "kernels/"], capture_output=True, text=True, check=True)
    found: dict[str, tuple[str, str]] = {}
    for commit in ["HEAD", *log.stdout.split()]:
        left = {p: r for p, r in todo.items() if p not in found}
        if not left:
            break
        at = head if commit == "HEAD" else hashes_at(commit, sorted({r["target"] for r in left.values()}))
        for path, record in left.items():
            value = at.get(record["target"])
            if isinstance(value, list) and value[0] == record["source_hash"]:
                found[path] = (commit, value[1])
    for path, record in todo.items():
        if path not in found:
            print(f"{path}: no commit of kernels/ has its source_hash; left as is (stale)")
            continue
        commit, code = found[path]
        current = head[record["target"]][1] == code
        record = {
            ("code_hash" if k == "source_hash" else k): (code if k == "source_hash" else v) for k, v in record.items()
        }
        with open(path, "w") as handle:
            handle.write(json.dumps(record, indent=1) + "\n")
        print(f"{path}: source of {commit[:7]}; code_hash {code[:12]}: {'current' if current else 'stale'}")


if __name__ == "__main__":
    main()
