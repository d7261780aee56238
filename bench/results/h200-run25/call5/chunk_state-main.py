from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch._inductor.runtime import triton_helpers
from torch._inductor.runtime.triton_compat import libdevice
from helion.runtime import default_launcher as _default_launcher
import kernels.chunk_state as _source_module

_BLOCK_SIZE_3 = tl.constexpr(16)
_BLOCK_SIZE_4 = tl.constexpr(16)
_BLOCK_SIZE_5 = tl.constexpr(16)

@triton.jit
def _helion_chunk_state_kernel(dA_cumsum, x, B, dt, states, B_stride_0, B_stride_1, B_stride_2, B_stride_3, dA_cumsum_stride_0, dA_cumsum_stride_1, dA_cumsum_stride_2, dA_cumsum_stride_3, dt_stride_0, dt_stride_1, dt_stride_2, dt_stride_3, states_stride_0, states_stride_1, states_stride_2, states_stride_3, x_stride_0, x_stride_1, x_stride_2, x_stride_3, headdim, dstate, batch, nchunks, nheads, chunk_size, seqlen, ngroups):
    # src[chunk_state.py:40]: for tile_b, tile_c, tile_h, tile_p, tile_n in hl.tile(
    # src[chunk_state.py:41]:     [batch, nchunks, nheads, headdim, dstate], block_size=[1, 1, 1, None, None]
    # src[chunk_state.py:42]: ):
    num_blocks_0 = batch
    num_blocks_1 = nchunks
    num_blocks_2 = nheads
    num_blocks_3 = tl.cdiv(headdim, _BLOCK_SIZE_3)
    pid_0 = tl.program_id(0) % num_blocks_0
    pid_1 = tl.program_id(0) // num_blocks_0 % num_blocks_1
    pid_2 = tl.program_id(0) // (num_blocks_0 * num_blocks_1) % num_blocks_2
    pid_3 = tl.program_id(0) // (num_blocks_0 * num_blocks_1 * num_blocks_2) % num_blocks_3
    pid_4 = tl.program_id(0) // (num_blocks_0 * num_blocks_1 * num_blocks_2 * num_blocks_3)
    offset_0 = pid_0
    offset_1 = pid_1
    offset_2 = pid_2
    offset_3 = pid_3 * _BLOCK_SIZE_3
    indices_3 = (offset_3 + tl.arange(0, _BLOCK_SIZE_3)).to(tl.int32)
    mask_3 = indices_3 < headdim
    offset_4 = pid_4 * _BLOCK_SIZE_4
    indices_4 = (offset_4 + tl.arange(0, _BLOCK_SIZE_4)).to(tl.int32)
    mask_4 = indices_4 < dstate
    # src[chunk_state.py:45]: dA_last = dA_cumsum[tile_b.begin, tile_h.begin, tile_c.begin, chunk_size - 1]
    sub = -1 + chunk_size
    dA_last = tl.load(dA_cumsum + (offset_0 * dA_cumsum_stride_0 + offset_2 * dA_cumsum_stride_1 + offset_1 * dA_cumsum_stride_2 + sub * dA_cumsum_stride_3), None)
    # src[chunk_state.py:49]: acc = hl.zeros([tile_p, tile_n], dtype=wide)
    acc = tl.full([_BLOCK_SIZE_3, _BLOCK_SIZE_4], 0.0, tl.float32)
    # src[chunk_state.py:51]: pos = start + tile_k.index
    symnode_0 = chunk_size * offset_1
    # src[chunk_state.py:54]: bs = hl.load(B, [tile_b.begin, pos, group, tile_n], extra_mask=valid[:, None]).to(wide)
    symnode_1 = triton_helpers.div_floor_integer(offset_2, triton_helpers.div_floor_integer(nheads, ngroups))
    # src[chunk_state.py:50]: for tile_k in hl.tile(chunk_size):
    # src[chunk_state.py:51]:     pos = start + tile_k.index
    # src[chunk_state.py:52]:     valid = pos < seqlen
    # src[chunk_state.py:50-63]: ...
    for offset_5 in tl.range(0, tl.cast(chunk_size, tl.int32), _BLOCK_SIZE_5):
        indices_5 = offset_5 + tl.arange(0, _BLOCK_SIZE_5).to(tl.int32)
        mask_5 = indices_5 < chunk_size
        dA_last_copy = dA_last
        acc_copy = acc
        dA_last_copy_0 = dA_last_copy
        acc_copy_0 = acc_copy
        # src[chunk_state.py:51]: pos = start + tile_k.index
        v_0 = tl.cast(symnode_0, tl.int32)
        v_1 = indices_5 + v_0
        # src[chunk_state.py:52]: valid = pos < seqlen
        v_2 = tl.cast(seqlen, tl.int32)
        v_3 = v_1 < v_2
        # src[chunk_state.py:53]: xs = hl.load(x, [tile_b.begin, pos, tile_h.begin, tile_p], extra_mask=valid[:, None])
        subscript = v_3[:, None]
        xs = tl.load(x + (offset_0 * x_stride_0 + (indices_5 + symnode_0)[:, None] * x_stride_1 + offset_2 * x_stride_2 + indices_3[None, :] * x_stride_3), mask_5[:, None] & mask_3[None, :] & subscript, other=0)
        # src[chunk_state.py:54]: bs = hl.load(B, [tile_b.begin, pos, group, tile_n], extra_mask=valid[:, None]).to(wide)
        subscript_1 = v_3[:, None]
        load_1 = tl.load(B + (offset_0 * B_stride_0 + (indices_5 + symnode_0)[:, None] * B_stride_1 + symnode_1 * B_stride_2 + indices_4[None, :] * B_stride_3), mask_5[:, None] & mask_4[None, :] & subscript_1, other=0)
        v_4 = tl.cast(load_1, tl.float32)
        # src[chunk_state.py:55]: dA_k = dA_cumsum[tile_b.begin, tile_h.begin, tile_c.begin, tile_k]
        dA_k = tl.load(dA_cumsum + (offset_0 * dA_cumsum_stride_0 + offset_2 * dA_cumsum_stride_1 + offset_1 * dA_cumsum_stride_2 + indices_5 * dA_cumsum_stride_3), mask_5, other=0)
        # src[chunk_state.py:56]: dt_k = dt[tile_b.begin, tile_h.begin, tile_c.begin, tile_k]
        dt_k = tl.load(dt + (offset_0 * dt_stride_0 + offset_2 * dt_stride_1 + offset_1 * dt_stride_2 + indices_5 * dt_stride_3), mask_5, other=0)
        # src[chunk_state.py:57]: scale = torch.exp(torch.clamp(dA_last - dA_k, max=0.0)) * dt_k
        v_5 = dA_last_copy_0 - dA_k
        v_6 = tl.full([], 0.0, tl.float32)
        v_7 = triton_helpers.minimum(v_5, v_6)
        v_8 = libdevice.exp(v_7)
        v_9 = v_8 * dt_k
        # src[chunk_state.py:58]: keep = valid
        v_3_0 = v_3
        # src[chunk_state.py:62]: scale = torch.where(keep, scale, 0.0)
        scalar_tensor = tl.full([], 0.0, tl.float32)
        scale_1 = tl.where(v_3_0, v_9, scalar_tensor)
        # src[chunk_state.py:63]: acc = mma(xs.T, (bs * scale[:, None]).to(xs.dtype), acc)
        permute = tl.permute(xs, [1, 0])
        subscript_2 = scale_1[:, None]
        v_10 = v_4 * subscript_2
        v_11 = tl.cast(v_10, tl.bfloat16)
        acc = tl.dot(tl.cast(permute, tl.bfloat16), tl.cast(v_11, tl.bfloat16), acc=acc_copy_0, input_precision='ieee', out_dtype=tl.float32)
    # src[chunk_state.py:64]: states[tile_b.begin, tile_c.begin, tile_h.begin, tile_p, tile_n] = acc.to(states_dtype)
    tl.store(states + (offset_0 * states_stride_0 + offset_1 * states_stride_1 + offset_2 * states_stride_2 + indices_3[:, None] * states_stride_3 + indices_4[None, :] * 1), acc, mask_3[:, None] & mask_4[None, :])

