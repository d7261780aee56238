"""chunk_cumsum: mamba-ssm's ``_chunk_cumsum_fwd``: dt (+ bias, softplus, clamp) laid out per chunk, and the
in-chunk cumsum of dt * A.

- reference: ``reference/chunk_cumsum.py:chunk_cumsum_fwd``
- baseline: ``reference/mamba_triton.py:chunk_cumsum_fwd``
- Helion kernel: ``kernels/chunk_cumsum.py:chunk_cumsum_fwd``
- tolerances: ``[defaults.<dtype>]`` in tolerances.toml, overridden under ``[op.chunk_cumsum]`` (none yet)
"""

from __future__ import annotations

from typing import Any

import torch

from kernels import chunk_cumsum as kernel
from ops import ssd
from ops.common import error_inputs, full
from ops.ssd import pick, ssd_raw_inputs
from parity.registry import register
from parity.spec import Impl, Problem, helion_candidates

FEATURES = ("dt_bias", "dt_softplus", "dt_limit")
"""The optional features of ops.ssd.SSD_FEATURES this op takes."""
VALUES = ("dt_range", "A_range")
"""The value fields its inputs depend on (in ops.ssd.SSD_VALUE_FIELDS order)."""


def inputs(p: Problem, dtype: torch.dtype, seed: int, device: torch.device) -> dict[str, Any]:
    raw = ssd_raw_inputs(p, dtype, seed, device)
    raw["dt"] = raw["dt"].float()  # mamba-ssm keeps dt in fp32 for the cumsum
    return pick(raw, {k: k for k in ("dt", "A", "chunk_size", "dt_bias", "dt_softplus", "dt_limit")})


VALID = {"dt": full(1, 6, 2), "A": full(2), "chunk_size": 4}
ERROR_INPUTS = error_inputs(
    VALID,
    [
        ("dt of rank 4", "dt", {"dt": full(1, 6, 2, 1)}, "non-empty"),
        ("integer dt", "dt", {"dt": full(1, 6, 2, dtype=torch.int32)}, "floating-point", TypeError),
        ("A of 3 heads, dt of 2", "A", {"A": full(3)}, "shape"),
        ("dt_bias of 3 heads, dt of 2", "dt_bias", {"dt_bias": full(3)}, "shape"),
        ("chunk_size 0", "chunk_size", {"chunk_size": 0}, "positive"),
        ("negative chunk_size", "chunk_size", {"chunk_size": -4}, "positive"),
    ],
)


SPEC = register(
    ssd.spec(
        name="chunk_cumsum",
        reference=Impl("torch", "reference.chunk_cumsum:chunk_cumsum_fwd"),
        baseline=Impl("triton", "reference.mamba_triton:chunk_cumsum_fwd"),
        candidates=helion_candidates(kernel, "chunk_cumsum_fwd"),
        make_inputs=inputs,
        outputs=("dA_cumsum", "dt_out"),
        grad_inputs=("dt", "A", "dt_bias"),
        features=FEATURES,
        values=VALUES,
        error_inputs=ERROR_INPUTS,
    )
)
