"""The Mamba-2 op registry: one OpSpec per op, tying the pure-PyTorch reference, the original
mamba-ssm Triton kernel (baseline) and the Helion port (candidates, one per explicit config) to
realistic inputs and hypothesis problem strategies. Tolerances live in tolerances.toml."""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import strategies as st

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
    increasing_pair,
    integer,
    number,
    one_of,
    size_one_key,
)
from reference import _triton_shims
from reference.chunk_cumsum import chunk_cumsum_fwd

# Under the Triton interpreter (CPU), the shims apply to every Triton kernel: mamba-ssm's and the Triton
# that Helion generates. No-op on CUDA.
_triton_shims.install()

# ---------------------------------------------------------------------------------------------
# Problem sizes


@dataclass(frozen=True)
class Caps:
    """Size caps of one hypothesis profile."""

    batch: int
    max_chunks: int
    chunk_sizes: tuple[int, ...]
    group_counts: tuple[int, ...]
    heads_per_group: int
    headdims: tuple[int, ...]
    dstates: tuple[int, ...]


CAPS = {
    "ci": Caps(
        batch=2,
        max_chunks=3,
        chunk_sizes=(16, 32),
        group_counts=(1, 2),
        heads_per_group=2,
        headdims=(8, 16),
        dstates=(16,),
    ),
    "gpu": Caps(
        batch=2,
        max_chunks=12,
        chunk_sizes=(64, 128, 256),
        group_counts=(1, 2, 8),
        heads_per_group=4,
        headdims=(32, 64),
        dstates=(64, 128),
    ),
}

SSD_FEATURES = ("D", "z", "dt_bias", "dt_softplus", "dt_limit", "seq_idx", "initial_states")

NEMOTRON = {
    "batch": 2,
    "seqlen": 8192,
    "chunk_size": 128,
    "nheads": 64,
    "ngroups": 8,
    "headdim": 64,
    "dstate": 128,
    "D": "h",
    "dt_bias": True,
    "dt_softplus": True,
}
"""The Nemotron-3-Nano mixer shape, the training shape every gate includes (its Mamba2 layer passes
D of shape (h,), dt_bias and softplus to the scan, and gates afterwards in the RMSNorm)."""


@dataclass(frozen=True)
class ValueChoices:
    """The value scales one hypothesis profile draws (the first of each is the default, where shrinking
    goes). ``budget`` caps :func:`ssd_magnitude`: fp16 outputs and gradients must stay representable."""

    dt_ranges: tuple[tuple[float, float], ...]
    A_ranges: tuple[tuple[float, float], ...]
    scales: tuple[float, ...]
    bc_scales: tuple[float, ...]
    budget: float


VALUES = {
    # dt from 1e-4 (nearly no decay, states accumulate) to 5 (with |A| >= 4 the decay underflows within a few
    # tokens); |A| from 1e-2 (memory spanning many chunks) to 16; activations 1e-2 to 1e2 (B and C enter
    # squared, so 1e-1 to 10).
    "ci": ValueChoices(
        dt_ranges=((1e-3, 1e-1), (1e-4, 1e-3), (1e-2, 1.0), (0.5, 5.0), (1e-4, 5.0)),
        A_ranges=((1.0, 16.0), (1e-2, 1e-1), (1e-2, 16.0), (4.0, 16.0)),
        scales=(1.0, 1e-2, 1e2),
        bc_scales=(1.0, 1e-1, 10.0),
        budget=100.0,
    ),
    "gpu": ValueChoices(
        dt_ranges=((1e-3, 1e-1), (1e-4, 1e-3), (1e-2, 1.0), (0.5, 5.0), (1e-4, 5.0), (1.0, 10.0)),
        A_ranges=((1.0, 16.0), (1e-2, 1e-1), (1e-2, 16.0), (4.0, 16.0)),
        scales=(1.0, 1e-3, 1e-2, 1e-1, 10.0, 1e2),
        bc_scales=(1.0, 1e-2, 1e-1, 10.0),
        budget=100.0,
    ),
}


def ssd_magnitude(p: Problem) -> float:
    """How much a problem's value fields may scale its largest output or gradient above the default values (a
    deliberately loose product of the factors seen in fp64 reference runs: dt above 0.5 up to 10x, z, B and C
    squared, the larger of x and initial_states). Generated problems keep it within the profile's budget, so
    that fp16 never overflows (default values give at most about 100 at the gpu profile's shapes)."""
    up = {k: max(1.0, float(p.get(k, 1.0))) for k in ("x_scale", "bc_scale", "z_scale", "state_scale")}
    decay = 10.0 if p.get("dt_range", (1e-3, 1e-1))[1] > 0.5 else 1.0
    return decay * up["z_scale"] * up["bc_scale"] ** 2 * max(up["x_scale"], up["state_scale"])


