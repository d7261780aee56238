#!/usr/bin/env bash
# Here, between device calls: unpack one call's results.tgz into DEST (e.g. bench/results/h200-run40/call1). The
# tuner's records it returned (tuned.tgz) go into tuned/, where the next call resumes from them; the store entries a
# promote wrote (configs/) go into configs/, without their lock files; the logs and JSON stay in DEST. One command,
# so that the next call starts while the machine is still warm. Usage:
#   bash scripts/gpu_unpack.sh /work/.device/N/results.tgz bench/results/h200-runR/callC
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 2 ] || { echo "usage: gpu_unpack.sh RESULTS_TGZ DEST" >&2; exit 2; }
tgz=$1 dest=$2
[ -f "$tgz" ] || { echo "gpu_unpack.sh: no such archive: $tgz" >&2; exit 2; }
mkdir -p "$dest"
tar -xzf "$tgz" -C "$dest"
if [ -f "$dest/tuned.tgz" ]; then
  tar -xzf "$dest/tuned.tgz" -C "$dest"
  mkdir -p tuned && cp -r "$dest/tuned/." tuned/
  rm -rf "$dest/tuned" "$dest/tuned.tgz"
fi
if [ -d "$dest/configs" ]; then
  mkdir -p configs && cp -r "$dest/configs/." configs/
  find configs -name '*.lock' -delete
  rm -rf "$dest/configs"
fi
ls "$dest"
