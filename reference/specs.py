"""The Mamba-2 op registry: one OpSpec per op, tying the pure-PyTorch reference, the original
mamba-ssm Triton kernel (baseline) and the Helion port (candidates, one per explicit config) to
realistic inputs and hypothesis problem strategies. Tolerances live in tolerances.toml."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import strategies as st

from parity.errors import ParityError
from parity.registry import register
from parity.spec import Impl, OpSpec, Problem
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
    "ci": Caps(batch=2, max_chunks=3, chunk_sizes=(16, 32), group_counts=(1, 2), heads_per_group=2,
               headdims=(8, 16), dstates=(16,)),
    "gpu": Caps(batch=2, max_chunks=12, chunk_sizes=(64, 128, 256), group_counts=(1, 2, 8),
                heads_per_group=4, headdims=(32, 64), dstates=(64, 128)),
}

SSD_FEATURES = ("D", "z", "dt_bias", "dt_softplus", "dt_limit", "seq_idx", "initial_states")

NEMOTRON = {"batch": 2, "seqlen": 8192, "chunk_size": 128, "nheads": 64, "ngroups": 8, "headdim": 64,
            "dstate": 128, "D": "h", "dt_bias": True, "dt_softplus": True}
"""The Nemotron-3-Nano mixer shape, the training shape every gate includes (its Mamba2 layer passes
D of shape (h,), dt_bias and softplus to the scan, and gates afterwards in the RMSNorm)."""


def ssd_problems(features: tuple[str, ...]) -> Callable[[str], Any]:
    """A profile -> strategy function drawing SSD problems with the given optional features."""

    def problems(profile: str) -> Any:
        caps = CAPS[profile]

        @st.composite
        def draw(draw: Any) -> dict[str, Any]:
            chunk = draw(st.sampled_from(caps.chunk_sizes))
            most = caps.max_chunks * chunk
            seqlen = draw(st.one_of(
                st.just(1),
                st.integers(2, chunk - 1),  # shorter than one chunk
                st.integers(chunk + 1, most).filter(lambda n: n % chunk != 0),  # ragged last chunk
                st.integers(1, caps.max_chunks).map(lambda c: c * chunk),  # whole chunks
            ))
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
                    problem["nseq"] = draw(st.integers(1, 3)) if draw(st.booleans()) else 0
                else:
                    problem[feature] = draw(st.booleans())
            return problem

        return draw()

    return problems


def check_ssd_problem(p: Problem) -> None:
    """Reject problems the ops forbid, with a message naming the field."""
    for key in ("batch", "seqlen", "chunk_size", "nheads", "ngroups", "headdim", "dstate"):
        if not isinstance(p.get(key), int) or p[key] < 1:
            raise ParityError(f"problem field {key!r} must be a positive integer, got {p.get(key)!r}")
    if p["nheads"] % p["ngroups"]:
        raise ParityError(f"nheads={p['nheads']} is not a multiple of ngroups={p['ngroups']}")
    if p.get("D", "none") not in ("none", "h", "hp"):
        raise ParityError(f"problem field 'D' must be none, h or hp, got {p['D']!r}")


# ---------------------------------------------------------------------------------------------
# Inputs: realistic values (dt through softplus, A < 0, never all zeros)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(gen: torch.Generator, *shape: int, dtype: torch.dtype, device: torch.device,
           scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, generator=gen, dtype=torch.float32) * scale).to(device=device, dtype=dtype)


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
    x, B, C, z, dt and initial_states in the test dtype; A, D, dt_bias in fp32 (parameters)."""
    check_ssd_problem(p)
    g = _gen(seed)
    b, seqlen, h, hd, ng, n = p["batch"], p["seqlen"], p["nheads"], p["headdim"], p["ngroups"], p["dstate"]
    softplus = bool(p.get("dt_softplus", False))
    # Training dt lies in [1e-3, 1e-1]: softplus(raw + bias) with bias = softplus^-1(dt0) gets there.
    dt0 = torch.exp(torch.rand(h, generator=g) * (math.log(0.1) - math.log(0.001)) + math.log(0.001))
    raw = torch.randn(b, seqlen, h, generator=g) * 0.5
    if softplus:
        dt = raw + (torch.log(torch.expm1(dt0)) if not p.get("dt_bias") else 0.0)
    else:
        dt = torch.nn.functional.softplus(raw + torch.log(torch.expm1(dt0)))
    inputs: dict[str, Any] = {
        "x": _randn(g, b, seqlen, h, hd, dtype=dtype, device=device),
        "dt": dt.to(device=device, dtype=dtype),
        "A": (-torch.exp(torch.rand(h, generator=g) * math.log(16.0))).to(device),  # A in [-16, -1]
        "B": _randn(g, b, seqlen, ng, n, dtype=dtype, device=device),
        "C": _randn(g, b, seqlen, ng, n, dtype=dtype, device=device),
        "chunk_size": p["chunk_size"],
    }
    d_kind = p.get("D", "none")
    if d_kind != "none":
        inputs["D"] = _randn(g, *((h,) if d_kind == "h" else (h, hd)), dtype=torch.float32, device=device)
    if p.get("z"):
        inputs["z"] = _randn(g, b, seqlen, h, hd, dtype=dtype, device=device)
    if p.get("dt_bias"):
        inputs["dt_bias"] = torch.log(torch.expm1(dt0)).to(device) if softplus else (
            torch.randn(h, generator=g) * 0.01).to(device)
    if p.get("dt_softplus"):
        inputs["dt_softplus"] = True
    if p.get("dt_limit"):
        inputs["dt_limit"] = tuple(p["dt_limit"])
    if p.get("initial_states"):
        inputs["initial_states"] = _randn(g, b, h, hd, n, dtype=dtype, device=device)
    if p.get("nseq"):
        inputs["seq_idx"] = _seq_idx(g, b, seqlen, p["nseq"], device)
    return inputs