def ssd_problems(features: tuple[str, ...], values: tuple[str, ...]) -> Callable[[str], Any]:
    """A profile -> strategy function drawing SSD problems with the given optional features and value fields."""

    def problems(profile: str) -> Any:
        caps, choices = CAPS[profile], VALUES[profile]

        @st.composite
        def draw(draw: Any) -> dict[str, Any]:
            chunk = draw(st.sampled_from(caps.chunk_sizes))
            most = caps.max_chunks * chunk
            seqlen = draw(
                st.one_of(
                    st.just(1),
                    st.integers(2, chunk - 1),  # shorter than one chunk
                    st.integers(chunk + 1, most).filter(lambda n: n % chunk != 0),  # ragged last chunk
                    st.integers(1, caps.max_chunks).map(lambda c: c * chunk),  # whole chunks
                )
            )
            ngroups = draw(st.sampled_from(caps.group_counts))
            problem: dict[str, Any] = {
                "batch": draw(st.integers(1, caps.batch)),
                "seqlen": seqlen,
                "chunk_size": chunk,
                "ngroups": ngroups,
                "nheads": ngroups * draw(st.integers(1, caps.heads_per_group)),
                "headdim": draw(st.sampled_from(caps.headdims)),
                "dstate": draw(st.sampled_from(caps.dstates)),
            }
            for feature in features:
                if feature == "D":
                    problem["D"] = draw(st.sampled_from(["none", "h", "hp"]))
                elif feature == "dt_limit":
                    problem["dt_limit"] = draw(st.sampled_from([None, [0.001, 0.1]]))
                elif feature == "seq_idx":
                    problem["nseq"] = draw(st.integers(1, min(3, seqlen))) if draw(st.booleans()) else 0
                else:
                    problem[feature] = draw(st.booleans())
            for name in values:  # SSD_VALUE_FIELDS order: the ranges first, then the scales within the budget
                if name in ("dt_range", "A_range"):
                    ranges = choices.dt_ranges if name == "dt_range" else choices.A_ranges
                    problem[name] = list(draw(st.sampled_from(ranges)))
                else:
                    fits = [
                        v
                        for v in (choices.bc_scales if name == "bc_scale" else choices.scales)
                        if ssd_magnitude({**problem, name: v}) <= choices.budget
                    ]
                    problem[name] = draw(st.sampled_from(fits))
            return problem

        return draw()

    return problems


# ---------------------------------------------------------------------------------------------
# Problem schema: declared fields per op, checked before any work (OpSpec.validate)

SIZES = ("batch", "seqlen", "chunk_size", "nheads", "ngroups", "headdim", "dstate")
SSD_VALUE_FIELDS = ("dt_range", "A_range", "x_scale", "bc_scale", "z_scale", "state_scale")
DT_MAX = 20.0
"""Largest dt a problem may ask for: mamba-ssm applies softplus only below 20, and the inverse softplus that
places dt stays finite in fp32 well beyond it."""

SSD_FIELDS: dict[str, FieldCheck] = {
    "D": one_of("none", "h", "hp"),
    "z": flag,
    "dt_bias": flag,
    "dt_softplus": flag,
    "dt_limit": increasing_pair(0.0, math.inf, strict=True, nullable=True),
    "nseq": integer(0),
    "initial_states": flag,
    "dt_range": increasing_pair(1e-6, DT_MAX),
    "A_range": increasing_pair(1e-6, 1e3),
    **{name: number(1e-6, 1e6) for name in ("x_scale", "bc_scale", "z_scale", "state_scale")},
}
"""Every optional field of an SSD problem and its well-formedness check; each op accepts the subset it uses."""

FEATURE_FIELDS = {
    "D": ("D",),
    "z": ("z",),
    "dt_bias": ("dt_bias",),
    "dt_softplus": ("dt_softplus",),
    "dt_limit": ("dt_limit",),
    "seq_idx": ("nseq",),
    "initial_states": ("initial_states",),
}
"""The problem fields of each optional feature."""


def ssd_check(features: tuple[str, ...], values: tuple[str, ...]) -> Callable[[Problem, torch.dtype], None]:
    """The problem check of an SSD op with these optional features and value fields."""
    optional = {k: SSD_FIELDS[k] for f in features for k in FEATURE_FIELDS[f]} | {k: SSD_FIELDS[k] for k in values}
    required = {k: integer(1) for k in SIZES}

    def check(p: Problem, dtype: torch.dtype) -> None:
        check_fields(p, required, optional)
        if p["nheads"] % p["ngroups"]:
            raise ParityError(
                f"problem field 'nheads' ({p['nheads']}) must be a multiple of 'ngroups' ({p['ngroups']})"
            )
        if p.get("nseq", 0) > p["seqlen"]:
            raise ParityError(f"problem field 'nseq' ({p['nseq']}) must be at most 'seqlen' ({p['seqlen']})")

    return check


check_ssd_problem = ssd_check(SSD_FEATURES, SSD_VALUE_FIELDS)
"""The check of a problem of any SSD op (the input makers run it; each op's spec checks its own subset)."""


# ---------------------------------------------------------------------------------------------
# Inputs: realistic values (dt through softplus, A < 0, never all zeros), at the problem's value scales


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(
    gen: torch.Generator, *shape: int, dtype: torch.dtype, device: torch.device, scale: float = 1.0
) -> torch.Tensor:
    return (torch.randn(*shape, generator=gen, dtype=torch.float32) * scale).to(device=device, dtype=dtype)


def _log_uniform(gen: torch.Generator, n: int, bounds: Any) -> torch.Tensor:
    """n fp32 values log-uniform in [lo, hi]."""
    lo, hi = bounds
    return torch.exp(torch.rand(n, generator=gen) * (math.log(hi) - math.log(lo)) + math.log(lo))


