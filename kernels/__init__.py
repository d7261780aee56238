"""Helion ports of the mamba-ssm Mamba-2 kernels, one module per op, each with mamba-ssm's wrapper signature."""