def _chunked(p: Problem, dtype: torch.dtype, seed: int, device: torch.device) -> dict[str, Any]:
    """Raw inputs plus the fp32 chunked dt and dA_cumsum the intermediate ops consume."""
    raw = ssd_raw_inputs(p, dtype, seed, device)
    with torch.no_grad():
        dA_cumsum, dt = chunk_cumsum_fwd(raw["dt"].float(), raw["A"], p["chunk_size"],
                                         dt_bias=raw.get("dt_bias"), dt_softplus=raw.get("dt_softplus", False),
                                         dt_limit=raw.get("dt_limit", (0.0, float("inf"))))
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
    inputs = {"states": _randn(g, b, c, h, dim, dtype=torch.float32, device=device),
              "dA_chunk_cumsum": raw["dA_cumsum"][:, :, :, -1].contiguous(),
              "chunk_size": p["chunk_size"], "out_dtype": dtype}
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
        states = chunk_state_fwd(raw["B"], raw["x"], raw["dt_chunked"], raw["dA_cumsum"],
                                 seq_idx=raw.get("seq_idx"))
        b, c, h, hd, n = states.shape
        init = raw.get("initial_states")
        states, _ = state_passing_fwd(states.reshape(b, c, h, hd * n), raw["dA_cumsum"][:, :, :, -1],
                                      initial_states=None if init is None else init.reshape(b, h, hd * n),
                                      seq_idx=raw.get("seq_idx"), chunk_size=p["chunk_size"], out_dtype=dtype)
        raw["states"] = states.reshape(b, c, h, hd, n).contiguous()
        raw["cb"] = bmm_chunk_fwd(raw["C"], raw["B"], p["chunk_size"], seq_idx=raw.get("seq_idx"),
                                  output_dtype=torch.float32).contiguous()
    return _pick(raw, {"cb": "cb", "x": "x", "dt": "dt_chunked", "dA_cumsum": "dA_cumsum", "C": "C",
                       "states": "states", "D": "D", "z": "z", "seq_idx": "seq_idx"})


def ssd_combined_inputs(p: Problem, dtype: torch.dtype, seed: int, device: torch.device) -> dict[str, Any]:
    raw = ssd_raw_inputs(p, dtype, seed, device)
    raw["return_final_states"] = True
    return raw


# ---------------------------------------------------------------------------------------------
# Gated RMSNorm / LayerNorm


NORM_CAPS = {"ci": {"rows": 40, "groups": (1, 2, 3), "group_sizes": (16, 48, 64)},
             "gpu": {"rows": 4096, "groups": (1, 4, 8), "group_sizes": (96, 256, 512, 1024)}}


