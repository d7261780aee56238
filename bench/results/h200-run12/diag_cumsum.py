"""Old vs new chunk_cumsum on the GPU: does the padded tail of a ragged chunk equal its last real sum?"""

import importlib.util
import sys

import torch

from kernels import chunk_cumsum as new

spec = importlib.util.spec_from_file_location("old_chunk_cumsum", sys.argv[1])
old = importlib.util.module_from_spec(spec)
spec.loader.exec_module(old)
for seqlen in (21, 45, 100):
    gen = torch.Generator().manual_seed(seqlen)
    dt = (torch.rand(2, seqlen, 6, generator=gen) * 4.5 + 0.5).cuda()
    A = -(torch.rand(6, generator=gen) * 12 + 4).cuda()
    for name, cfg in (("default", None), ("cfg0", new.CONFIGS[0]), ("cfg1", new.CONFIGS[1])):
        row = []
        for label, mod in (("old", old), ("new", new)):
            dA, _ = mod.chunk_cumsum_fwd(dt, A, 32, config=cfg)
            real = seqlen - (dA.shape[2] - 1) * 32
            tail = dA[:, :, -1, real:]
            last = dA[:, :, -1, real - 1 : real]
            gap, size = float((tail - last).abs().max()), float(last.abs().max())
            row.append(f"{label} max|tail-last| {gap:.3e} (|last| max {size:.0f})")
        print(f"seqlen {seqlen} {name}: " + "; ".join(row), flush=True)
