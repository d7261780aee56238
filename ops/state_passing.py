"""state_passing: mamba-ssm's ``_state_passing_fwd``: the states entering each chunk, passed along the chunks
with their decay.

- reference: ``reference/state_passing.py:state_passing_fwd``
- baseline: ``reference/mamba_triton.py:state_passing_fwd``
- Helion kernel: ``kernels/state_passing.py:state_passing_fwd``
- tolerances: ``[defaults.<dtype>]`` in tolerances.toml, overridden under ``[op.state_passing]`` (none yet)
"""

from __future__ import annotations

from typing import Any

import torch

from kernels import state_passing as kernel
from ops import ssd
from ops.common import error_inputs, full, gen, randn
from ops.ssd import chunked, seq
from parity.registry import register
from parity.spec import Impl, Problem, helion_candidates

FEATURES = ("seq_idx", "initial_states")
"""The optional features of ops.ssd.SSD_FEATURES this op takes."""
VALUES = ("dt_range", "A_range", "state_scale")
"""The value fields its inputs depend on (in ops.ssd.SSD_VALUE_FIELDS order)."""


def inputs(p: Problem, dtype: torch.dtype, seed: int, device: torch.device) -> dict[str, Any]:
    raw = chunked(p, dtype, seed, device)
    g = gen(seed + 1)
    b, h, c = raw["dA_cumsum"].shape[:3]
    dim = p["headdim"] * p["dstate"]
    inputs = {
        "states": randn(g, b, c, h, dim, dtype=torch.float32, device=device, scale=p.get("state_scale", 1.0)),
        "dA_chunk_cumsum": raw["dA_cumsum"][:, :, :, -1].contiguous(),
        "chunk_size": p["chunk_size"],
        "out_dtype": dtype,
    }
    if "initial_states" in raw:
        inputs["initial_states"] = raw["initial_states"].reshape(b, h, dim).float()
    if "seq_idx" in raw:
        inputs["seq_idx"] = raw["seq_idx"]
    return inputs


VALID = {"states": full(1, 2, 2, 16), "dA_chunk_cumsum": full(1, 2, 2), "chunk_size": 4}
ERROR_INPUTS = error_inputs(
    VALID,
    [
        ("states of rank 3", "states", {"states": full(1, 2, 32)}, "non-empty"),
        (
            "dA_chunk_cumsum of 3 chunks, states of 2",
            "dA_chunk_cumsum",
            {"dA_chunk_cumsum": full(1, 2, 3)},
            "shape",
        ),
        ("initial_states of another dim", "initial_states", {"initial_states": full(1, 2, 8)}, "shape"),
        ("seq_idx without chunk_size", "chunk_size", {"seq_idx": seq(6), "chunk_size": None}, "required"),
        ("chunk_size 0 with seq_idx", "chunk_size", {"seq_idx": seq(6), "chunk_size": 0}, "positive"),
        ("seq_idx of 3 chunks, states of 2", "seq_idx", {"seq_idx": seq(9)}, "does not give 2 chunks"),
        ("float seq_idx", "seq_idx", {"seq_idx": seq(6, torch.float32)}, "integer tensor", TypeError),
    ],
)


SPEC = register(
    ssd.spec(
        name="state_passing",
        reference=Impl("torch", "reference.state_passing:state_passing_fwd"),
        baseline=Impl("triton", "reference.mamba_triton:state_passing_fwd"),
        candidates=helion_candidates(kernel, "state_passing_fwd"),
        make_inputs=inputs,
        outputs=("out", "final_states"),
        grad_inputs=("states", "dA_chunk_cumsum", "initial_states"),
        features=FEATURES,
        values=VALUES,
        error_inputs=ERROR_INPUTS,
    )
)
