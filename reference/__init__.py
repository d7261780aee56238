"""Pure-PyTorch references of the Mamba-2 SSD ops (float64 inputs make them the oracle)."""
