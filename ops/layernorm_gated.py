"""layernorm_gated: mamba-ssm's gated RMSNorm / LayerNorm (``layernorm_fn``), forward and backward.

- reference: ``reference/layernorm_gated.py:layernorm_fn``; for long problems (field ``segment``: rows per block)
  the row-blocked fp64 oracle ``reference/layernorm_segmented.py`` (:func:`oracle_for`; the problem: ``ops/long.py``)
- baseline: ``reference/mamba_triton.py:layernorm_fn``
- Helion kernel: ``kernels/layernorm_gated.py:layernorm_fn``
- tolerances: ``[defaults.<dtype>]`` in tolerances.toml, overridden under ``[op.layernorm_gated]`` (none yet)
"""

from __future__ import annotations

from typing import Any

import torch
from hypothesis import strategies as st

from kernels import layernorm_gated as kernel
from kernels.launch import any_shape
from ops import long
from ops.common import error_inputs, full, gen, log_uniform, randn
from parity.errors import ParityError
from parity.registry import register
from parity.spec import (
    ErrorInput,
    FieldCheck,
    Impl,
    OpSpec,
    Problem,
    check_fields,
    flag,
    helion_candidates,
    increasing_pair,
    integer,
    number,
    size_one_key,
)
from reference.layernorm_segmented import row_blocked

VALUES = ("x_range", "z_scale")
"""The value fields its inputs depend on."""

CAPS = {
    "ci": {"rows": 40, "groups": (1, 2, 3), "group_sizes": (16, 48, 64)},
    "gpu": {"rows": 4096, "groups": (1, 4, 8), "group_sizes": (96, 256, 512, 1024)},
}
EPS = 1e-5
VALUE_CHOICES = {
    # Rows of x scaled log-uniformly: 1e-4 makes x^2 (1e-8) far smaller than eps, 1e3 stays within fp16 with
    # room; |z| of 10 or more saturates silu (0 or z), 1e-2 keeps it in its linear part. The weight and bias
    # gradients sum over rows, so the gpu profile's 4096 rows keep |z| to 10.
    "ci": {"x_ranges": ((1.0, 1.0), (1e-4, 1e-2), (1e-4, 1.0), (1.0, 1e3), (1e-4, 1e3)), "z_scales": (1.0, 1e-2, 1e2)},
    "gpu": {
        "x_ranges": ((1.0, 1.0), (1e-4, 1e-2), (1e-4, 1.0), (1.0, 1e3), (1e-4, 1e3)),
        "z_scales": (1.0, 1e-3, 1e-2, 10.0),
    },
}
"""The value scales each profile draws (the first of each is the default, where shrinking goes)."""
BUDGET = 1e3


def magnitude(p: Problem) -> float:
    """How much a problem's value fields may scale grad.x above the default values: 1/rstd of the smallest rows
    (at most 1/sqrt(eps)) times |z| above 1 (fp64 reference runs: 14 at the defaults, 1.9e3 with rows of 1e-4,
    4.2e4 with rows of 1e-2 and z of 100). Generated problems keep it within BUDGET so fp16 never overflows."""
    lo = p.get("x_range", (1.0, 1.0))[0]
    return min(1.0 / lo, EPS**-0.5) * max(1.0, float(p.get("z_scale", 1.0)))


def problems(profile: str) -> Any:
    """The generated problems of ``profile`` (the long profile generates none: its problem is pinned)."""
    profile = "gpu" if profile == "long" else profile
    caps, values = CAPS[profile], VALUE_CHOICES[profile]

    @st.composite
    def draw(draw: Any) -> dict[str, Any]:
        problem = draw(
            st.fixed_dictionaries(
                {
                    "rows": st.integers(1, caps["rows"]),
                    "ngroups": st.sampled_from(caps["groups"]),
                    "group_size": st.sampled_from(caps["group_sizes"]),
                    "z": st.booleans(),
                    "norm_before_gate": st.booleans(),
                    "is_rms_norm": st.booleans(),
                    "bias": st.booleans(),
                    "x_range": st.sampled_from(values["x_ranges"]).map(list),
                }
            )
        )
        fits = [z for z in values["z_scales"] if magnitude({**problem, "z_scale": z}) <= BUDGET]
        return {**problem, "z_scale": draw(st.sampled_from(fits))}

    return draw()


