"""ssd_combined: mamba-ssm's ``mamba_chunk_scan_combined``: the whole chunked SSD, forward and backward.

- reference: ``reference/ssd_combined.py:mamba_chunk_scan_combined``; for long problems (field ``segment``) the
  segmented fp64 oracle ``reference/ssd_segmented.py`` (:func:`oracle_for`; the problems: ``ops/long.py``)
- baseline: ``reference/mamba_triton.py:mamba_chunk_scan_combined``
- Helion kernel: ``kernels/ssd_combined.py:mamba_chunk_scan_combined``
- tolerances: ``[defaults.<dtype>]`` in tolerances.toml, overridden under ``[op.ssd_combined]`` (none yet)
"""

from __future__ import annotations

from typing import Any

import torch

from kernels import ssd_combined as kernel
from ops import long, ssd
from ops.common import error_inputs, full
from ops.ssd import seq, ssd_raw_inputs
from parity.registry import register
from parity.spec import Impl, Problem, helion_candidates
from reference.ssd_segmented import segmented

FEATURES = ssd.SSD_FEATURES
"""The optional features of ops.ssd.SSD_FEATURES this op takes."""
VALUES = ssd.SSD_VALUE_FIELDS
"""The value fields its inputs depend on (in ops.ssd.SSD_VALUE_FIELDS order)."""


def inputs(p: Problem, dtype: torch.dtype, seed: int, device: torch.device) -> dict[str, Any]:
    raw = ssd_raw_inputs(p, dtype, seed, device)
    raw["return_final_states"] = True
    return raw


def oracle_for(p: Problem) -> tuple[Impl, torch.dtype] | None:
    """A problem with a ``segment`` field is judged by the segmented fp64 oracle with segments of that many tokens,
    on fp32 copies of the inputs (exact for every test dtype; outputs and gradients rounded once to fp32) from
    ``long.FP32_STORAGE`` x elements on, where whole-tensor fp64 copies would take gigabytes each; on fp64 copies
    below (the small problems that check this path on CPU)."""
    if "segment" not in p:
        return None
    elements = p["batch"] * p["seqlen"] * p["nheads"] * p["headdim"]
    wide = torch.float32 if elements >= long.FP32_STORAGE else torch.float64
    return Impl("segmented-fp64", segmented(p["segment"])), wide


VALID = {
    "x": full(1, 6, 2, 4),
    "dt": full(1, 6, 2),
    "A": full(2),
    "B": full(1, 6, 1, 4),
    "C": full(1, 6, 1, 4),
    "chunk_size": 4,
}
ERROR_INPUTS = error_inputs(
    VALID,
    [
        ("x of rank 3", "x", {"x": full(1, 6, 8)}, "non-empty"),
        ("chunk_size 0", "chunk_size", {"chunk_size": 0}, "positive"),
        ("negative chunk_size", "chunk_size", {"chunk_size": -16}, "positive"),
        ("dt of 3 heads, x of 2", "dt", {"dt": full(1, 6, 3)}, "shape"),
        ("integer dt", "dt", {"dt": full(1, 6, 2, dtype=torch.int64)}, "floating-point", TypeError),
        ("A of 3 heads", "A", {"A": full(3)}, "shape"),
        (
            "3 groups for 2 heads",
            "B",
            {"B": full(1, 6, 3, 4), "C": full(1, 6, 3, 4)},
            "not a multiple of ngroups",
        ),
        ("C of another dstate than B", "C", {"C": full(1, 6, 1, 5)}, "shape"),
        ("D of another headdim", "D", {"D": full(2, 5)}, "shape"),
        ("z of another headdim than x", "z", {"z": full(1, 6, 2, 5)}, "shape"),
        ("dt_bias of 3 heads", "dt_bias", {"dt_bias": full(3)}, "shape"),
        ("initial_states of another dstate", "initial_states", {"initial_states": full(1, 2, 4, 5)}, "shape"),
        ("seq_idx one position short", "seq_idx", {"seq_idx": seq(5)}, "shape"),
        ("float seq_idx", "seq_idx", {"seq_idx": seq(6, torch.float32)}, "integer tensor", TypeError),
        (
            "varlen states without cu_seqlens",
            "cu_seqlens",
            {"return_varlen_states": True, "cu_seqlens": None},
            "must be provided",
        ),
    ],
)


SPEC = register(
    ssd.spec(
        name="ssd_combined",
        reference=Impl("torch", "reference.ssd_combined:mamba_chunk_scan_combined"),
        baseline=Impl("triton", "reference.mamba_triton:mamba_chunk_scan_combined"),
        candidates=helion_candidates(kernel, "mamba_chunk_scan_combined"),
        make_inputs=inputs,
        outputs=("out", "final_states"),
        grad_inputs=("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states"),
        features=FEATURES,
        values=VALUES,
        error_inputs=ERROR_INPUTS,
        relayout_inputs=("x", "dt", "B", "C", "z"),
        # The combined op interprets five kernels forward and backward: on CPU one generated problem on top of the
        # three pinned ones keeps the suite within its 10 minutes.
        max_examples={"ci": 1},
        tuning_configs=kernel.tuning_configs,
        long_problems=tuple(long.long_ssd().values()),
        oracle_for=oracle_for,
    )
)
