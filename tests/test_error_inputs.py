"""Error inputs, as OpInfo has them: every registered op declares invalid calls (``OpSpec.error_inputs``), and the
pure-PyTorch reference, the original Triton kernel behind its adapter (baseline) and the Helion port with its
default config (candidate) each reject every one of them on CPU with the declared exception type (exactly, not a
subclass) and a message that names the offending argument and matches the declared pattern, before any code of
triton, helion or mamba-ssm runs (so before any kernel is compiled or launched). An implementation that a
declaration lists in ``accepted_by`` must instead return normally."""

from __future__ import annotations

import inspect
import re

import pytest
import torch

from parity import registry
from parity.spec import ErrorInput, Impl, OpSpec

SPECS = registry.load()
CPU = torch.device("cpu")
KERNEL_PACKAGES = ("triton", "helion", "mamba_ssm")
"""Packages whose code must not have run when a bad call is rejected: the checks come first."""
MIN_ERROR_INPUTS = 5


def _implementations(spec: OpSpec) -> list[Impl]:
    """The reference, the baseline (if any) and the default-config candidates (those without an explicit config;
    every candidate if none is): explicit configs run the same wrapper, so its checks are the default's."""
    defaults = [impl for impl in spec.candidates if impl.config is None] or list(spec.candidates)
    return [spec.reference, *([spec.baseline] if spec.baseline else []), *defaults]


CASES = [
    pytest.param(spec, error, impl, id=f"{name}-{error.argument}-{i}-{impl.name}")
    for name, spec in sorted(SPECS.items())
    for i, error in enumerate(spec.error_inputs)
    for impl in _implementations(spec)
]


def _names(message: str, argument: str) -> bool:
    """Whether ``message`` names ``argument`` as a word of its own (``x`` in "x must be", not in "max")."""
    return re.search(rf"(?<![\w.]){re.escape(argument)}(?!\w)", message) is not None


def _kernel_frames(exc: BaseException) -> list[str]:
    """The frames of the traceback that ran code of a kernel package."""
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        module = tb.tb_frame.f_globals.get("__name__", "")
        if module.split(".")[0] in KERNEL_PACKAGES:
            frames.append(f"{module}:{tb.tb_lineno}")
        tb = tb.tb_next
    return frames


@pytest.mark.parametrize(("spec", "error", "impl"), CASES)
def test_error_input_is_rejected_alike(spec: OpSpec, error: ErrorInput, impl: Impl) -> None:
    kwargs = error.make(CPU)
    fn = impl.load()
    expected = error.expected(impl.name)
    if expected is None:  # accepted by design (declared, with the reason in the description)
        out = fn(**kwargs)
        outs = out if isinstance(out, tuple) else (out,)
        assert any(isinstance(o, torch.Tensor) for o in outs), f"{impl.name} returned {out!r}"
        return
    try:
        fn(**kwargs)
    except Exception as exc:
        caught: BaseException = exc
    else:
        pytest.fail(f"{spec.name} [{impl.name}] accepted an invalid call: {error.description}")
    message = str(caught)
    where = f"{spec.name} [{impl.name}], {error.description}: {type(caught).__name__}: {message}"
    assert type(caught) is expected, f"expected {expected.__name__}; got {where}"
    assert _names(message, error.argument), f"the message does not name {error.argument!r}: {where}"
    assert re.search(error.match, message), f"the message does not match {error.match!r}: {where}"
    assert not _kernel_frames(caught), f"rejected only after kernel code ran ({_kernel_frames(caught)}): {where}"


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_op_declares_error_inputs(name: str) -> None:
    """Enough error inputs, each about a real argument of the op, with a pattern, and distinct descriptions."""
    spec = SPECS[name]
    errors = spec.error_inputs
    assert len(errors) >= MIN_ERROR_INPUTS, f"{name} declares {len(errors)} error inputs"
    parameters = inspect.signature(spec.reference.load()).parameters
    implementations = {impl.name for impl in _implementations(spec)}
    assert len(implementations) >= 2, f"{name}: nothing but the reference to check"
    for error in errors:
        assert error.argument in parameters, f"{name}: {error.argument!r} is not an argument of the op"
        assert error.match, f"{name}: {error.description} declares no message pattern"
        assert issubclass(error.error_type, Exception)
        assert set(error.accepted_by) < implementations, f"{name}: accepted_by {error.accepted_by} (all or unknown)"
        kwargs = error.make(CPU)
        assert set(kwargs) <= set(parameters), f"{name}: {error.description} passes unknown arguments"
        assert error.argument in kwargs, f"{name}: {error.description} does not pass {error.argument!r}"
    descriptions = [e.description for e in errors]
    assert len(set(descriptions)) == len(descriptions), f"{name}: duplicate descriptions"


def test_every_mamba_op_checks_reference_baseline_and_helion() -> None:
    """The Mamba-2 ops compare all three: the reference, the original Triton kernel and the default Helion port."""
    for name, spec in SPECS.items():
        assert [impl.name for impl in _implementations(spec)] == ["torch", "triton", "helion"], name


def test_names_is_a_word_match() -> None:
    """The naming check cannot be satisfied by a substring of another word."""
    assert _names("x must be a non-empty (batch, seqlen)", "x")
    assert not _names("max must be", "x")
    assert not _names("dt_bias must have shape", "dt")
    assert _names("nheads 2 is not a multiple of ngroups 3 (B's group dimension)", "B")


def test_accepted_by_is_asserted() -> None:
    """A declared exception (accepted_by) is checked, not skipped: the reference computes the wide group."""
    [wide] = [e for e in SPECS["layernorm_gated"].error_inputs if e.accepted_by]
    out = SPECS["layernorm_gated"].reference.load()(**wide.make(CPU))
    assert out.shape == (1, 16400) and torch.isfinite(out).all()
    assert wide.expected("torch") is None and wide.expected("helion") is RuntimeError
