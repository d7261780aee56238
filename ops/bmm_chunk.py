"""bmm_chunk: mamba-ssm's ``_bmm_chunk_fwd``: C B^T within each chunk.

- reference: ``reference/bmm_chunk.py:bmm_chunk_fwd``
- baseline: ``reference/mamba_triton.py:bmm_chunk_fwd``
- Helion kernel: ``kernels/bmm_chunk.py:bmm_chunk_fwd``
- tolerances: ``[defaults.<dtype>]`` in tolerances.toml, overridden under ``[op.bmm_chunk]`` (none yet)
"""

from __future__ import annotations

from typing import Any

import torch

from kernels import bmm_chunk as kernel
from ops import ssd
from ops.common import error_inputs, full
from ops.ssd import seq, ssd_raw_inputs
from parity.registry import register
from parity.spec import Impl, Problem, helion_candidates

FEATURES = ("seq_idx",)
"""The optional features of ops.ssd.SSD_FEATURES this op takes."""
VALUES = ("bc_scale",)
"""The value fields its inputs depend on (in ops.ssd.SSD_VALUE_FIELDS order)."""


def inputs(p: Problem, dtype: torch.dtype, seed: int, device: torch.device) -> dict[str, Any]:
    raw = ssd_raw_inputs(p, dtype, seed, device)
    inputs = {"a": raw["C"], "b": raw["B"], "chunk_size": p["chunk_size"], "output_dtype": torch.float32}
    if "seq_idx" in raw:
        inputs["seq_idx"] = raw["seq_idx"]
    return inputs


VALID = {"a": full(1, 6, 1, 4), "b": full(1, 6, 1, 4), "chunk_size": 4}
ERROR_INPUTS = error_inputs(
    VALID,
    [
        ("a of rank 2", "a", {"a": full(6, 4), "b": full(6, 4)}, "non-empty"),
        ("b of another width than a", "b", {"b": full(1, 6, 1, 5)}, "shape"),
        ("chunk_size 0", "chunk_size", {"chunk_size": 0}, "positive"),
        ("negative chunk_size", "chunk_size", {"chunk_size": -1}, "positive"),
        ("seq_idx one position short", "seq_idx", {"seq_idx": seq(5)}, "shape"),
        ("float seq_idx", "seq_idx", {"seq_idx": seq(6, torch.float32)}, "integer tensor", TypeError),
    ],
)


SPEC = register(
    ssd.spec(
        name="bmm_chunk",
        reference=Impl("torch", "reference.bmm_chunk:bmm_chunk_fwd"),
        baseline=Impl("triton", "reference.mamba_triton:bmm_chunk_fwd"),
        candidates=helion_candidates(kernel, "bmm_chunk_fwd"),
        make_inputs=inputs,
        outputs=("out",),
        grad_inputs=("a", "b"),
        features=FEATURES,
        values=VALUES,
        error_inputs=ERROR_INPUTS,
    )
)
