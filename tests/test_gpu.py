"""GPU checks at realistic shapes: every op's implementations compiled on CUDA at its training shape
(the Nemotron-3-Nano mixer: b=2, L=8192, h=64, p=64, g=8, n=128, chunk 128), in bf16 and fp32.

Run with ``pytest -m gpu --parity-device cuda``; skipped without a GPU.
"""

from __future__ import annotations

import pytest

from parity import registry
from parity.runner import run_problem
from parity.spec import parse_dtype
from parity.workers import patient

pytestmark = pytest.mark.gpu

OPS = ("chunk_cumsum", "chunk_state", "state_passing", "bmm_chunk", "chunk_scan", "ssd_combined", "layernorm_gated")


@pytest.fixture(autouse=True)
def _on_cuda(parity_device):
    if parity_device != "cuda":
        pytest.skip("GPU checks need --parity-device cuda")


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("op", OPS)
def test_training_shape(op, dtype, parity_tolerances):
    spec = registry.get(op)
    assert spec.training_problems, f"{op} declares no training shape"
    failures = []
    for problem in spec.training_problems:
        for result in patient(
            run_problem, spec, list(spec.impls().values()), problem, parse_dtype(dtype), 0, "cuda", parity_tolerances
        ):
            print(result.message())
            if not result.passed:
                failures.append(result.message())
    assert not failures, "\n".join(failures)
