"""Helion ports of mamba-ssm's Mamba-2 training kernels (one module per op), with mamba-ssm's signatures."""

import os

STATIC_SHAPES = os.environ.get("PARITY_STATIC_SHAPES", "0") == "1"
"""Every kernel's Helion ``static_shapes`` setting. False (the default): one compiled kernel per config, dtype
and size-0/1 pattern serves every shape, so a gate over many generated shapes compiles each kernel a few
times instead of once per shape. ``PARITY_STATIC_SHAPES=1`` specializes on every shape instead (for the
benchmark's static-vs-dynamic comparison); set it for a whole process, gate and training alike."""