FIELDS: dict[str, FieldCheck] = {
    "z": flag,
    "norm_before_gate": flag,
    "is_rms_norm": flag,
    "bias": flag,
    "x_range": increasing_pair(1e-6, 1e4),
    "z_scale": number(1e-6, 1e6),
    "segment": integer(1),
}
MAX_GROUP_BYTES = 65536
"""mamba-ssm's gated norm (layernorm_gated.py) and the Helion port (kernels/layernorm_gated.py) hold one group
in one block of at most 64 KiB: group_size <= 65536 // element size (16384 in fp32, 32768 in fp16/bf16)."""


def check_problem(p: Problem, dtype: torch.dtype) -> None:
    """Declared fields, and a group that fits the kernels' one block in ``dtype``."""
    check_fields(p, {k: integer(1) for k in ("rows", "ngroups", "group_size")}, FIELDS)
    most = MAX_GROUP_BYTES // dtype.itemsize
    if p["group_size"] > most:
        raise ParityError(
            f"problem field 'group_size' ({p['group_size']}) must be at most {most} in "
            f"{str(dtype).removeprefix('torch.')}: the kernels hold one group in a block of "
            f"{MAX_GROUP_BYTES} bytes"
        )


def oracle_for(p: Problem) -> tuple[Impl, torch.dtype] | None:
    """A problem with a ``segment`` field is judged by the row-blocked fp64 oracle, blocks of that many rows, on fp32
    copies of the inputs (exact for every test dtype) from ``long.FP32_STORAGE`` elements of x on, fp64 below."""
    if "segment" not in p:
        return None
    wide = torch.float32 if p["rows"] * p["ngroups"] * p["group_size"] >= long.FP32_STORAGE else torch.float64
    return Impl("row-blocked-fp64", row_blocked(p["segment"])), wide


def inputs(p: Problem, dtype: torch.dtype, seed: int, device: torch.device) -> dict[str, Any]:
    """x (rows, ngroups * group_size), weight near 1, bias, z in the test dtype. Value scales: each row of x is
    N(0, 1) times a factor log-uniform in ``x_range`` (default [1, 1]; tiny rows are dominated by eps, large ones
    test the statistics' range), z is N(0, 1) times ``z_scale`` (default 1; large |z| saturates silu). Absent
    fields give exactly the inputs of a problem that predates them."""
    check_problem(p, dtype)
    g = gen(seed)
    n = p["ngroups"] * p["group_size"]
    x = torch.randn(p["rows"], n, generator=g, dtype=torch.float32)
    inputs: dict[str, Any] = {
        "weight": (1.0 + 0.1 * torch.randn(n, generator=g)).to(device=device, dtype=dtype),
        "bias": (0.1 * torch.randn(n, generator=g)).to(device=device, dtype=dtype) if p.get("bias") else None,
        "eps": EPS,
        "group_size": p["group_size"],
        "norm_before_gate": bool(p.get("norm_before_gate", True)),
        "is_rms_norm": bool(p.get("is_rms_norm", True)),
    }
    if p.get("z"):
        inputs["z"] = randn(g, p["rows"], n, dtype=dtype, device=device, scale=p.get("z_scale", 1.0))
    # Drawn last, so that the other inputs do not depend on it (and [1, 1] scales by exactly 1).
    rows = log_uniform(g, p["rows"], p.get("x_range", (1.0, 1.0)))
    return {"x": (x * rows[:, None]).to(device=device, dtype=dtype), **inputs}


