"""The cumulative decay past the end of a ragged last chunk equals its last real position's value bit for bit.

Every kernel reads a chunk's total decay at its last slot (``dA_cumsum[..., chunk_size - 1]``: the chunk state's
``exp(a_end - a_s)``, the state passing's chunk decay, the backward's chunk-state path). For the last token of a
ragged chunk that factor must be exactly 1; one rounding step of difference in a cumsum of magnitude 1000 is
a relative error of 6e-5, which failed the fp32 gate on the H200 (grad.x at the last token of the pinned
extreme problem, ``bench/results/h200-run10``)."""

from __future__ import annotations

import pytest
import torch

from kernels import chunk_cumsum


@pytest.mark.parametrize("config", [None, *chunk_cumsum.CONFIGS], ids=["default", "cfg0", "cfg1"])
@pytest.mark.parametrize("seqlen", [21, 45, 64])
def test_padded_tail_repeats_last_real_value(config, seqlen, parity_device) -> None:
    chunk_size, nheads = 32, 6
    gen = torch.Generator().manual_seed(seqlen)
    dt = (torch.rand(2, seqlen, nheads, generator=gen) * 4.5 + 0.5).to(parity_device)
    A = -(torch.rand(nheads, generator=gen) * 12 + 4).to(parity_device)
    dA_cumsum, dt_out = chunk_cumsum.chunk_cumsum_fwd(dt, A, chunk_size, config=config)
    real = seqlen - (dA_cumsum.shape[2] - 1) * chunk_size
    last = dA_cumsum[:, :, -1, real - 1 : real]
    assert torch.equal(dA_cumsum[:, :, -1, real:], last.expand(-1, -1, chunk_size - real))
    assert not dt_out[:, :, -1, real:].any()
    assert dA_cumsum.abs().max() > 500  # large sums: one rounding step is visible
