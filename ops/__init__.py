"""One module per op: ``ops/<op>.py`` registers the op's :class:`parity.spec.OpSpec`, naming its pure-PyTorch
reference (``reference/<op>.py``), its baseline (the original mamba-ssm Triton kernel behind
``reference/mamba_triton.py``), its Helion kernel (``kernels/<op>.py``) and its tolerances (``[op.<op>]`` in
tolerances.toml), with its input maker, problem strategies and error inputs. ``ops/ssd.py`` holds what the six
SSD ops share; ``ops/common.py`` what every op's inputs share. The argument contract every implementation
checks up front is ``contract/checks.py``, below both the references and the kernels.

Importing this package imports nothing; the spec modules are listed in pyproject.toml (``[tool.parity] specs``).
"""
