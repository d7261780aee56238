"""parity: prove that a GPU kernel port computes the same thing as its references.

The engine is op-agnostic: ops are described by :class:`parity.spec.OpSpec` and registered in
spec modules named in ``pyproject.toml`` (``[tool.parity] specs``).
"""

from parity.errors import ParityError
from parity.spec import Impl, OpSpec

__all__ = ["Impl", "OpSpec", "ParityError"]
