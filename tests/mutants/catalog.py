"""The mutant table: every deliberately broken Helion kernel the gate must reject, in one place.

Each entry patches the current source of a module in ``kernels/`` (see :mod:`mutants`), names one failure
class and the problem, dtype and config that expose it. ``tests/test_mutants.py`` runs each one through
the op's registered spec next to the unpatched kernel (the control, which must pass on the same problem).
"""

from __future__ import annotations

from mutants import DETERMINISM, Mutant
from ops.layernorm_gated import NORM_RMS
from ops.ssd import RAGGED

# Problems (field names of ops/ssd.py and ops/layernorm_gated.py). RAGGED is the registry's pinned ragged problem
# (seqlen 37 with chunk_size 16: two whole chunks and a partial one; 4 heads in 2 groups); the *_PINNED problems are the
# registry's first pinned example of each op (RAGGED with every feature the op takes).
CUMSUM_PINNED = {**RAGGED, "dt_bias": True, "dt_softplus": True, "dt_limit": [0.001, 0.1]}
STATE_PASSING_PINNED = {**RAGGED, "nseq": 2, "initial_states": True}  # seed 0 cuts row 1 at position 17 (chunk 1)
BMM_PINNED = {**RAGGED, "nseq": 2}
SMALL = {"batch": 1, "seqlen": 45, "chunk_size": 16, "nheads": 4, "ngroups": 2, "headdim": 8, "dstate": 16}
CHUNK32 = {**SMALL, "chunk_size": 32}  # chunk_size 32: wider than one 16-wide block; no pinned example has it
NORM_LN_GATED = {
    "rows": 5,
    "ngroups": 3,
    "group_size": 16,
    "z": True,
    "norm_before_gate": True,
    "is_rms_norm": False,
    "bias": True,
}  # the registry's second pinned example
NORM_LN_PADDED = {
    "rows": 5,
    "ngroups": 2,
    "group_size": 48,
    "z": False,
    "norm_before_gate": True,
    "is_rms_norm": False,
    "bias": False,
}  # LayerNorm whose group (48) is narrower than its block (64)
GPU_BMM = {"batch": 2, "seqlen": 1024, "chunk_size": 128, "nheads": 8, "ngroups": 2, "headdim": 64, "dstate": 128}
SSD_BWD = {
    "batch": 1,
    "seqlen": 48,
    "chunk_size": 32,
    "nheads": 4,
    "ngroups": 2,
    "headdim": 8,
    "dstate": 16,
    "D": "h",
    "z": True,
    "dt_bias": True,
    "dt_softplus": True,
    "initial_states": True,
    "nseq": 2,
}
"""The smallest ssd_combined problem that takes every path of the backward: two chunks (the second ragged), a
chunk of 32 over two 16-wide column blocks under CONFIGS[0], 2 heads in each of 2 groups, a sequence cut,
initial states, D, z, dt_bias and softplus (every gradient of the op is judged on it)."""
SSD_BWD_ONE_BLOCK = {**SSD_BWD, "chunk_size": 16, "seqlen": 40}  # each chunk inside one 16-wide block
GPU_NORM = {
    "rows": 8192,
    "ngroups": 4,
    "group_size": 256,
    "z": True,
    "norm_before_gate": False,
    "is_rms_norm": True,
    "bias": True,
}  # under CONFIGS[0] (bwd block_sizes [8, 4]): 1024 row groups of 8 rows per group, racing on one partial row
NORM_ROW_GROUPS = {**NORM_RMS, "rows": 29}  # CONFIGS[0]: 4 row groups of 8 rows (the last ragged) per group

CLASSES = (
    "ragged-chunk masking",
    "off-by-one at a chunk boundary",
    "seq_idx reset",
    "low-precision accumulation",
    "dropped D or z term",
    "wrong head-to-group mapping",
    "ignored initial_states",
    "sign of a gradient",
    "atomics misuse",
    "unwritten tail",
    "tf32 where fp32 is required",
    "a block size that breaks masking",
    "nondeterministic reduction order",
)
"""The failure classes the issue asks for; every one must have a mutant (extra classes are allowed)."""