def norm_problems(profile: str) -> Any:
    caps = NORM_CAPS[profile]
    return st.fixed_dictionaries({
        "rows": st.integers(1, caps["rows"]),
        "ngroups": st.sampled_from(caps["groups"]),
        "group_size": st.sampled_from(caps["group_sizes"]),
        "z": st.booleans(),
        "norm_before_gate": st.booleans(),
        "is_rms_norm": st.booleans(),
        "bias": st.booleans(),
    })


def norm_inputs(p: Problem, dtype: torch.dtype, seed: int, device: torch.device) -> dict[str, Any]:
    for key in ("rows", "ngroups", "group_size"):
        if not isinstance(p.get(key), int) or p[key] < 1:
            raise ParityError(f"problem field {key!r} must be a positive integer, got {p.get(key)!r}")
    g = _gen(seed)
    n = p["ngroups"] * p["group_size"]
    inputs: dict[str, Any] = {
        "x": _randn(g, p["rows"], n, dtype=dtype, device=device),
        "weight": (1.0 + 0.1 * torch.randn(n, generator=g)).to(device=device, dtype=dtype),
        "bias": (0.1 * torch.randn(n, generator=g)).to(device=device, dtype=dtype) if p.get("bias") else None,
        "eps": 1e-5,
        "group_size": p["group_size"],
        "norm_before_gate": bool(p.get("norm_before_gate", True)),
        "is_rms_norm": bool(p.get("is_rms_norm", True)),
    }
    if p.get("z"):
        inputs["z"] = _randn(g, p["rows"], n, dtype=dtype, device=device)
    return inputs


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
    return (Impl("helion", target, backward=backward),
            *(Impl(f"helion-cfg{i}", target, config=c, backward=backward) for i, c in enumerate(configs)))


def _impls(op_module: str, function: str) -> dict[str, Any]:
    return {
        "reference": Impl("torch", f"reference.{op_module}:{function}"),
        "baseline": Impl("triton", f"reference.mamba_triton:{function}"),
        "candidates": _helion_candidates(op_module, function, count=2),
    }


RAGGED = {"batch": 2, "seqlen": 37, "chunk_size": 16, "nheads": 4, "ngroups": 2, "headdim": 8, "dstate": 16}
SHORT = {"batch": 1, "seqlen": 21, "chunk_size": 32, "nheads": 2, "ngroups": 1, "headdim": 8, "dstate": 16}
ONE = {"batch": 1, "seqlen": 1, "chunk_size": 16, "nheads": 2, "ngroups": 2, "headdim": 16, "dstate": 16}
ALL_ON = {"D": "hp", "z": True, "dt_bias": True, "dt_softplus": True, "dt_limit": [0.001, 0.1], "nseq": 2,
          "initial_states": True}


def _ssd_examples(features: tuple[str, ...]) -> tuple[dict[str, Any], ...]:
    """Pinned problems: ragged + every feature, shorter than a chunk (of 32, two blocks of 16: a block-local
    mask shows), and a single token."""
    keys = {"D": ("D",), "z": ("z",), "dt_bias": ("dt_bias",), "dt_softplus": ("dt_softplus",),
            "dt_limit": ("dt_limit",), "seq_idx": ("nseq",), "initial_states": ("initial_states",)}
    on = {k: ALL_ON[k] for f in features for k in keys[f]}
    return ({**RAGGED, **on}, dict(SHORT), {**ONE, **on})


