"""What the six SSD ops (chunk_cumsum, chunk_state, state_passing, bmm_chunk, chunk_scan, ssd_combined) share:
problem sizes and value scales per hypothesis profile, the problem schema, the inputs of
``mamba_chunk_scan_combined`` every op's inputs derive from, the pinned problems, the store bucket and compile
key, and :func:`spec`, which builds an op's OpSpec from what differs between them."""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import strategies as st

from kernels.launch import any_shape
from kernels.ssd_combined import store_bucket
from ops.common import gen, log_uniform, randn
from parity.errors import ParityError
from parity.spec import (
    ErrorInput,
    FieldCheck,
    Impl,
    InputMaker,
    OpSpec,
    Problem,
    TuningSpace,
    check_fields,
    flag,
    increasing_pair,
    integer,
    number,
    one_of,
    size_one_key,
)
from reference.chunk_cumsum import chunk_cumsum_fwd

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


def ssd_check(
    features: tuple[str, ...], values: tuple[str, ...], segmented: bool = False
) -> Callable[[Problem, torch.dtype], None]:
    """The problem check of an SSD op with these optional features and value fields; ``segmented``: the op takes
    the ``segment`` field (tokens per segment of its segmented fp64 oracle, a multiple of chunk_size; its presence
    makes the problem a long one, judged by that oracle)."""
    optional = {k: SSD_FIELDS[k] for f in features for k in FEATURE_FIELDS[f]} | {k: SSD_FIELDS[k] for k in values}
    optional |= {"segment": integer(1)} if segmented else {}
    required = {k: integer(1) for k in SIZES}

    def check(p: Problem, dtype: torch.dtype) -> None:
        check_fields(p, required, optional)
        if p["nheads"] % p["ngroups"]:
            raise ParityError(
                f"problem field 'nheads' ({p['nheads']}) must be a multiple of 'ngroups' ({p['ngroups']})"
            )
        if p.get("nseq", 0) > p["seqlen"]:
            raise ParityError(f"problem field 'nseq' ({p['nseq']}) must be at most 'seqlen' ({p['seqlen']})")
        if p.get("segment", p["chunk_size"]) % p["chunk_size"]:
            raise ParityError(
                f"problem field 'segment' ({p['segment']}) must be a multiple of 'chunk_size' ({p['chunk_size']}): "
                "oracle segments start on mamba-ssm's chunk boundaries"
            )

    return check


check_ssd_problem = ssd_check(SSD_FEATURES, SSD_VALUE_FIELDS, segmented=True)
"""The check of a problem of any SSD op (the input makers run it; each op's spec checks its own subset)."""


# ---------------------------------------------------------------------------------------------
# Inputs: realistic values (dt through softplus, A < 0, never all zeros), at the problem's value scales


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


LIMIT_BAND = 1e-3
"""Relative width of the band around each end of ``dt_limit`` that no drawn dt lands in (see off_the_limits)."""


def off_the_limits(
    dt: torch.Tensor, dt_bias: torch.Tensor | None, softplus: bool, limits: tuple[float, float]
) -> torch.Tensor:
    """``dt`` with every token whose effective step (softplus(dt + dt_bias), or dt + dt_bias) lies within
    LIMIT_BAND (relative, +1e-6 absolute) of an end of ``limits`` moved just outside that band, on its side.

    At an end of the clamp the gradient jumps between the step's own and zero: within rounding of the end, an
    implementation may take either side (mamba-ssm's fp32 softplus ``log(1 + exp(x))`` is off by ~1e-4
    relative near dt = 1e-3), so the oracle's side is no verdict there, as gradcheck avoids a function's kinks."""
    bias = dt_bias.double().cpu() if dt_bias is not None else torch.zeros(())
    moved = dt.cpu()
    for attempt in range(8):
        step = moved.double() + bias
        step = torch.nn.functional.softplus(step) if softplus else step
        near = torch.zeros_like(step, dtype=torch.bool)
        target = step.clone()
        for end in (e for e in limits if math.isfinite(e)):
            width = LIMIT_BAND * abs(end) + 1e-6
            close = (step - end).abs() <= width
            near |= close
            target = torch.where(close, torch.where(step >= end, end + 2 * width, end - 2 * width), target)
        if not near.any():
            return moved.to(dt.device)
        if attempt == 0:  # jump to just outside the band; then, if the dtype's rounding fell back in, step by ulps
            raw = (torch.log(torch.expm1(target)) if softplus else target) - bias
        else:
            ulp = torch.finfo(dt.dtype).eps * moved.double().abs().clamp_min(1e-3)
            raw = moved.double() + torch.where(target > step, ulp, -ulp)
        moved = torch.where(near, raw.to(dt.dtype), moved)
    raise AssertionError(f"dt could not be moved off the ends of dt_limit {limits}")