def _seq_idx(gen: torch.Generator, batch: int, seqlen: int, nseq: int, device: torch.device) -> torch.Tensor:
    """int32 (batch, seqlen): nseq packed sequences per row, cut at random positions."""
    rows = []
    for _ in range(batch):
        cuts = torch.randperm(max(seqlen - 1, 1), generator=gen)[: max(min(nseq, seqlen) - 1, 0)] + 1
        row = torch.zeros(seqlen, dtype=torch.int32)
        for cut in cuts.tolist():
            row[cut:] += 1
        rows.append(row)
    return torch.stack(rows).to(device)


def ssd_raw_inputs(p: Problem, dtype: torch.dtype, seed: int, device: torch.device) -> dict[str, Any]:
    """The inputs of mamba_chunk_scan_combined for problem ``p``, with mamba-ssm's usual dtypes:
    x, B, C, z, dt and initial_states in the test dtype; A, D, dt_bias in fp32 (parameters).

    Value scales (defaults: training's usual values): each head's dt after softplus is log-uniform in
    ``dt_range`` (default [1e-3, 1e-1]; every token's dt varies around it by a factor of about e^0.5), |A|
    log-uniform in ``A_range`` (default [1, 16]), and x, B and C, z, initial_states are N(0, 1) times
    ``x_scale``, ``bc_scale``, ``z_scale``, ``state_scale`` (default 1). Absent fields give exactly the inputs
    of a problem that predates them."""
    check_ssd_problem(p, dtype)
    g = _gen(seed)
    b, seqlen, h, hd, ng, n = p["batch"], p["seqlen"], p["nheads"], p["headdim"], p["ngroups"], p["dstate"]
    softplus = bool(p.get("dt_softplus", False))
    # softplus(raw + bias) with bias = softplus^-1(dt0) puts each head's dt around dt0.
    dt0 = _log_uniform(g, h, p.get("dt_range", (1e-3, 1e-1)))
    raw = torch.randn(b, seqlen, h, generator=g) * 0.5
    if softplus:
        dt = raw + (torch.log(torch.expm1(dt0)) if not p.get("dt_bias") else 0.0)
    else:
        dt = torch.nn.functional.softplus(raw + torch.log(torch.expm1(dt0)))
    bc_scale = p.get("bc_scale", 1.0)
    inputs: dict[str, Any] = {
        "x": _randn(g, b, seqlen, h, hd, dtype=dtype, device=device, scale=p.get("x_scale", 1.0)),
        "dt": dt.to(device=device, dtype=dtype),
        "A": (-_log_uniform(g, h, p.get("A_range", (1.0, 16.0)))).to(device),
        "B": _randn(g, b, seqlen, ng, n, dtype=dtype, device=device, scale=bc_scale),
        "C": _randn(g, b, seqlen, ng, n, dtype=dtype, device=device, scale=bc_scale),
        "chunk_size": p["chunk_size"],
    }
    d_kind = p.get("D", "none")
    if d_kind != "none":
        inputs["D"] = _randn(g, *((h,) if d_kind == "h" else (h, hd)), dtype=torch.float32, device=device)
    if p.get("z"):
        inputs["z"] = _randn(g, b, seqlen, h, hd, dtype=dtype, device=device, scale=p.get("z_scale", 1.0))
    if p.get("dt_bias"):
        inputs["dt_bias"] = (
            torch.log(torch.expm1(dt0)).to(device) if softplus else (torch.randn(h, generator=g) * 0.01).to(device)
        )
    if p.get("dt_softplus"):
        inputs["dt_softplus"] = True
    if p.get("dt_limit"):
        inputs["dt_limit"] = tuple(p["dt_limit"])
    if p.get("initial_states"):
        inputs["initial_states"] = _randn(g, b, h, hd, n, dtype=dtype, device=device, scale=p.get("state_scale", 1.0))
    if p.get("nseq"):
        inputs["seq_idx"] = _seq_idx(g, b, seqlen, p["nseq"], device)
    return inputs


def _chunked(p: Problem, dtype: torch.dtype, seed: int, device: torch.device) -> dict[str, Any]:
    """Raw inputs plus the fp32 chunked dt and dA_cumsum the intermediate ops consume."""
    raw = ssd_raw_inputs(p, dtype, seed, device)
    with torch.no_grad():
        dA_cumsum, dt = chunk_cumsum_fwd(
            raw["dt"].float(),
            raw["A"],
            p["chunk_size"],
            dt_bias=raw.get("dt_bias"),
            dt_softplus=raw.get("dt_softplus", False),
            dt_limit=raw.get("dt_limit", (0.0, float("inf"))),
        )
    raw["dt_chunked"], raw["dA_cumsum"] = dt.contiguous(), dA_cumsum.contiguous()
    return raw


