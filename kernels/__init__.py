"""Helion ports of mamba-ssm's Mamba-2 training kernels (one module per op), with mamba-ssm's signatures."""