def ssd_raw_inputs(p: Problem, dtype: torch.dtype, seed: int, device: torch.device) -> dict[str, Any]:
    """The inputs of mamba_chunk_scan_combined for problem ``p``, with mamba-ssm's usual dtypes:
    x, B, C, z, dt and initial_states in the test dtype; A, D, dt_bias in fp32 (parameters).

    Value scales (defaults: training's usual values): each head's dt after softplus is log-uniform in
    ``dt_range`` (default [1e-3, 1e-1]; every token's dt varies around it by a factor of about e^0.5), |A|
    log-uniform in ``A_range`` (default [1, 16]), and x, B and C, z, initial_states are N(0, 1) times
    ``x_scale``, ``bc_scale``, ``z_scale``, ``state_scale`` (default 1). Absent fields give exactly the inputs
    of a problem that predates them."""
    check_ssd_problem(p, dtype)
    g = gen(seed)
    b, seqlen, h, hd, ng, n = p["batch"], p["seqlen"], p["nheads"], p["headdim"], p["ngroups"], p["dstate"]
    softplus = bool(p.get("dt_softplus", False))
    # softplus(raw + bias) with bias = softplus^-1(dt0) puts each head's dt around dt0.
    dt0 = log_uniform(g, h, p.get("dt_range", (1e-3, 1e-1)))
    raw = torch.randn(b, seqlen, h, generator=g) * 0.5
    if softplus:
        dt = raw + (torch.log(torch.expm1(dt0)) if not p.get("dt_bias") else 0.0)
    else:
        dt = torch.nn.functional.softplus(raw + torch.log(torch.expm1(dt0)))
    bc_scale = p.get("bc_scale", 1.0)
    inputs: dict[str, Any] = {
        "x": randn(g, b, seqlen, h, hd, dtype=dtype, device=device, scale=p.get("x_scale", 1.0)),
        "dt": dt.to(device=device, dtype=dtype),
        "A": (-log_uniform(g, h, p.get("A_range", (1.0, 16.0)))).to(device),
        "B": randn(g, b, seqlen, ng, n, dtype=dtype, device=device, scale=bc_scale),
        "C": randn(g, b, seqlen, ng, n, dtype=dtype, device=device, scale=bc_scale),
        "chunk_size": p["chunk_size"],
    }
    d_kind = p.get("D", "none")
    if d_kind != "none":
        inputs["D"] = randn(g, *((h,) if d_kind == "h" else (h, hd)), dtype=torch.float32, device=device)
    if p.get("z"):
        inputs["z"] = randn(g, b, seqlen, h, hd, dtype=dtype, device=device, scale=p.get("z_scale", 1.0))
    if p.get("dt_bias"):
        inputs["dt_bias"] = (
            torch.log(torch.expm1(dt0)).to(device) if softplus else (torch.randn(h, generator=g) * 0.01).to(device)
        )
    if p.get("dt_softplus"):
        inputs["dt_softplus"] = True
    if p.get("dt_limit"):
        inputs["dt_limit"] = tuple(p["dt_limit"])
        inputs["dt"] = off_the_limits(inputs["dt"], inputs.get("dt_bias"), softplus, inputs["dt_limit"])
    if p.get("initial_states"):
        inputs["initial_states"] = randn(g, b, h, hd, n, dtype=dtype, device=device, scale=p.get("state_scale", 1.0))
    if p.get("nseq"):
        inputs["seq_idx"] = _seq_idx(g, b, seqlen, p["nseq"], device)
    return inputs


def chunked(p: Problem, dtype: torch.dtype, seed: int, device: torch.device) -> dict[str, Any]:
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


