"""parity: prove that a GPU kernel port computes the same thing as its references.

The engine is op-agnostic: ops are described by :class:`parity.spec.OpSpec` and registered in
spec modules named in ``pyproject.toml`` (``[tool.parity] specs``). Importing this package imports nothing
else, so that the drop-in kernels can use :mod:`parity.lookup` (the runtime config lookup) in a training
process without the engine.
"""