def chunk_state_kernel(B: torch.Tensor, x: torch.Tensor, dt: torch.Tensor, dA_cumsum: torch.Tensor, seq_idx: torch.Tensor | None, states_dtype: torch.dtype, *, _launcher=_default_launcher):
    """B (batch, seqlen, ngroups, dstate), x (batch, seqlen, nheads, headdim), dt and dA_cumsum (batch, nheads,
    nchunks, chunk_size) -> states (batch, nchunks, nheads, headdim, dstate) in states_dtype.

    One program per (batch, chunk, head, headdim block, dstate block), looping over the chunk's positions. As in
    mamba-ssm, B is scaled in fp32, rounded to x's dtype and multiplied with x in that dtype with fp32 accumulation
    (true fp32, not TF32, for fp32 inputs; fp64 inputs compute in fp64). Positions past seqlen are masked explicitly
    (hl.tile masks only against chunk_size); "last" is the chunk's final slot, where dA_cumsum stays flat past seqlen.
    With seq_idx only positions of the sequence of the chunk's last real position contribute."""
    # src[chunk_state.py:34]: batch, seqlen, nheads, headdim = x.shape
    batch, seqlen, nheads, headdim = x.shape
    # src[chunk_state.py:35]: ngroups, dstate = B.shape[2], B.shape[3]
    ngroups, dstate = (B.shape[2], B.shape[3])
    # src[chunk_state.py:36]: nchunks, chunk_size = dt.shape[2], dt.shape[3]
    nchunks, chunk_size = (dt.shape[2], dt.shape[3])
    # src[chunk_state.py:38]: wide = acc_dtype(x.dtype)
    wide = _source_module.acc_dtype(x.dtype)
    # src[chunk_state.py:39]: states = torch.empty([batch, nchunks, nheads, headdim, dstate], dtype=states_dtype, device=x.device)
    states = torch.empty([batch, nchunks, nheads, headdim, dstate], dtype=states_dtype, device=x.device)
    # src[chunk_state.py:40]: for tile_b, tile_c, tile_h, tile_p, tile_n in hl.tile(
    # src[chunk_state.py:41]:     [batch, nchunks, nheads, headdim, dstate], block_size=[1, 1, 1, None, None]
    # src[chunk_state.py:42]: ):
    _BLOCK_SIZE_3 = 16
    _BLOCK_SIZE_4 = 16
    # src[chunk_state.py:40]: for tile_b, tile_c, tile_h, tile_p, tile_n in hl.tile(
    # src[chunk_state.py:41]:     [batch, nchunks, nheads, headdim, dstate], block_size=[1, 1, 1, None, None]
    # src[chunk_state.py:42]: ):
    # src[chunk_state.py:40-64]: ...
    _launcher(_helion_chunk_state_kernel, (batch * nchunks * nheads * ((headdim + _BLOCK_SIZE_3 - 1) // _BLOCK_SIZE_3) * ((dstate + _BLOCK_SIZE_4 - 1) // _BLOCK_SIZE_4),), dA_cumsum, x, B, dt, states, B.stride(0), B.stride(1), B.stride(2), B.stride(3), dA_cumsum.stride(0), dA_cumsum.stride(1), dA_cumsum.stride(2), dA_cumsum.stride(3), dt.stride(0), dt.stride(1), dt.stride(2), dt.stride(3), states.stride(0), states.stride(1), states.stride(2), states.stride(3), x.stride(0), x.stride(1), x.stride(2), x.stride(3), headdim, dstate, batch, nchunks, nheads, chunk_size, seqlen, ngroups, num_warps=4, num_stages=1)
    # src[chunk_state.py:65]: return states
    return states