"""Reference of mamba-ssm's ``_bmm_chunk_fwd``: per-chunk Gram matrices a_i . b_j (CB = C B^T in SSD)."""

from __future__ import annotations

import torch

from contract.checks import check_bmm_chunk
from reference.common import compute_dtype, per_chunk


def bmm_chunk_fwd(
    a: torch.Tensor,
    b: torch.Tensor,
    chunk_size: int,
    seq_idx: torch.Tensor | None = None,
    causal: bool = False,
    output_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """a, b (b, l, k) or (b, l, g, k) -> out (b, c, cs, cs) or (b, c, g, cs, cs) in output_dtype or a.dtype:
    out[c, i, j] = a[c*cs + i] . b[c*cs + j], zero where i or j lies past seqlen, and with seq_idx zero
    where the two positions' seq_idx differ.

    ``causal`` changes no value here: the Triton kernel only skips the output blocks lying wholly above
    the diagonal and leaves them unwritten (uninitialized memory from ``torch.empty``); blocks it does
    write hold the full product, above the diagonal too. So only out[..., i, j] with i >= j is defined
    for causal=True, and this reference returns the full product everywhere."""
    check_bmm_chunk(a, b, chunk_size, seq_idx)
    has_groups = a.dim() == 4
    dtype = compute_dtype(a, b)
    ac, bc = per_chunk(a.to(dtype), chunk_size), per_chunk(b.to(dtype), chunk_size)
    if has_groups:
        out = torch.einsum("bcigk,bcjgk->bcgij", ac, bc)
    else:
        out = torch.einsum("bcik,bcjk->bcij", ac, bc)
    if seq_idx is not None:
        # Positions past seqlen get distinct fill values (-1 for rows, -2 for columns), as in the kernel.
        rows, cols = per_chunk(seq_idx, chunk_size, value=-1), per_chunk(seq_idx, chunk_size, value=-2)
        same = rows[:, :, :, None] == cols[:, :, None, :]
        out = torch.where(same[:, :, None] if has_groups else same, out, 0.0)
    return out.to(a.dtype if output_dtype is None else output_dtype)