def pick(raw: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """Op arguments from raw inputs: {argument: raw name}, skipping absent optional inputs."""
    return {arg: raw[src] for arg, src in names.items() if src in raw}


# ---------------------------------------------------------------------------------------------
# Pinned problems, the store bucket, the compile key, FLOPs


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


def examples(features: tuple[str, ...], values: tuple[str, ...]) -> tuple[dict[str, Any], ...]:
    """Pinned problems at extreme values: ragged + every feature, shorter than a chunk (of 32, two blocks of 16:
    a block-local mask shows), and a single token (one sequence: nseq <= seqlen)."""
    on = {k: ALL_ON[k] for f in features for k in FEATURE_FIELDS[f]}
    sizes = ({**RAGGED, **on}, dict(SHORT), {**ONE, **on, **({"nseq": 1} if "nseq" in on else {})})
    return tuple(
        {**p, **{k: v for k, v in extreme.items() if k in values}} for p, extreme in zip(sizes, EXTREMES, strict=True)
    )


def for_op(problem: Problem, features: tuple[str, ...]) -> dict[str, Any]:
    """``problem`` without the feature fields an op does not take (the training shape is one for every op)."""
    taken = {k for f in features for k in FEATURE_FIELDS[f]}
    return {k: v for k, v in problem.items() if k in SIZES or k in taken}


def chunks(p: Problem) -> int:
    return -(-p["seqlen"] // p["chunk_size"])


FLOPS: dict[str, Callable[[Problem], float]] = {  # the forward's matmuls; element-wise work is ignored
    "chunk_cumsum": lambda p: 0.0,
    "chunk_state": lambda p: 2.0 * p["batch"] * p["seqlen"] * p["nheads"] * p["headdim"] * p["dstate"],
    "state_passing": lambda p: 2.0 * p["batch"] * chunks(p) * p["nheads"] * p["headdim"] * p["dstate"],
    "bmm_chunk": lambda p: 2.0 * p["batch"] * chunks(p) * p["ngroups"] * p["chunk_size"] ** 2 * p["dstate"],
    "chunk_scan": lambda p: (
        2.0 * p["batch"] * p["seqlen"] * p["nheads"] * p["headdim"] * (p["chunk_size"] + p["dstate"])
    ),
}
FLOPS["ssd_combined"] = lambda p: sum(f(p) for k, f in FLOPS.items() if k != "ssd_combined")


def bucket(p: Problem) -> str:
    """Configs are promoted per (headdim, dstate, chunk_size, heads per group); seqlen and batch vary
    (:func:`kernels.ssd_combined.store_bucket`, what the drop-in looks up)."""
    return store_bucket(p["headdim"], p["dstate"], p["chunk_size"], p["nheads"] // p["ngroups"])


def compile_key(p: Problem) -> Hashable:
    """Constexpr sizes (chunk_size; headdim and dstate set mamba-ssm's block sizes), optional inputs and flags,
    and which sizes are 1: what selects the compiled kernels of an SSD problem."""
    return (p["chunk_size"], p["headdim"], p["dstate"], p.get("nseq", 0) > 0, size_one_key(p))


# ---------------------------------------------------------------------------------------------
# Error inputs: each starts from a valid call on tiny tensors (batch 1, seqlen 6 in two chunks of 4, 2 heads in 1
# group, headdim 4, dstate 4) and breaks one argument.


def seq(length: int, dtype: torch.dtype = torch.int32) -> Callable[[torch.device], torch.Tensor]:
    """device -> seq_idx (1, length): one sequence."""
    return lambda device: torch.zeros(1, length, dtype=dtype, device=device)


def spec(
    *,
    name: str,
    reference: Impl,
    baseline: Impl,
    candidates: tuple[Impl, ...],
    make_inputs: InputMaker,
    outputs: tuple[str, ...],
    grad_inputs: tuple[str, ...],
    features: tuple[str, ...],
    values: tuple[str, ...],
    error_inputs: tuple[ErrorInput, ...],
    relayout_inputs: tuple[str, ...] = (),
    max_examples: dict[str, int] | None = None,
    tuning_configs: TuningSpace | None = None,
    long_problems: tuple[Problem, ...] = (),
    oracle_for: Callable[[Problem], tuple[Impl, torch.dtype] | None] | None = None,
) -> OpSpec:
    """The OpSpec of an SSD op that takes the optional ``features`` (of SSD_FEATURES) and the value fields
    ``values`` (of SSD_VALUE_FIELDS, in that order): its problems, schema, pinned examples and training problem
    follow from them; every SSD op shares the store bucket and the compile key, and is nondeterministic
    (mamba-ssm's backward accumulates with atomics). ``long_problems`` run under the ``long`` profile (which
    generates none), judged by ``oracle_for`` (an op that has one takes the problem field ``segment``)."""
    generated = ssd_problems(features, values)
    return OpSpec(
        name=name,
        reference=reference,
        baseline=baseline,
        candidates=candidates,
        make_inputs=make_inputs,
        problems=lambda profile: generated("gpu" if profile == "long" else profile),
        check_problem=ssd_check(features, values, segmented=oracle_for is not None),
        outputs=outputs,
        grad_inputs=grad_inputs,
        examples=examples(features, values),
        training_problems=(for_op(NEMOTRON, features),),
        profile_examples={"long": long_problems},
        nondeterministic=True,
        bucket=bucket,
        relayout_inputs=relayout_inputs,
        compile_key=compile_key,
        error_inputs=error_inputs,
        max_examples={"long": 0, **(max_examples or {})},
        flops=FLOPS[name],
        tuning_configs=tuning_configs,
        any_shape=any_shape,
        **({} if oracle_for is None else {"oracle_for": oracle_for}),
    )
