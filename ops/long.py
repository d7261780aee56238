"""Long-context problems (issue 18): shapes whose tensors' element offsets cross 2^31, where 32-bit pointer
arithmetic (Triton's, for int32-specialized strides and program ids) wraps, and what judging them on an H200 takes.

An axis "crosses" in a tensor when its term of the element offset, (size - 1) * stride (contiguous strides), is
past 2^31 - 1 by itself: a kernel that forms ``pid * stride`` for that axis in int32 wraps there, whatever the other
axes contribute. :func:`ssd_crossings` lists them per axis for ssd_combined's inputs and mamba-ssm's intermediates;
``tests/test_long_problems.py`` checks each long problem crosses the axis it is named after.

Axes and tensors (contiguous; b batch, l seqlen, c chunks, L chunk_size, h heads, g groups, p headdim, n dstate):
x, z, out, dx (b, l, h, p); B, C (b, l, g, n); dt (b, l, h); dt and dA_cumsum chunked (b, h, c, L);
states (b, c, h, p, n), fp32; CB (b, c, g, L, L). The head axis never crosses on an H200: its largest stride is in
the (b, h, c, L) tensors (c * L >= l), so it needs h * l >= 2^31, an x of h * l * p >= 2^37 elements at p = 64
(275 GB in bf16); in x its term is h * p.

The memory of one case (:func:`ssd_memory`, bf16 inputs, estimated; the table also has the measured peak), in bytes
per element of the x-like tensors (x and z; B, C and dt alike): the inputs 2 (kept by the engine); while the oracle
runs, its fp32 copies 4 (its own: no clones, no in-place check) and the fp64 working set of one segment
(:data:`SEGMENT_ELEMENTS` x elements, 64 x 8 bytes each); its outputs and gradients 4 (kept for every implementation),
the upstream gradient of out 2 (the engine's draw, kept in the case's dtype), the running implementation's two clones
4 and outputs and gradients 2 (one at a time: each is compared as soon as it has run and only its error statistics are
kept, the baseline's too), plus mamba-ssm's or Helion's intermediates (fp32 states three times: states, their
gradient, the recomputed ones; CB; dA_cumsum and dt chunked) and the comparison's fp64 temporaries of one 2^26-element
block (:data:`COMPARE_BYTES`; parity.compare). GB = 1e9 bytes; an H200 holds 141 GB.

=========== ===================== ========== ============ ============ ===================== ======= ======== ========
problem     sizes                 x elems    states elems x last offs  crosses (tensors)     segment peak GB  measured
=========== ===================== ========== ============ ============ ===================== ======= ======== ========
sequence    b1 l524388 L128 h64   2.148e9    2.148e9      past 2^31    sequence (x),         4096    87.7     79.9
            g8 p64 n128                                                chunk (states)
batch       b2 l131072 L32 h64    1.074e9    4.295e9      2^30 - 1     batch (states)        2048    96.2     95.6
            g8 p64 n128 z
chunk       b1 l131121 L32 h64    5.371e8    2.149e9      < 2^30       chunk (states)        4096    43.3     38.5
            nseq3 initial_states
gated norm  262145 x 8 x 1024, z  2.147e9    -            past 2^31    row (x, z, out)       2048    71.9     68.7
=========== ===================== ========== ============ ============ ===================== ======= ======== ========

"measured": the process's peak (``meta.peak_device_bytes`` of ``parity check --json``; the gated norm in
bench/results/h200-run24, the SSD problems in h200-run26). The batch problem's peak was 111.3 GB in h200-run25, when
the Helion backward kept the fp32 temporaries of the z gate (x-sized: z, the ungated output, the upstream gradient,
the sigmoid) alive through the whole backward; they are freed before the backward's kernels run since
(``kernels.ssd_combined_bwd.gate_backward``).
"""

from __future__ import annotations

import math
from typing import Any

from parity.compare import BLOCK
from parity.spec import Problem

LIMIT = 2**31 - 1
"""The largest element offset 32-bit signed arithmetic holds."""
SEGMENT_ELEMENTS = 2**24
"""x elements per segment of the segmented oracle (128 MB of fp64 x; the reference's fp64 working set on a segment is
a few dozen times that)."""
FP32_STORAGE = 2**28
"""From this many x elements on (2 GB per fp64 copy), the segmented oracle gets fp32 copies of the whole tensors."""
H200_BYTES = 141e9
COMPARE_BYTES = 6 * 8 * BLOCK
"""The comparison's fp64 temporaries (oracle, candidate, differences, ratios) of one block (parity.compare)."""

SSD_LONG: dict[str, dict[str, Any]] = {
    # The Nemotron mixer's heads at 524388 tokens (a ragged last chunk of 100): x's sequence term (l - 1) * h * p
    # crosses, and so does the states' chunk term.
    "sequence": {
        "batch": 1,
        "seqlen": 524388,
        "chunk_size": 128,
        "nheads": 64,
        "ngroups": 8,
        "headdim": 64,
        "dstate": 128,
        "D": "h",
        "dt_bias": True,
        "dt_softplus": True,
    },
    # Two rows whose states (4 dstate per chunk token at chunk 32) put the second row past 2^31; x stays below.
    "batch": {
        "batch": 2,
        "seqlen": 131072,
        "chunk_size": 32,
        "nheads": 64,
        "ngroups": 8,
        "headdim": 64,
        "dstate": 128,
        "D": "h",
        "z": True,
    },
    # One row of 4098 chunks (a ragged last one): the states' chunk term crosses alone; packed sequences and
    # initial states carried through the segments.
    "chunk": {
        "batch": 1,
        "seqlen": 131121,
        "chunk_size": 32,
        "nheads": 64,
        "ngroups": 8,
        "headdim": 64,
        "dstate": 128,
        "nseq": 3,
        "initial_states": True,
    },
}
"""ssd_combined's long problems, by the axis they cross (the oracle's segment length is added by :func:`long_ssd`)."""

