"""The argument contract of the Mamba-2 ops (``contract/checks.py``): what the references, the original Triton
kernels' adapters and the Helion ports all check up front. It imports only torch; ``reference/`` and ``kernels/``
both build on it, and nothing here imports either."""