MUTANTS: tuple[Mutant, ...] = (
    # dt past seqlen is not zeroed: the padded tail of the last chunk gets clamp(softplus(dt_bias)) and enters the
    # cumsum.
    Mutant(
        name="cumsum_tail_not_zeroed",
        failure_class="ragged-chunk masking",
        module="kernels.chunk_cumsum",
        function="chunk_cumsum_fwd",
        op="chunk_cumsum",
        patches=(("step = torch.where(valid[:, None], step, 0.0).permute(1, 0)", "step = step.permute(1, 0)"),),
        problem=CUMSUM_PINNED,
        expect="dt_out",
        note="positions past seqlen keep dt = clamp(softplus(0 + dt_bias)) instead of 0",
    ),
    # out[c] gets the state after chunk c instead of the state entering it (the +1 shift lost).
    Mutant(
        name="state_passing_shifted_store",
        failure_class="off-by-one at a chunk boundary",
        module="kernels.state_passing",
        function="state_passing_fwd",
        op="state_passing",
        patches=(
            (
                "[tile_b.begin, chunk + 1, tile_h.begin, tile_d],\n                    state.to(out_dtype),",
                "[tile_b.begin, chunk, tile_h.begin, tile_d],\n                    state.to(out_dtype),",
            ),
        ),
        problem=STATE_PASSING_PINNED,
        expect="out",
        config=1,
        note="states written one chunk early; the last entering state is never written",
    ),
    # The decay into a chunk that starts a new packed sequence is not zeroed: state leaks across sequences.
    Mutant(
        name="state_passing_no_seq_reset",
        failure_class="seq_idx reset",
        module="kernels.state_passing",
        function="state_passing_fwd",
        op="state_passing",
        patches=(("decay = torch.where(seq_end == seq_before, decay, 0.0)", "decay = decay"),),
        problem=STATE_PASSING_PINNED,
        expect="final_states",
        config=1,
        note="row 1 starts its second sequence at position 17: chunk 1 must not see chunk 0's state",
    ),
    # The within-chunk cumsum of dt*A runs in fp16 (mamba-ssm keeps dA_cumsum fp32 end to end).
    Mutant(
        name="cumsum_in_fp16",
        failure_class="low-precision accumulation",
        module="kernels.chunk_cumsum",
        function="chunk_cumsum_fwd",
        op="chunk_cumsum",
        patches=(("torch.cumsum(decay, dim=1)", "torch.cumsum(decay.to(torch.float16), dim=1).to(torch.float32)"),),
        problem=CUMSUM_PINNED,
        expect="dA_cumsum",
        note="an fp32 op: the fp16 running sum loses ~3 digits once |dA_cumsum| > 1",
    ),
    # The silu(z) gate after the norm is dropped (norm_before_gate=True path).
    Mutant(
        name="norm_gate_dropped",
        failure_class="dropped D or z term",
        module="kernels.layernorm_gated",
        function="layernorm_fn",
        op="layernorm_gated",
        patches=(("            y = y * gate\n", "            y = y\n"),),
        problem=NORM_LN_GATED,
        expect="out",
        note="out = norm(x) instead of norm(x) * silu(z)",
    ),
    # Heads map to groups interleaved (h % ngroups) instead of in contiguous blocks (h // heads_per_group).
    Mutant(
        name="chunk_state_interleaved_groups",
        failure_class="wrong head-to-group mapping",
        module="kernels.chunk_state",
        function="chunk_state_fwd",
        op="chunk_state",
        patches=(
            (
                "        group = tile_h.begin // heads_per_group\n        start = tile_c.begin * chunk_size",
                "        group = tile_h.begin % ngroups\n        start = tile_c.begin * chunk_size",
            ),
        ),
        problem=SMALL,
        expect="states",
        note="4 heads in 2 groups: heads 1 and 2 read the other group's B",
    ),
    # initial_states only fills out[0]; it is never carried into the recurrence.
    Mutant(
        name="state_passing_drops_initial_state",
        failure_class="ignored initial_states",
        module="kernels.state_passing",
        function="state_passing_fwd",
        op="state_passing",
        patches=(
            (
                "        out[tile_b.begin, 0, tile_h.begin, tile_d] = carry.to(out_dtype)\n",
                "        out[tile_b.begin, 0, tile_h.begin, tile_d] = carry.to(out_dtype)\n"
                "        carry = carry * 0.0\n",
            ),
        ),
        problem=STATE_PASSING_PINNED,
        expect="out",
        config=1,
        note="out[0] is right, every later state misses exp(sum dA) * initial_state",
    ),
    # The normalisation's correction term in dx has the wrong sign (RMSNorm backward).
    Mutant(
        name="norm_bwd_dx_sign",
        failure_class="sign of a gradient",
        module="kernels.layernorm_gated",
        function="layernorm_fn",
        op="layernorm_gated",
        patches=(
            ("dxs = (wdy - xhat * c1[:, None]) * inv[:, None]", "dxs = (wdy + xhat * c1[:, None]) * inv[:, None]"),
        ),
        problem=NORM_RMS,
        expect="grad.x",
        backward=True,
        config=0,
        note="dx = (w*dy + xhat*c1) * rstd; forward untouched",
    ),
    # dw partials of all row groups accumulate into one row by a plain load + store where an atomic add is needed.
    Mutant(
        name="norm_bwd_racy_accumulation",
        failure_class="atomics misuse",
        module="kernels.layernorm_gated",
        function="layernorm_fn",
        op="layernorm_gated",
        patches=(
            (
                "partials = torch.empty([1 if bias is None else 2, nrow_groups, n]",
                "partials = torch.zeros([1 if bias is None else 2, nrow_groups, n]",
            ),
            (
                "hl.store(partials, [0, tile_p.id, idx], dw_acc, extra_mask=valid)",
                "hl.store(partials, [0, 0, idx], hl.load(partials, [0, 0, idx], extra_mask=valid) + dw_acc, "
                "extra_mask=valid)",
            ),
        ),
        problem=GPU_NORM,
        expect="grad.weight",
        backward=True,
        config=0,
        gpu=True,
        extra={"cpu_problem": NORM_RMS},
        note="exact when programs run one at a time (the interpreter); lost updates when they run concurrently",
    ),
    # dw partials of all row groups are summed by hl.atomic_add into one row instead of stored per row group and
    # summed afterwards in a fixed order: no update is lost (the values pass), but the float addition order is
    # the order the programs happen to reach the atomic, so reruns on identical inputs differ bitwise.
    Mutant(
        name="norm_bwd_atomic_reduction_order",
        failure_class="nondeterministic reduction order",
        module="kernels.layernorm_gated",
        function="layernorm_fn",
        op="layernorm_gated",
        patches=(
            (
                "partials = torch.empty([1 if bias is None else 2, nrow_groups, n]",
                "partials = torch.zeros([1 if bias is None else 2, nrow_groups, n]",
            ),
            (
                "hl.store(partials, [0, tile_p.id, idx], dw_acc, extra_mask=valid)",
                # padded lanes (block_n > group_size) add 0 to the group's first column, never past the row
                "hl.atomic_add(partials, [0, 0, torch.where(valid, idx, tile_g.begin * group_size)], "
                "torch.where(valid, dw_acc, 0.0))",
            ),
        ),
        problem=GPU_NORM,
        expect=DETERMINISM,
        backward=True,
        config=0,
        gpu=True,
        extra={"cpu_problem": NORM_ROW_GROUPS},
        note="values right within tolerance; bitwise reproducible only when programs run one after another "
        "(the interpreter), so only the gate's determinism rerun on a GPU can reject it",
    ),
    # The grid stops at the last whole chunk: the ragged last chunk of CB is never written.
    Mutant(
        name="bmm_last_chunk_unwritten",
        failure_class="unwritten tail",
        module="kernels.bmm_chunk",
        function="bmm_chunk_fwd",
        op="bmm_chunk",
        patches=(
            (
                "[batch, nchunks, ngroups, chunk_size, chunk_size], block_size=[1, 1, 1, None, None]",
                "[batch, seqlen // chunk_size, ngroups, chunk_size, chunk_size], block_size=[1, 1, 1, None, None]",
            ),
        ),
        problem=BMM_PINNED,
        expect="out",
        note="the output is torch.empty: the gate's NaN pre-fill makes the unwritten chunk non-finite",
    ),
    # C B^T in TF32 (10-bit mantissa) for fp32 inputs.
    Mutant(
        name="bmm_tf32",
        failure_class="tf32 where fp32 is required",
        module="kernels.bmm_chunk",
        function="bmm_chunk_fwd",
        op="bmm_chunk",
        patches=(('dot_precision="ieee"', 'dot_precision="tf32"'),),
        problem=GPU_BMM,
        expect="out",
        config=0,
        gpu=True,
        extra={"cpu_problem": RAGGED},
        note="the Triton interpreter ignores input_precision: invisible on CPU",
    ),
    # The causal mask compares block-local row/column offsets: right only while one row block and one column
    # block cover the chunk (chunk_size 16 under both CONFIGS, since Helion raises dot blocks to 16), wrong once
    # the chunk spans several blocks (chunk_size 32 with CONFIGS[0]: 32 rows x 16 columns).
    Mutant(
        name="chunk_scan_block_local_causal_mask",
        failure_class="a block size that breaks masking",
        module="kernels.chunk_scan",
        function="chunk_scan_fwd",
        op="chunk_scan",
        patches=(
            (
                "keep = (tile_m.index[:, None] >= tile_k.index[None, :])",
                "keep = ((tile_m.index - tile_m.begin)[:, None] >= (tile_k.index - tile_k.begin)[None, :])",
            ),
        ),
        problem=CHUNK32,
        expect="out",
        config=0,
        extra={"harmless": (0, SMALL)},
        note="future positions leak into out when a column block starts inside the chunk; the pinned "
        "problems (chunk_size 16) cannot see it",
    ),
    # --- classes beyond the list ---
    # The LayerNorm variance sums the padded lanes of the block too (block_n 64 > group_size 48), each (0 - mean)^2.
    Mutant(
        name="norm_padded_lanes_in_variance",
        failure_class="padded block lanes enter a reduction",
        module="kernels.layernorm_gated",
        function="layernorm_fn",
        op="layernorm_gated",
        patches=(("centered = torch.where(valid[None, :], xs - mu[:, None], 0.0)", "centered = xs - mu[:, None]"),),
        problem=NORM_LN_PADDED,
        expect="out",
        note="needs LayerNorm with a group that is not a power of two: neither pinned example has one",
    ),
    # The forward writes its output into x (out aliases the input).
    Mutant(
        name="norm_writes_into_x",
        failure_class="clobbered input",
        module="kernels.layernorm_gated",
        function="layernorm_fn",
        op="layernorm_gated",
        patches=(("        out = torch.empty_like(x)\n    elif", "        out = x\n    elif"),),
        problem=NORM_RMS,
        expect="input 'x' was modified in place",
        note="output values are right; the engine's before/after comparison of the inputs catches it",
    ),
    # CB is accumulated into its own freshly allocated (torch.empty) output instead of being stored.
    Mutant(
        name="bmm_accumulates_into_empty",
        failure_class="uninitialised accumulator",
        module="kernels.bmm_chunk",
        function="bmm_chunk_fwd",
        op="bmm_chunk",
        patches=(
            (
                "out[tile_b.begin, tile_c.begin, tile_g.begin, tile_i, tile_j] = acc.to(out_dtype)",
                "out[tile_b.begin, tile_c.begin, tile_g.begin, tile_i, tile_j] = (\n"
                "            out[tile_b.begin, tile_c.begin, tile_g.begin, tile_i, tile_j] + acc.to(out_dtype))",
            ),
        ),
        problem=BMM_PINNED,
        expect="out",
        note="often right by luck (fresh memory is often zero); the gate's NaN pre-fill makes it fail every time",
    ),
    # --- the SSD backward (kernels/ssd_combined_bwd.py), judged through the combined op's gradients ---
    # The chunk-state path of dB loses its decay exp(a_last - a_s): every position counts as if at the chunk's end.
    Mutant(
        name="ssd_bwd_db_drops_decay",
        failure_class="a dropped decay term",
        module="kernels.ssd_combined_bwd",
        via="kernels.ssd_combined",
        function="mamba_chunk_scan_combined",
        op="ssd_combined",
        patches=(
            (
                "torch.exp(torch.clamp(dA_last - dA_s, max=0.0)) * dt[tile_b.begin, tile_h.begin, tile_c.begin,",
                "dt[tile_b.begin, tile_h.begin, tile_c.begin,",
            ),
        ),
        problem=SSD_BWD,
        expect="grad.B",
        backward=True,
        config=0,
        note="dB_s = dt_s x_s dS_c (+ the intra-chunk term): the forward and every other gradient are right",
    ),
    # The backward's state kernel stores G_c as dS_c instead of G_{c+1}: each chunk's own dH counted, one chunk late.
    Mutant(
        name="ssd_bwd_state_scan_off_by_one",
        failure_class="a reverse scan off by one chunk",
        module="kernels.ssd_combined_bwd",
        via="kernels.ssd_combined",
        function="mamba_chunk_scan_combined",
        op="ssd_combined",
        patches=(
            ("            dS[tile_b.begin, chunk, tile_h.begin, tile_p, tile_n] = carry\n", ""),
            (
                "            carry = acc + torch.sum(decay) * carry  # the chunk's one decay, as a scalar\n",
                "            carry = acc + torch.sum(decay) * carry\n"
                "            dS[tile_b.begin, chunk, tile_h.begin, tile_p, tile_n] = carry\n",
            ),
        ),
        problem=SSD_BWD,
        expect="grad.x",
        backward=True,
        config=0,
        note="the gradient of each chunk's own state also gets the gradient of the state entering it",
    ),
    # dB of group g sums the heads of group 0 (the head range ignores the group): wrong for every group but the first.
    Mutant(
        name="ssd_bwd_db_wrong_heads",
        failure_class="a gradient summed over the wrong heads",
        module="kernels.ssd_combined_bwd",
        via="kernels.ssd_combined",
        function="mamba_chunk_scan_combined",
        op="ssd_combined",
        patches=(
            (
                """        for tile_h in hl.tile(
            tile_g.begin * heads_per_group, tile_g.begin * heads_per_group + heads_per_group, block_size=1
        ):
            part = hl.zeros([tile_s, tile_n], dtype=wide)""",
                """        for tile_h in hl.tile(0, heads_per_group, block_size=1):
            part = hl.zeros([tile_s, tile_n], dtype=wide)""",
            ),
        ),
        problem=SSD_BWD,
        expect="grad.B",
        backward=True,
        config=0,
        note="2 groups of 2 heads: group 1's dB takes heads 0 and 1 (its chunk-state path)",
    ),
    # The intra-chunk decay-step prefix stops at its column block: the steps past the block miss its row sums.
    Mutant(
        name="ssd_bwd_prefix_cut_at_block",
        failure_class="a prefix sum cut at a block boundary",
        module="kernels.ssd_combined_bwd",
        via="kernels.ssd_combined",
        function="mamba_chunk_scan_combined",
        op="ssd_combined",
        patches=(("rows = torch.sum(products, dim=1)", "rows = torch.sum(products, dim=1) * 0.0"),),
        problem=SSD_BWD,
        expect="grad.A",
        backward=True,
        config=0,
        extra={"harmless": (0, SSD_BWD_ONE_BLOCK)},
        note="exact while one column block holds the chunk (chunk 16); chunk 32 in 16-wide blocks loses the "
        "terms W[l, s] of an earlier column block",
    ),
    # The upstream gradient of final_states is dropped by the backward's state kernel.
    Mutant(
        name="ssd_bwd_ignores_dfinal_states",
        failure_class="an ignored gradient of a second output",
        module="kernels.ssd_combined_bwd",
        via="kernels.ssd_combined",
        function="mamba_chunk_scan_combined",
        op="ssd_combined",
        patches=(
            (
                "            carry = dfinal_states[tile_b.begin, tile_h.begin, tile_p, tile_n].to(wide)\n",
                "            carry = hl.zeros([tile_p, tile_n], dtype=wide)\n",
            ),
        ),
        problem=SSD_BWD,
        expect="grad.x",
        backward=True,
        config=0,
        note="right when only out is differentiated; the gate's upstream gradient covers final_states too",
    ),
)