SSD_OPS = {
    "chunk_cumsum": ("chunk_cumsum_fwd", chunk_cumsum_inputs, ("dA_cumsum", "dt_out"), ("dt", "A", "dt_bias"),
                     ("dt_bias", "dt_softplus", "dt_limit")),
    "chunk_state": ("chunk_state_fwd", chunk_state_inputs, ("states",), ("B", "x", "dt", "dA_cumsum"),
                    ("seq_idx",)),
    "state_passing": ("state_passing_fwd", state_passing_inputs, ("out", "final_states"),
                      ("states", "dA_chunk_cumsum", "initial_states"), ("seq_idx", "initial_states")),
    "bmm_chunk": ("bmm_chunk_fwd", bmm_chunk_inputs, ("out",), ("a", "b"), ("seq_idx",)),
    "chunk_scan": ("chunk_scan_fwd", chunk_scan_inputs, ("out", "out_x"),
                   ("cb", "x", "dt", "dA_cumsum", "C", "states", "D", "z"), ("D", "z", "seq_idx")),
    "ssd_combined": ("mamba_chunk_scan_combined", ssd_combined_inputs, ("out", "final_states"),
                     ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states"), SSD_FEATURES),
}

def _chunks(p: Problem) -> int:
    return -(-p["seqlen"] // p["chunk_size"])


# Matmul FLOPs of the forward (for the benchmark's compute floor); element-wise work is ignored.
SSD_FLOPS: dict[str, Callable[[Problem], float]] = {
    "chunk_cumsum": lambda p: 0.0,
    "chunk_state": lambda p: 2.0 * p["batch"] * p["seqlen"] * p["nheads"] * p["headdim"] * p["dstate"],
    "state_passing": lambda p: 2.0 * p["batch"] * _chunks(p) * p["nheads"] * p["headdim"] * p["dstate"],
    "bmm_chunk": lambda p: 2.0 * p["batch"] * _chunks(p) * p["ngroups"] * p["chunk_size"] ** 2 * p["dstate"],
    "chunk_scan": lambda p: 2.0 * p["batch"] * p["seqlen"] * p["nheads"] * p["headdim"] * (
        p["chunk_size"] + p["dstate"]),
}
SSD_FLOPS["ssd_combined"] = lambda p: sum(f(p) for k, f in SSD_FLOPS.items() if k != "ssd_combined")


def ssd_bucket(p: Problem) -> str:
    """Configs are promoted per (headdim, dstate, chunk_size, heads per group); seqlen and batch vary."""
    from kernels.ssd_combined import store_bucket

    return store_bucket(p["headdim"], p["dstate"], p["chunk_size"], p["nheads"] // p["ngroups"])


def _ssd_tuning_configs(inputs: dict[str, Any], count: int) -> list[dict[str, Any]]:
    from kernels.ssd_combined import tuning_configs

    return tuning_configs(inputs, count)


for _name, (_fn, _inputs, _outputs, _grads, _features) in SSD_OPS.items():
    register(OpSpec(
        name=_name,
        make_inputs=_inputs,
        problems=ssd_problems(_features),
        outputs=_outputs,
        grad_inputs=_grads,
        examples=_ssd_examples(_features),
        training_problems=(NEMOTRON,),
        nondeterministic=True,  # mamba-ssm's backward accumulates with atomics
        bucket=ssd_bucket,
        relayout_inputs=("x", "dt", "B", "C", "z") if _name == "ssd_combined" else (),
        # The combined op interprets five kernels forward and backward: on CPU one generated problem on
        # top of the three pinned ones keeps the suite within its 10 minutes.
        extra={"flops": SSD_FLOPS[_name], "max_examples": {"ci": 1} if _name == "ssd_combined" else {},
               **({"tuning_configs": _ssd_tuning_configs} if _name == "ssd_combined" else {})},
        **_impls(_name, _fn),
    ))

def _norm_tuning_configs(inputs: dict[str, Any], count: int) -> list[dict[str, Any]]:
    from kernels.layernorm_gated import tuning_configs

    return tuning_configs(inputs, count)


register(OpSpec(
    name="layernorm_gated",
    make_inputs=norm_inputs,
    problems=norm_problems,
    outputs=("out",),
    grad_inputs=("x", "weight", "bias", "z"),
    examples=(
        {"rows": 7, "ngroups": 2, "group_size": 48, "z": True, "norm_before_gate": False, "is_rms_norm": True,
         "bias": False},
        # LayerNorm over a group that is not a power of two: padded lanes must stay out of the statistics.
        {"rows": 5, "ngroups": 3, "group_size": 24, "z": True, "norm_before_gate": True, "is_rms_norm": False,
         "bias": True},
    ),
    # Nemotron-3-Nano's gated norm: (b*L, h*p) rows, one group per B/C group.
    training_problems=({"rows": 16384, "ngroups": 8, "group_size": 512, "z": True, "norm_before_gate": False,
                        "is_rms_norm": True, "bias": False},),
    bucket=lambda p: f"gs{p['group_size']}",  # = kernels.layernorm_gated.store_bucket
    relayout_inputs=("x", "z"),
    extra={"flops": lambda p: 0.0, "tuning_configs": _norm_tuning_configs},
    **_impls("layernorm_gated", "layernorm_fn"),
))
