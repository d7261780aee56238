"""chunk_scan: mamba-ssm's ``_chunk_scan_fwd``: each chunk's output from the state entering it and its own inputs.

- reference: ``reference/chunk_scan.py:chunk_scan_fwd``
- baseline: ``reference/mamba_triton.py:chunk_scan_fwd``
- Helion kernel: ``kernels/chunk_scan.py:chunk_scan_fwd``
- tolerances: ``[defaults.<dtype>]`` in tolerances.toml, overridden under ``[op.chunk_scan]`` (none yet)
"""

from __future__ import annotations

from typing import Any

import torch

from kernels import chunk_scan as kernel
from ops import ssd
from ops.common import error_inputs, full
from ops.ssd import chunked, pick, seq
from parity.registry import register
from parity.spec import Impl, Problem, helion_candidates
from reference.bmm_chunk import bmm_chunk_fwd
from reference.chunk_state import chunk_state_fwd
from reference.state_passing import state_passing_fwd

FEATURES = ("D", "z", "seq_idx")
"""The optional features of ops.ssd.SSD_FEATURES this op takes."""
VALUES = ("dt_range", "A_range", "x_scale", "bc_scale", "z_scale")
"""The value fields its inputs depend on (in ops.ssd.SSD_VALUE_FIELDS order)."""


def inputs(p: Problem, dtype: torch.dtype, seed: int, device: torch.device) -> dict[str, Any]:
    raw = chunked(p, dtype, seed, device)
    with torch.no_grad():
        states = chunk_state_fwd(raw["B"], raw["x"], raw["dt_chunked"], raw["dA_cumsum"], seq_idx=raw.get("seq_idx"))
        b, c, h, hd, n = states.shape
        init = raw.get("initial_states")
        states, _ = state_passing_fwd(
            states.reshape(b, c, h, hd * n),
            raw["dA_cumsum"][:, :, :, -1],
            initial_states=None if init is None else init.reshape(b, h, hd * n),
            seq_idx=raw.get("seq_idx"),
            chunk_size=p["chunk_size"],
            out_dtype=dtype,
        )
        raw["states"] = states.reshape(b, c, h, hd, n).contiguous()
        raw["cb"] = bmm_chunk_fwd(
            raw["C"], raw["B"], p["chunk_size"], seq_idx=raw.get("seq_idx"), output_dtype=torch.float32
        ).contiguous()
    return pick(
        raw,
        {
            "cb": "cb",
            "x": "x",
            "dt": "dt_chunked",
            "dA_cumsum": "dA_cumsum",
            "C": "C",
            "states": "states",
            "D": "D",
            "z": "z",
            "seq_idx": "seq_idx",
        },
    )


VALID = {
    "cb": full(1, 2, 1, 4, 4),
    "x": full(1, 6, 2, 4),
    "dt": full(1, 2, 2, 4),
    "dA_cumsum": full(1, 2, 2, 4),
    "C": full(1, 6, 1, 4),
    "states": full(1, 2, 2, 4, 4),
}
ERROR_INPUTS = error_inputs(
    VALID,
    [
        ("x of rank 3", "x", {"x": full(1, 6, 8)}, "non-empty"),
        ("3 groups for 2 heads", "C", {"C": full(1, 6, 3, 4)}, "not a multiple of ngroups"),
        (
            "dt of 3 chunks for 6 positions",
            "dt",
            {"dt": full(1, 2, 3, 4), "dA_cumsum": full(1, 2, 3, 4)},
            "covering",
        ),
        ("cb of another chunk size", "cb", {"cb": full(1, 2, 1, 4, 3)}, "shape"),
        ("states of another dstate than C", "states", {"states": full(1, 2, 2, 4, 5)}, "shape"),
        ("D of 3 heads", "D", {"D": full(3)}, "shape"),
        ("z of another headdim than x", "z", {"z": full(1, 6, 2, 5)}, "shape"),
        ("float seq_idx", "seq_idx", {"seq_idx": seq(6, torch.float32)}, "integer tensor", TypeError),
    ],
)


SPEC = register(
    ssd.spec(
        name="chunk_scan",
        reference=Impl("torch", "reference.chunk_scan:chunk_scan_fwd"),
        baseline=Impl("triton", "reference.mamba_triton:chunk_scan_fwd"),
        candidates=helion_candidates(kernel, "chunk_scan_fwd"),
        make_inputs=inputs,
        outputs=("out", "out_x"),
        grad_inputs=("cb", "x", "dt", "dA_cumsum", "C", "states", "D", "z"),
        features=FEATURES,
        values=VALUES,
        error_inputs=ERROR_INPUTS,
    )
)