# ---------------------------------------------------------------------------------------------
# Error inputs: each starts from a valid call on tiny tensors (3 rows of 8 in groups of 4) and breaks one argument.

VALID = {"x": full(3, 8), "weight": full(8), "bias": None, "group_size": 4, "eps": 1e-5}
ERROR_INPUTS = (
    *error_inputs(
        VALID,
        [
            ("group_size 3 of a width of 8", "group_size", {"group_size": 3}, "positive divisor"),
            ("group_size 0", "group_size", {"group_size": 0}, "positive divisor"),
            ("weight of width 7, x of 8", "weight", {"weight": full(7)}, "shape"),
            ("bias of width 7, x of 8", "bias", {"bias": full(7)}, "shape"),
            ("z of width 7, x of 8", "z", {"z": full(3, 7)}, "shape"),
            ("integer x", "x", {"x": full(3, 8, dtype=torch.int64)}, "floating-point", TypeError),
        ],
    ),
    ErrorInput(
        description="a group of 16400 fp32 values (65600 bytes), wider than the kernels' one block of 64 KiB: the "
        "pure-PyTorch reference has no block and computes it",
        argument="group_size",
        make=lambda device: {
            "x": torch.full((1, 16400), 0.5, device=device),
            "weight": torch.ones(16400, device=device),
            "bias": None,
            "group_size": 16400,
        },
        error_type=RuntimeError,
        match="exceeds one block",
        accepted_by=("torch",),
    ),
)


NORM_RMS = {
    "rows": 7,
    "ngroups": 2,
    "group_size": 48,
    "z": True,
    "norm_before_gate": False,
    "is_rms_norm": True,
    "bias": False,
}
"""The gated norm's first pinned example: Nemotron's RMSNorm gated after the norm, a group of 48 in a block of 64."""


SPEC = register(
    OpSpec(
        name="layernorm_gated",
        reference=Impl("torch", "reference.layernorm_gated:layernorm_fn"),
        baseline=Impl("triton", "reference.mamba_triton:layernorm_fn"),
        candidates=helion_candidates(kernel, "layernorm_fn"),
        make_inputs=inputs,
        problems=problems,
        check_problem=check_problem,
        outputs=("out",),
        grad_inputs=("x", "weight", "bias", "z"),
        examples=(
            NORM_RMS,
            # LayerNorm over a group that is not a power of two: padded lanes must stay out of the statistics; rows
            # up to 1e3 and a z that saturates silu.
            {
                "rows": 5,
                "ngroups": 3,
                "group_size": 24,
                "z": True,
                "norm_before_gate": True,
                "is_rms_norm": False,
                "bias": True,
                "x_range": [1.0, 1e3],
                "z_scale": 100.0,
            },
            # RMSNorm of x * silu(z) with every row dominated by eps (x^2 <= 1e-4 * eps).
            {
                "rows": 6,
                "ngroups": 2,
                "group_size": 64,
                "z": True,
                "norm_before_gate": False,
                "is_rms_norm": True,
                "bias": False,
                "x_range": [1e-4, 1e-2],
            },
        ),
        # Nemotron-3-Nano's gated norm: (b*L, h*p) rows, one group per B/C group.
        training_problems=(
            {
                "rows": 16384,
                "ngroups": 8,
                "group_size": 512,
                "z": True,
                "norm_before_gate": False,
                "is_rms_norm": True,
                "bias": False,
            },
        ),
        bucket=lambda p: kernel.store_bucket(p["group_size"]),
        relayout_inputs=("x", "z"),
        compile_key=lambda p: (p["group_size"], size_one_key(p)),  # group_size is specialized (hl.specialize)
        error_inputs=ERROR_INPUTS,
        flops=lambda p: 0.0,
        tuning_configs=kernel.tuning_configs,
        any_shape=any_shape,
        profile_examples={"long": (long.long_norm(),)},
        max_examples={"long": 0},
        oracle_for=oracle_for,
    )
)
