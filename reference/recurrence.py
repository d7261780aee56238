"""An independent oracle for ``mamba_chunk_scan_combined``: the SSM recurrence run token by token, sharing
no code with the chunked references, so that both agreeing is evidence that the chunking is right."""

from __future__ import annotations

import torch


def ssd_recurrence(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    dt_softplus: bool = False,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
    initial_states: torch.Tensor | None = None,
    seq_idx: torch.Tensor | None = None,
    return_final_states: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Shapes as in ``mamba_chunk_scan_combined``. For each token t, with dt_t = clamp(softplus?(dt + bias)):

        h_t = exp(dt_t * A) * h_{t-1} + dt_t * x_t B_t^T,   y_t = h_t C_t + D * x_t,   out_t = y_t * silu(z_t)

    h_{-1} is initial_states (zeros if None). With seq_idx the carried state is dropped wherever
    seq_idx[t] != seq_idx[t-1], with seq_idx[-1] taken as 0 (mamba-ssm carries initial_states only into
    the sequence numbered 0). Head h reads group h // (nheads // ngroups) of B and C. Returns out in
    x.dtype, plus the last h (fp32, fp64 for fp64 input) if return_final_states."""
    batch, seqlen, nheads, headdim = x.shape
    ngroups, dstate = B.shape[2], B.shape[3]
    tensors = (x, dt, A, B, C, D, z, dt_bias, initial_states)
    wide = torch.float64 if any(t is not None and t.dtype == torch.float64 for t in tensors) else torch.float32
    step = dt.to(wide)
    if dt_bias is not None:
        step = step + dt_bias.to(wide)
    if dt_softplus:
        step = torch.where(step <= 20.0, torch.log1p(torch.exp(torch.clamp(step, max=20.0))), step)
    step = torch.clamp(step, min=dt_limit[0], max=dt_limit[1])  # (b, l, h)
    head_group = torch.arange(nheads, device=x.device) // (nheads // ngroups)
    Bh, Ch = B.to(wide)[:, :, head_group], C.to(wide)[:, :, head_group]  # (b, l, h, n)
    xw, Aw = x.to(wide), A.to(wide)
    if initial_states is None:
        h = torch.zeros(batch, nheads, headdim, dstate, dtype=wide, device=x.device)
    else:
        h = initial_states.to(wide)
    ys = []
    for t in range(seqlen):
        decay = torch.exp(step[:, t] * Aw)  # (b, h)
        if seq_idx is not None:
            before = seq_idx[:, t - 1] if t > 0 else torch.zeros_like(seq_idx[:, 0])
            decay = decay * (seq_idx[:, t] == before).to(wide)[:, None]
        h = decay[:, :, None, None] * h + step[:, t, :, None, None] * xw[:, t, :, :, None] * Bh[:, t, :, None, :]
        ys.append(torch.einsum("bhpn,bhn->bhp", h, Ch[:, t]))
    y = torch.stack(ys, dim=1) if ys else xw.new_zeros(xw.shape)
    if D is not None:
        y = y + xw * (D.to(wide)[:, None] if D.dim() == 1 else D.to(wide))
    if z is not None:
        y = y * z.to(wide) * torch.sigmoid(z.to(wide))
    out = y.to(x.dtype)
    return (out, h) if return_final_states else out