NORM_LONG: dict[str, Any] = {
    "rows": 262145,
    "ngroups": 8,
    "group_size": 1024,
    "z": True,
    "norm_before_gate": False,
    "is_rms_norm": True,
    "bias": False,
}
"""The gated norm past 2^31: Nemotron's norm (groups of 1024, gated before the norm) on 262145 rows of 8192, so the
row term (rows - 1) * cols = 2^31 crosses."""


def segment_len(p: Problem) -> int:
    """Tokens per oracle segment: about :data:`SEGMENT_ELEMENTS` x elements, a multiple of chunk_size."""
    per_token = p["batch"] * p["nheads"] * p["headdim"]
    return p["chunk_size"] * max(1, SEGMENT_ELEMENTS // (per_token * p["chunk_size"]))


def long_ssd() -> dict[str, dict[str, Any]]:
    """The long problems with their oracle segment length (the ``segment`` field flags a problem long)."""
    return {axis: {**p, "segment": segment_len(p)} for axis, p in SSD_LONG.items()}


def long_norm() -> dict[str, Any]:
    """The gated norm's long problem with its oracle's rows per block (about :data:`SEGMENT_ELEMENTS` elements)."""
    return {**NORM_LONG, "segment": max(1, SEGMENT_ELEMENTS // (NORM_LONG["ngroups"] * NORM_LONG["group_size"]))}


def ssd_tensors(p: Problem) -> dict[str, tuple[tuple[str, int], ...]]:
    """ssd_combined's inputs and mamba-ssm's main intermediates: name -> ((axis, size), ...) in memory order."""
    b, seq, h, g, hp, n, L = (p[k] for k in ("batch", "seqlen", "nheads", "ngroups", "headdim", "dstate", "chunk_size"))
    c = math.ceil(seq / L)
    return {
        "x": (("batch", b), ("sequence", seq), ("head", h), ("headdim", hp)),
        "B": (("batch", b), ("sequence", seq), ("group", g), ("dstate", n)),
        "dt": (("batch", b), ("sequence", seq), ("head", h)),
        "dA_cumsum": (("batch", b), ("head", h), ("chunk", c), ("position", L)),
        "states": (("batch", b), ("chunk", c), ("head", h), ("headdim", hp), ("dstate", n)),
        "CB": (("batch", b), ("chunk", c), ("group", g), ("position", L), ("position2", L)),
    }


def axis_terms(dims: tuple[tuple[str, int], ...]) -> dict[str, int]:
    """Each axis's largest offset term, (size - 1) * stride, of a contiguous tensor."""
    terms, stride = {}, 1
    for axis, size in reversed(dims):
        terms[axis] = (size - 1) * stride
        stride *= size
    return terms


def crossings(tensors: dict[str, tuple[tuple[str, int], ...]]) -> dict[str, list[str]]:
    """axis -> the tensors whose term of that axis alone is past 2^31 - 1."""
    found: dict[str, list[str]] = {}
    for name, dims in tensors.items():
        for axis, term in axis_terms(dims).items():
            if term > LIMIT:
                found.setdefault(axis, []).append(name)
    return found


def ssd_crossings(p: Problem) -> dict[str, list[str]]:
    """axis -> the ssd_combined tensors it crosses 2^31 in."""
    return crossings(ssd_tensors(p))


def norm_crossings(p: Problem) -> dict[str, list[str]]:
    """axis -> the gated norm tensors (x, z, out: rows x ngroups * group_size) it crosses 2^31 in."""
    return crossings({"x": (("row", p["rows"]), ("column", p["ngroups"] * p["group_size"]))})


def numel(dims: tuple[tuple[str, int], ...]) -> int:
    return math.prod(size for _, size in dims)


def ssd_memory(p: Problem) -> dict[str, float]:
    """Estimated peak device bytes of one bf16 case (see the module docstring), by phase, and their max."""
    t = {k: numel(v) for k, v in ssd_tensors(p).items()}
    x_like = t["x"] * (2 if p.get("z") else 1)  # x and z; out and grad x (and grad z) alike
    seq = x_like + 2 * t["B"] + t["dt"]  # the sequence inputs (and their gradients)
    out = t["x"]
    kept_oracle = 4 * (out + seq)
    upstream = 2 * out
    segment = 64 * 8 * SEGMENT_ELEMENTS
    oracle_phase = 2 * seq + 4 * seq + kept_oracle + upstream + segment
    impl = 4 * seq + 2 * (out + seq) + 3 * 4 * t["states"] + 4 * t["CB"] + 4 * 2 * t["dA_cumsum"]
    judge_phase = 2 * seq + kept_oracle + upstream + impl + COMPARE_BYTES
    return {"oracle": oracle_phase, "judge": judge_phase, "peak": max(oracle_phase, judge_phase)}


def norm_memory(p: Problem) -> float:
    """Estimated peak device bytes of one bf16 case of the gated norm (inputs x and z, output, two gradients), by
    the same accounting as :func:`ssd_memory`; the kernels keep only per-row statistics."""
    e = p["rows"] * p["ngroups"] * p["group_size"]
    seq = e * (2 if p.get("z") else 1)
    kept = 2 * seq + 4 * (e + seq) + 2 * e  # the inputs, the oracle's outputs and gradients, the upstream
    oracle_phase = kept + 4 * seq  # the oracle's fp32 copies of the inputs
    judge_phase = kept + 4 * seq + 2 * (e + seq) + COMPARE_BYTES  # one implementation's clones, outputs, gradients
    return max(oracle_phase, judge_phase)
