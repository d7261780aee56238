"""bench/bench.py's ``helion-tuned`` rows: each SSD forward kernel op runs with its kernel's config taken from an
ssd_combined config (the tuner's config.json or the promoted entry), and computes what the default build does."""

from __future__ import annotations

import json

import pytest
import torch

from kernels import ssd_combined
from parity import registry
from tests import bench_scripts

pytestmark = pytest.mark.cpu


def test_each_ssd_kernel_op_runs_with_its_kernels_config_from_an_ssd_config(tmp_path):
    bench = bench_scripts.load("bench")
    specs = registry.load()
    path = tmp_path / "config.json"
    path.write_text(json.dumps(ssd_combined.CONFIGS[1]))
    config = bench.ssd_config({}, str(path))
    for name in bench.SSD_KERNEL_OPS:
        spec = specs[name]
        (tuned,) = bench.tuned_impls(spec, config)
        assert tuned.name == "helion-tuned" and tuned.config == ssd_combined.CONFIGS[1][name]
        inputs = spec.make_inputs(dict(spec.examples[0]), torch.float32, 0, torch.device("cpu"))
        got, want = tuned.load()(**inputs), spec.impls()["helion"].load()(**inputs)
        got, want = (v if isinstance(v, torch.Tensor) else v[0] for v in (got, want))
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    assert bench.tuned_impls(specs["ssd_combined"], config) == []  # the op itself loads the promoted config
    assert bench.tuned_impls(specs["chunk_scan"], None) == []  # no SSD config: no tuned row


def test_an_ssd_config_file_that_is_not_an_object_is_one_clear_error(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("[1, 2]")
    with pytest.raises(SystemExit, match="must be a JSON object"):
        bench_scripts.load("bench").ssd_config({}, str(path))
