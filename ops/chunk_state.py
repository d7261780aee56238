"""chunk_state: mamba-ssm's ``_chunk_state_fwd``: the state each chunk contributes on its own.

- reference: ``reference/chunk_state.py:chunk_state_fwd``
- baseline: ``reference/mamba_triton.py:chunk_state_fwd``
- Helion kernel: ``kernels/chunk_state.py:chunk_state_fwd``
- tolerances: ``[defaults.<dtype>]`` in tolerances.toml, overridden under ``[op.chunk_state]`` (none yet)
"""

from __future__ import annotations

from typing import Any

import torch

from kernels import chunk_state as kernel
from ops import ssd
from ops.common import error_inputs, full
from ops.ssd import chunked, pick, seq
from parity.registry import register
from parity.spec import Impl, Problem, helion_candidates

FEATURES = ("seq_idx",)
"""The optional features of ops.ssd.SSD_FEATURES this op takes."""
VALUES = ("dt_range", "A_range", "x_scale", "bc_scale")
"""The value fields its inputs depend on (in ops.ssd.SSD_VALUE_FIELDS order)."""


def inputs(p: Problem, dtype: torch.dtype, seed: int, device: torch.device) -> dict[str, Any]:
    raw = chunked(p, dtype, seed, device)
    return pick(raw, {"B": "B", "x": "x", "dt": "dt_chunked", "dA_cumsum": "dA_cumsum", "seq_idx": "seq_idx"})


VALID = {"B": full(1, 6, 1, 4), "x": full(1, 6, 2, 4), "dt": full(1, 2, 2, 4), "dA_cumsum": full(1, 2, 2, 4)}
ERROR_INPUTS = error_inputs(
    VALID,
    [
        ("x of rank 3", "x", {"x": full(1, 6, 8)}, "non-empty"),
        ("3 groups for 2 heads", "B", {"B": full(1, 6, 3, 4)}, "not a multiple of ngroups"),
        ("B one position short of x", "B", {"B": full(1, 5, 1, 4)}, "seqlen=6"),
        (
            "dt of 1 chunk for 6 positions",
            "dt",
            {"dt": full(1, 2, 1, 4), "dA_cumsum": full(1, 2, 1, 4)},
            "covering",
        ),
        ("dA_cumsum of another chunk size than dt", "dA_cumsum", {"dA_cumsum": full(1, 2, 2, 8)}, "shape"),
        ("seq_idx one position short", "seq_idx", {"seq_idx": seq(5)}, "shape"),
        ("float seq_idx", "seq_idx", {"seq_idx": seq(6, torch.float32)}, "integer tensor", TypeError),
    ],
)


SPEC = register(
    ssd.spec(
        name="chunk_state",
        reference=Impl("torch", "reference.chunk_state:chunk_state_fwd"),
        baseline=Impl("triton", "reference.mamba_triton:chunk_state_fwd"),
        candidates=helion_candidates(kernel, "chunk_state_fwd"),
        make_inputs=inputs,
        outputs=("states",),
        grad_inputs=("B", "x", "dt", "dA_cumsum"),
        features=FEATURES,
        values=VALUES,
        error_inputs=ERROR_INPUTS,
    )
)