def _pick(raw: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """Op arguments from raw inputs: {argument: raw name}, skipping absent optional inputs."""
    return {arg: raw[src] for arg, src in names.items() if src in raw}


def chunk_cumsum_inputs(p: Problem, dtype: torch.dtype, seed: int, device: torch.device) -> dict[str, Any]:
    raw = ssd_raw_inputs(p, dtype, seed, device)
    raw["dt"] = raw["dt"].float()  # mamba-ssm keeps dt in fp32 for the cumsum
    return _pick(raw, {k: k for k in ("dt", "A", "chunk_size", "dt_bias", "dt_softplus", "dt_limit")})


def chunk_state_inputs(p: Problem, dtype: torch.dtype, seed: int, device: torch.device) -> dict[str, Any]:
    raw = _chunked(p, dtype, seed, device)
    return _pick(raw, {"B": "B", "x": "x", "dt": "dt_chunked", "dA_cumsum": "dA_cumsum", "seq_idx": "seq_idx"})


def state_passing_inputs(p: Problem, dtype: torch.dtype, seed: int, device: torch.device) -> dict[str, Any]:
    raw = _chunked(p, dtype, seed, device)
    g = _gen(seed + 1)
    b, h, c = raw["dA_cumsum"].shape[:3]
    dim = p["headdim"] * p["dstate"]
    inputs = {
        "states": _randn(g, b, c, h, dim, dtype=torch.float32, device=device, scale=p.get("state_scale", 1.0)),
        "dA_chunk_cumsum": raw["dA_cumsum"][:, :, :, -1].contiguous(),
        "chunk_size": p["chunk_size"],
        "out_dtype": dtype,
    }
    if "initial_states" in raw:
        inputs["initial_states"] = raw["initial_states"].reshape(b, h, dim).float()
    if "seq_idx" in raw:
        inputs["seq_idx"] = raw["seq_idx"]
    return inputs


def bmm_chunk_inputs(p: Problem, dtype: torch.dtype, seed: int, device: torch.device) -> dict[str, Any]:
    raw = ssd_raw_inputs(p, dtype, seed, device)
    inputs = {"a": raw["C"], "b": raw["B"], "chunk_size": p["chunk_size"], "output_dtype": torch.float32}
    if "seq_idx" in raw:
        inputs["seq_idx"] = raw["seq_idx"]
    return inputs


def chunk_scan_inputs(p: Problem, dtype: torch.dtype, seed: int, device: torch.device) -> dict[str, Any]:
    from reference.bmm_chunk import bmm_chunk_fwd
    from reference.chunk_state import chunk_state_fwd
    from reference.state_passing import state_passing_fwd

    raw = _chunked(p, dtype, seed, device)
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
    return _pick(
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


def ssd_combined_inputs(p: Problem, dtype: torch.dtype, seed: int, device: torch.device) -> dict[str, Any]:
    raw = ssd_raw_inputs(p, dtype, seed, device)
    raw["return_final_states"] = True
    return raw


# ---------------------------------------------------------------------------------------------
# Gated RMSNorm / LayerNorm


NORM_CAPS = {
    "ci": {"rows": 40, "groups": (1, 2, 3), "group_sizes": (16, 48, 64)},
    "gpu": {"rows": 4096, "groups": (1, 4, 8), "group_sizes": (96, 256, 512, 1024)},
}
NORM_EPS = 1e-5
NORM_VALUES = {
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
NORM_BUDGET = 1e3


def norm_magnitude(p: Problem) -> float:
    """How much a problem's value fields may scale grad.x above the default values: 1/rstd of the smallest rows
    (at most 1/sqrt(eps)) times |z| above 1 (fp64 reference runs: 14 at the defaults, 1.9e3 with rows of 1e-4,
    4.2e4 with rows of 1e-2 and z of 100). Generated problems keep it within NORM_BUDGET so fp16 never overflows."""
    lo = p.get("x_range", (1.0, 1.0))[0]
    return min(1.0 / lo, NORM_EPS**-0.5) * max(1.0, float(p.get("z_scale", 1.0)))


def norm_problems(profile: str) -> Any:
    caps, values = NORM_CAPS[profile], NORM_VALUES[profile]

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
        fits = [z for z in values["z_scales"] if norm_magnitude({**problem, "z_scale": z}) <= NORM_BUDGET]
        return {**problem, "z_scale": draw(st.sampled_from(fits))}

    return draw()


NORM_FIELDS: dict[str, FieldCheck] = {
    "z": flag,
    "norm_before_gate": flag,
    "is_rms_norm": flag,
    "bias": flag,
    "x_range": increasing_pair(1e-6, 1e4),
    "z_scale": number(1e-6, 1e6),
}
MAX_GROUP_BYTES = 65536
"""mamba-ssm's gated norm (layernorm_gated.py) and the Helion port (kernels/layernorm_gated.py) hold one group
in one block of at most 64 KiB: group_size <= 65536 // element size (16384 in fp32, 32768 in fp16/bf16)."""


def check_norm_problem(p: Problem, dtype: torch.dtype) -> None:
    """Declared fields, and a group that fits the kernels' one block in ``dtype``."""
    check_fields(p, {k: integer(1) for k in ("rows", "ngroups", "group_size")}, NORM_FIELDS)
    most = MAX_GROUP_BYTES // dtype.itemsize
    if p["group_size"] > most:
        raise ParityError(
            f"problem field 'group_size' ({p['group_size']}) must be at most {most} in "
            f"{str(dtype).removeprefix('torch.')}: the kernels hold one group in a block of "
            f"{MAX_GROUP_BYTES} bytes"
        )


def norm_inputs(p: Problem, dtype: torch.dtype, seed: int, device: torch.device) -> dict[str, Any]:
    """x (rows, ngroups * group_size), weight near 1, bias, z in the test dtype. Value scales: each row of x is
    N(0, 1) times a factor log-uniform in ``x_range`` (default [1, 1]; tiny rows are dominated by eps, large ones
    test the statistics' range), z is N(0, 1) times ``z_scale`` (default 1; large |z| saturates silu). Absent
    fields give exactly the inputs of a problem that predates them."""
    check_norm_problem(p, dtype)
    g = _gen(seed)
    n = p["ngroups"] * p["group_size"]
    x = torch.randn(p["rows"], n, generator=g, dtype=torch.float32)
    inputs: dict[str, Any] = {
        "weight": (1.0 + 0.1 * torch.randn(n, generator=g)).to(device=device, dtype=dtype),
        "bias": (0.1 * torch.randn(n, generator=g)).to(device=device, dtype=dtype) if p.get("bias") else None,
        "eps": NORM_EPS,
        "group_size": p["group_size"],
        "norm_before_gate": bool(p.get("norm_before_gate", True)),
        "is_rms_norm": bool(p.get("is_rms_norm", True)),
    }
    if p.get("z"):
        inputs["z"] = _randn(g, p["rows"], n, dtype=dtype, device=device, scale=p.get("z_scale", 1.0))
    # Drawn last, so that the other inputs do not depend on it (and [1, 1] scales by exactly 1).
    rows = _log_uniform(g, p["rows"], p.get("x_range", (1.0, 1.0)))
    return {"x": (x * rows[:, None]).to(device=device, dtype=dtype), **inputs}


# ---------------------------------------------------------------------------------------------
# Error inputs: invalid calls that the reference, the Triton adapter and the Helion port reject alike, before any
# kernel runs (tests/test_error_inputs.py). Each starts from a valid call on tiny tensors (batch 1, seqlen 6 in
# two chunks of 4, 2 heads in 1 group, headdim 4, dstate 4) and breaks one argument.


def _full(*shape: int, dtype: torch.dtype = torch.float32) -> Callable[[torch.device], torch.Tensor]:
    """device -> a tensor of ``shape`` filled with 0.5 (an integer dtype: zeros)."""
    return lambda device: torch.full(shape, 0 if not dtype.is_floating_point else 0.5, dtype=dtype, device=device)


def _seq(length: int, dtype: torch.dtype = torch.int32) -> Callable[[torch.device], torch.Tensor]:
    """device -> seq_idx (1, length): one sequence."""
    return lambda device: torch.zeros(1, length, dtype=dtype, device=device)


def _error_inputs(
    valid: dict[str, Any], cases: list[tuple[str, str, dict[str, Any], str] | tuple[str, str, dict[str, Any], str, Any]]
) -> tuple[ErrorInput, ...]:
    """ErrorInputs from a valid call and (description, offending argument, changed arguments, match[, error
    type]) rows; a changed value that is callable is called with the device (a tensor maker)."""

    def maker(changes: dict[str, Any]) -> Callable[[torch.device], dict[str, Any]]:
        def make(device: torch.device) -> dict[str, Any]:
            return {k: v(device) if callable(v) else v for k, v in {**valid, **changes}.items()}

        return make

    return tuple(
        ErrorInput(
            description=row[0],
            argument=row[1],
            make=maker(row[2]),
            match=row[3],
            error_type=row[4] if len(row) > 4 else ValueError,
        )
        for row in cases
    )


_CS = {"dt": _full(1, 6, 2), "A": _full(2), "chunk_size": 4}
_STATE = {"B": _full(1, 6, 1, 4), "x": _full(1, 6, 2, 4), "dt": _full(1, 2, 2, 4), "dA_cumsum": _full(1, 2, 2, 4)}
_PASS = {"states": _full(1, 2, 2, 16), "dA_chunk_cumsum": _full(1, 2, 2), "chunk_size": 4}
_BMM = {"a": _full(1, 6, 1, 4), "b": _full(1, 6, 1, 4), "chunk_size": 4}
_SCAN = {
    "cb": _full(1, 2, 1, 4, 4),
    "x": _full(1, 6, 2, 4),
    "dt": _full(1, 2, 2, 4),
    "dA_cumsum": _full(1, 2, 2, 4),
    "C": _full(1, 6, 1, 4),
    "states": _full(1, 2, 2, 4, 4),
}
_COMBINED = {
    "x": _full(1, 6, 2, 4),
    "dt": _full(1, 6, 2),
    "A": _full(2),
    "B": _full(1, 6, 1, 4),
    "C": _full(1, 6, 1, 4),
    "chunk_size": 4,
}
_NORM = {"x": _full(3, 8), "weight": _full(8), "bias": None, "group_size": 4, "eps": 1e-5}

ERROR_INPUTS: dict[str, tuple[ErrorInput, ...]] = {
    "chunk_cumsum": _error_inputs(
        _CS,
        [
            ("dt of rank 4", "dt", {"dt": _full(1, 6, 2, 1)}, "non-empty"),
            ("integer dt", "dt", {"dt": _full(1, 6, 2, dtype=torch.int32)}, "floating-point", TypeError),
            ("A of 3 heads, dt of 2", "A", {"A": _full(3)}, "shape"),
            ("dt_bias of 3 heads, dt of 2", "dt_bias", {"dt_bias": _full(3)}, "shape"),
            ("chunk_size 0", "chunk_size", {"chunk_size": 0}, "positive"),
            ("negative chunk_size", "chunk_size", {"chunk_size": -4}, "positive"),
        ],
    ),
    "chunk_state": _error_inputs(
        _STATE,
        [
            ("x of rank 3", "x", {"x": _full(1, 6, 8)}, "non-empty"),
            ("3 groups for 2 heads", "B", {"B": _full(1, 6, 3, 4)}, "not a multiple of ngroups"),
            ("B one position short of x", "B", {"B": _full(1, 5, 1, 4)}, "seqlen=6"),
            (
                "dt of 1 chunk for 6 positions",
                "dt",
                {"dt": _full(1, 2, 1, 4), "dA_cumsum": _full(1, 2, 1, 4)},
                "covering",
            ),
            ("dA_cumsum of another chunk size than dt", "dA_cumsum", {"dA_cumsum": _full(1, 2, 2, 8)}, "shape"),
            ("seq_idx one position short", "seq_idx", {"seq_idx": _seq(5)}, "shape"),
            ("float seq_idx", "seq_idx", {"seq_idx": _seq(6, torch.float32)}, "integer tensor", TypeError),
        ],
    ),
    "state_passing": _error_inputs(
        _PASS,
        [
            ("states of rank 3", "states", {"states": _full(1, 2, 32)}, "non-empty"),
            (
                "dA_chunk_cumsum of 3 chunks, states of 2",
                "dA_chunk_cumsum",
                {"dA_chunk_cumsum": _full(1, 2, 3)},
                "shape",
            ),
            ("initial_states of another dim", "initial_states", {"initial_states": _full(1, 2, 8)}, "shape"),
            ("seq_idx without chunk_size", "chunk_size", {"seq_idx": _seq(6), "chunk_size": None}, "required"),
            ("chunk_size 0 with seq_idx", "chunk_size", {"seq_idx": _seq(6), "chunk_size": 0}, "positive"),
            ("seq_idx of 3 chunks, states of 2", "seq_idx", {"seq_idx": _seq(9)}, "does not give 2 chunks"),
            ("float seq_idx", "seq_idx", {"seq_idx": _seq(6, torch.float32)}, "integer tensor", TypeError),
        ],
    ),
    "bmm_chunk": _error_inputs(
        _BMM,
        [
            ("a of rank 2", "a", {"a": _full(6, 4), "b": _full(6, 4)}, "non-empty"),
            ("b of another width than a", "b", {"b": _full(1, 6, 1, 5)}, "shape"),
            ("chunk_size 0", "chunk_size", {"chunk_size": 0}, "positive"),
            ("negative chunk_size", "chunk_size", {"chunk_size": -1}, "positive"),
            ("seq_idx one position short", "seq_idx", {"seq_idx": _seq(5)}, "shape"),
            ("float seq_idx", "seq_idx", {"seq_idx": _seq(6, torch.float32)}, "integer tensor", TypeError),
        ],
    ),
    "chunk_scan": _error_inputs(
        _SCAN,
        [
            ("x of rank 3", "x", {"x": _full(1, 6, 8)}, "non-empty"),
            ("3 groups for 2 heads", "C", {"C": _full(1, 6, 3, 4)}, "not a multiple of ngroups"),
            (
                "dt of 3 chunks for 6 positions",
                "dt",
                {"dt": _full(1, 2, 3, 4), "dA_cumsum": _full(1, 2, 3, 4)},
                "covering",
            ),
            ("cb of another chunk size", "cb", {"cb": _full(1, 2, 1, 4, 3)}, "shape"),
            ("states of another dstate than C", "states", {"states": _full(1, 2, 2, 4, 5)}, "shape"),
            ("D of 3 heads", "D", {"D": _full(3)}, "shape"),
            ("z of another headdim than x", "z", {"z": _full(1, 6, 2, 5)}, "shape"),
            ("float seq_idx", "seq_idx", {"seq_idx": _seq(6, torch.float32)}, "integer tensor", TypeError),
        ],
    ),
    "ssd_combined": _error_inputs(
        _COMBINED,
        [
            ("x of rank 3", "x", {"x": _full(1, 6, 8)}, "non-empty"),
            ("chunk_size 0", "chunk_size", {"chunk_size": 0}, "positive"),
            ("negative chunk_size", "chunk_size", {"chunk_size": -16}, "positive"),
            ("dt of 3 heads, x of 2", "dt", {"dt": _full(1, 6, 3)}, "shape"),
            ("integer dt", "dt", {"dt": _full(1, 6, 2, dtype=torch.int64)}, "floating-point", TypeError),
            ("A of 3 heads", "A", {"A": _full(3)}, "shape"),
            (
                "3 groups for 2 heads",
                "B",
                {"B": _full(1, 6, 3, 4), "C": _full(1, 6, 3, 4)},
                "not a multiple of ngroups",
            ),
            ("C of another dstate than B", "C", {"C": _full(1, 6, 1, 5)}, "shape"),
            ("D of another headdim", "D", {"D": _full(2, 5)}, "shape"),
            ("z of another headdim than x", "z", {"z": _full(1, 6, 2, 5)}, "shape"),
            ("dt_bias of 3 heads", "dt_bias", {"dt_bias": _full(3)}, "shape"),
            ("initial_states of another dstate", "initial_states", {"initial_states": _full(1, 2, 4, 5)}, "shape"),
            ("seq_idx one position short", "seq_idx", {"seq_idx": _seq(5)}, "shape"),
            ("float seq_idx", "seq_idx", {"seq_idx": _seq(6, torch.float32)}, "integer tensor", TypeError),
            (
                "varlen states without cu_seqlens",
                "cu_seqlens",
                {"return_varlen_states": True, "cu_seqlens": None},
                "must be provided",
            ),
        ],
    ),
    "layernorm_gated": (
        *_error_inputs(
            _NORM,
            [
                ("group_size 3 of a width of 8", "group_size", {"group_size": 3}, "positive divisor"),
                ("group_size 0", "group_size", {"group_size": 0}, "positive divisor"),
                ("weight of width 7, x of 8", "weight", {"weight": _full(7)}, "shape"),
                ("bias of width 7, x of 8", "bias", {"bias": _full(7)}, "shape"),
                ("z of width 7, x of 8", "z", {"z": _full(3, 7)}, "shape"),
                ("integer x", "x", {"x": _full(3, 8, dtype=torch.int64)}, "floating-point", TypeError),
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
    ),
}
"""Every op's error inputs (OpSpec.error_inputs)."""


# ---------------------------------------------------------------------------------------------
# Registration


def _helion_candidates(op_module: str, function: str, count: int) -> tuple[Impl, ...]:
    """The Helion kernel with its default config and with each of its first ``count`` CONFIGS
    (none while the op has no Helion port yet; a port that fails to import is an error). Only a port
    whose module says ``HAS_BACKWARD = False`` is judged forward only (a missing flag means backward is
    judged, so forgetting it cannot hide a gradient bug)."""
    import importlib
    import importlib.util

    module = f"kernels.{op_module}"
    if importlib.util.find_spec(module) is None:
        return ()
    loaded = importlib.import_module(module)
    target, backward = f"{module}:{function}", bool(getattr(loaded, "HAS_BACKWARD", True))
    configs = loaded.CONFIGS[:count]
    return (
        Impl("helion", target, backward=backward),
        *(Impl(f"helion-cfg{i}", target, config=c, backward=backward) for i, c in enumerate(configs)),
    )


def _impls(op_module: str, function: str) -> dict[str, Any]:
    return {
        "reference": Impl("torch", f"reference.{op_module}:{function}"),
        "baseline": Impl("triton", f"reference.mamba_triton:{function}"),
        "candidates": _helion_candidates(op_module, function, count=2),
    }


RAGGED = {"batch": 2, "seqlen": 37, "chunk_size": 16, "nheads": 4, "ngroups": 2, "headdim": 8, "dstate": 16}
SHORT = {"batch": 1, "seqlen": 21, "chunk_size": 32, "nheads": 2, "ngroups": 1, "headdim": 8, "dstate": 16}
ONE = {"batch": 1, "seqlen": 1, "chunk_size": 16, "nheads": 2, "ngroups": 2, "headdim": 16, "dstate": 16}
ALL_ON = {
    "D": "hp",
    "z": True,
    "dt_bias": True,
    "dt_softplus": True,
    "dt_limit": [0.001, 0.1],
    "nseq": 2,
    "initial_states": True,
}
EXTREMES = (
    # Tiny dt and |A| (no decay: states accumulate over every chunk), large x and initial states, small B, C, z.
    {
        "dt_range": [1e-4, 1e-2],
        "A_range": [1e-2, 1e-1],
        "x_scale": 100.0,
        "bc_scale": 0.1,
        "z_scale": 0.01,
        "state_scale": 100.0,
    },
    # dt up to 5 with |A| >= 4: the decay underflows within a few tokens of the chunk (exp(-20) to exp(-1680)).
    {"dt_range": [0.5, 5.0], "A_range": [4.0, 16.0], "x_scale": 10.0},
    # One token with dt 1e-4, a saturated z gate and small B, C.
    {"dt_range": [1e-4, 1e-4], "bc_scale": 0.1, "z_scale": 100.0},
)
"""The value fields of the three pinned problems (each op takes those it has)."""


def _ssd_examples(features: tuple[str, ...], values: tuple[str, ...]) -> tuple[dict[str, Any], ...]:
    """Pinned problems at extreme values: ragged + every feature, shorter than a chunk (of 32, two blocks of 16:
    a block-local mask shows), and a single token (one sequence: nseq <= seqlen)."""
    on = {k: ALL_ON[k] for f in features for k in FEATURE_FIELDS[f]}
    sizes = ({**RAGGED, **on}, dict(SHORT), {**ONE, **on, **({"nseq": 1} if "nseq" in on else {})})
    return tuple(
        {**p, **{k: v for k, v in extreme.items() if k in values}} for p, extreme in zip(sizes, EXTREMES, strict=True)
    )


def _for_op(problem: Problem, features: tuple[str, ...]) -> dict[str, Any]:
    """``problem`` without the feature fields an op does not take (the training shape is one for every op)."""
    taken = {k for f in features for k in FEATURE_FIELDS[f]}
    return {k: v for k, v in problem.items() if k in SIZES or k in taken}


SSD_OPS = {
    "chunk_cumsum": (
        "chunk_cumsum_fwd",
        chunk_cumsum_inputs,
        ("dA_cumsum", "dt_out"),
        ("dt", "A", "dt_bias"),
        ("dt_bias", "dt_softplus", "dt_limit"),
    ),
    "chunk_state": ("chunk_state_fwd", chunk_state_inputs, ("states",), ("B", "x", "dt", "dA_cumsum"), ("seq_idx",)),
    "state_passing": (
        "state_passing_fwd",
        state_passing_inputs,
        ("out", "final_states"),
        ("states", "dA_chunk_cumsum", "initial_states"),
        ("seq_idx", "initial_states"),
    ),
    "bmm_chunk": ("bmm_chunk_fwd", bmm_chunk_inputs, ("out",), ("a", "b"), ("seq_idx",)),
    "chunk_scan": (
        "chunk_scan_fwd",
        chunk_scan_inputs,
        ("out", "out_x"),
        ("cb", "x", "dt", "dA_cumsum", "C", "states", "D", "z"),
        ("D", "z", "seq_idx"),
    ),
    "ssd_combined": (
        "mamba_chunk_scan_combined",
        ssd_combined_inputs,
        ("out", "final_states"),
        ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states"),
        SSD_FEATURES,
    ),
}

SSD_VALUES = {
    "chunk_cumsum": ("dt_range", "A_range"),
    "chunk_state": ("dt_range", "A_range", "x_scale", "bc_scale"),
    "state_passing": ("dt_range", "A_range", "state_scale"),
    "bmm_chunk": ("bc_scale",),
    "chunk_scan": ("dt_range", "A_range", "x_scale", "bc_scale", "z_scale"),
    "ssd_combined": SSD_VALUE_FIELDS,
}
"""The value fields each SSD op's inputs depend on (in SSD_VALUE_FIELDS order)."""


def _chunks(p: Problem) -> int:
    return -(-p["seqlen"] // p["chunk_size"])


# Matmul FLOPs of the forward (for the benchmark's compute floor); element-wise work is ignored.
SSD_FLOPS: dict[str, Callable[[Problem], float]] = {
    "chunk_cumsum": lambda p: 0.0,
    "chunk_state": lambda p: 2.0 * p["batch"] * p["seqlen"] * p["nheads"] * p["headdim"] * p["dstate"],
    "state_passing": lambda p: 2.0 * p["batch"] * _chunks(p) * p["nheads"] * p["headdim"] * p["dstate"],
    "bmm_chunk": lambda p: 2.0 * p["batch"] * _chunks(p) * p["ngroups"] * p["chunk_size"] ** 2 * p["dstate"],
    "chunk_scan": lambda p: (
        2.0 * p["batch"] * p["seqlen"] * p["nheads"] * p["headdim"] * (p["chunk_size"] + p["dstate"])
    ),
}
SSD_FLOPS["ssd_combined"] = lambda p: sum(f(p) for k, f in SSD_FLOPS.items() if k != "ssd_combined")


def ssd_bucket(p: Problem) -> str:
    """Configs are promoted per (headdim, dstate, chunk_size, heads per group); seqlen and batch vary."""
    from kernels.ssd_combined import store_bucket

    return store_bucket(p["headdim"], p["dstate"], p["chunk_size"], p["nheads"] // p["ngroups"])


def ssd_compile_key(p: Problem) -> Hashable:
    """Constexpr sizes (chunk_size; headdim and dstate set mamba-ssm's block sizes), optional inputs and flags,
    and which sizes are 1: what selects the compiled kernels of an SSD problem."""
    return (p["chunk_size"], p["headdim"], p["dstate"], p.get("nseq", 0) > 0, size_one_key(p))


def _ssd_tuning_configs(inputs: dict[str, Any], count: int) -> list[dict[str, Any]]:
    from kernels.ssd_combined import tuning_configs

    return tuning_configs(inputs, count)


for _name, (_fn, _inputs, _outputs, _grads, _features) in SSD_OPS.items():
    register(
        OpSpec(
            name=_name,
            make_inputs=_inputs,
            problems=ssd_problems(_features, SSD_VALUES[_name]),
            check_problem=ssd_check(_features, SSD_VALUES[_name]),
            outputs=_outputs,
            grad_inputs=_grads,
            examples=_ssd_examples(_features, SSD_VALUES[_name]),
            training_problems=(_for_op(NEMOTRON, _features),),
            nondeterministic=True,  # mamba-ssm's backward accumulates with atomics
            bucket=ssd_bucket,
            relayout_inputs=("x", "dt", "B", "C", "z") if _name == "ssd_combined" else (),
            compile_key=ssd_compile_key,
            error_inputs=ERROR_INPUTS[_name],
            # The combined op interprets five kernels forward and backward: on CPU one generated problem on
            # top of the three pinned ones keeps the suite within its 10 minutes.
            extra={
                "flops": SSD_FLOPS[_name],
                "max_examples": {"ci": 1} if _name == "ssd_combined" else {},
                **({"tuning_configs": _ssd_tuning_configs} if _name == "ssd_combined" else {}),
            },
            **_impls(_name, _fn),
        )
    )


def _norm_tuning_configs(inputs: dict[str, Any], count: int) -> list[dict[str, Any]]:
    from kernels.layernorm_gated import tuning_configs

    return tuning_configs(inputs, count)


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


register(
    OpSpec(
        name="layernorm_gated",
        make_inputs=norm_inputs,
        problems=norm_problems,
        check_problem=check_norm_problem,
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
        bucket=lambda p: f"gs{p['group_size']}",  # = kernels.layernorm_gated.store_bucket
        relayout_inputs=("x", "z"),
        compile_key=lambda p: (p["group_size"], size_one_key(p)),  # group_size is specialized (hl.specialize)
        error_inputs=ERROR_INPUTS["layernorm_gated"],
        extra={"flops": lambda p: 0.0, "tuning_configs": _norm_tuning_configs},
        **_impls("layernorm_gated", "layernorm_fn"),
    )
)
