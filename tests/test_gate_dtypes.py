"""The gate end to end in every dtype the engine runs: a correct kernel passes (the poisoned allocations raise
no false alarm, fp16 included), a wrong one is rejected. Poison values are finite in every dtype."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from toy_op import dropped_term, reference, spec, unwritten_tail

from parity import registry, tolerances
from parity.errors import ParityError
from parity.gate import gate
from parity.poison import GARBAGE, garbage, poisoned
from parity.profiles import get_profile
from parity.spec import Impl, dtype_name

pytestmark = pytest.mark.cpu  # each test runs the CPU interpreter in this process

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
TOLS = tolerances.load()
PROFILE = get_profile("ci")  # two generated problems, derandomized; the dtypes are given explicitly


@pytest.mark.parametrize("dtype", [*DTYPES, torch.float64])
def test_the_garbage_fill_is_large_finite_and_exact_in_every_dtype(dtype):
    fill = poisoned(lambda: torch.empty(4, dtype=dtype), "garbage")()
    assert torch.isfinite(fill).all() and (fill == garbage(dtype)).all()
    assert garbage(dtype) <= -3e4 and float(fill[0]) == garbage(dtype)
    assert garbage(dtype) == (-32752.0 if dtype == torch.float16 else float(torch.tensor(GARBAGE, dtype=dtype)))


def staged(x, a, d, chunk):
    """Correct, through fresh allocations it writes completely: an fp32 scratch, then an output of x's dtype
    (so each poisoned fill, in both dtypes, must be representable)."""
    scratch = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    scratch.copy_(reference(x, a, d, chunk))
    out = torch.empty_like(x)
    out.copy_(scratch)
    return out


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
def test_a_correct_kernel_passes_the_gate_in_every_dtype(dtype):
    s = spec(staged)
    result = gate(s, s.impl("staged"), "cpu", PROFILE, TOLS, [dtype])
    failures = [c.message() for c in result.cases if not c.passed]
    assert result.passed and len(result.cases) >= 3 and not failures, failures
    assert {c.dtype for c in result.cases} == {dtype_name(dtype)}


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
@pytest.mark.parametrize(("mutant", "expect"), [(unwritten_tail, "pre-filled with nan"), (dropped_term, "out:")])
def test_a_wrong_kernel_is_rejected_in_every_dtype(mutant, expect, dtype):
    s = spec(mutant)
    result = gate(s, s.impl(mutant.__name__), "cpu", PROFILE, TOLS, [dtype])
    failed = [c for c in result.cases if not c.passed]
    assert not result.passed and failed
    assert expect in failed[0].message() and failed[0].dtype == dtype_name(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
def test_a_helion_kernel_passes_the_gate_in_every_dtype(dtype):
    """The real gated-norm port (which allocates its outputs with torch.empty) on its first pinned problem."""
    full = registry.get("layernorm_gated")
    s = dataclasses.replace(full, examples=full.examples[:1])
    config = {"fwd": {"block_sizes": [4], "num_warps": 2}, "bwd": {"block_sizes": [8, 4], "num_warps": 2}}
    impl = Impl("helion-gate", s.candidates[0].target, config=config)
    result = gate(s, impl, "cpu", PROFILE, TOLS, [dtype], max_examples=0)
    failures = [c.message() for c in result.cases if not c.passed]
    assert result.passed and not failures, failures


def test_the_gate_refuses_bad_input_before_running(tmp_path, monkeypatch):
    """No dtype, a dtype without default tolerances, a malformed Helion config: a ParityError, nothing run."""
    import parity.gate

    monkeypatch.setattr(parity.gate, "preflight", lambda *a: pytest.fail("the gate ran despite bad input"))
    s = spec(staged)
    with pytest.raises(ParityError, match="no dtype to gate decay_sum"):
        gate(s, s.impl("staged"), "cpu", PROFILE, TOLS, [])
    path = tmp_path / "tolerances.toml"
    path.write_text("[defaults.float32]\nfactor = 1.0\natol = 0.0\nrtol = 0.0\n")
    with pytest.raises(ParityError, match=r"no \[defaults\.float16\] table"):
        gate(s, s.impl("staged"), "cpu", PROFILE, tolerances.load(path), [torch.float32, torch.float16])
    bad = Impl("staged-cfg", staged, config={"fwd": {"num_warps": 3}})
    with pytest.raises(ParityError, match=r"config of staged-cfg: fwd\.num_warps = 3 must be a positive power of two"):
        gate(s, bad, "cpu", PROFILE, TOLS, [torch.float32])


def test_a_candidate_that_raises_in_its_timing_fails_the_gate_with_the_error_kept(monkeypatch):
    """The training-shape timing runs last, outside any case: what it raises is the gate's failure, recorded
    in its report, not a worker's traceback that ends the run (seen in H100 run 35's promote gate)."""
    from parity import gate as gate_module

    def raising(*_args):
        raise RuntimeError("Kernel requires a runtime memory allocation, but no allocator was set.\nmore")

    monkeypatch.setattr(gate_module, "_timing", raising)
    s = spec(staged)
    timed = gate_module._time(s, s.impl("staged"), {"n": 8}, "float32")
    assert timed["error"] == "RuntimeError: Kernel requires a runtime memory allocation, but no allocator was set."
    assert timed["problem"] == {"n": 8} and timed["dtype"] == "float32"
    result = gate(s, s.impl("staged"), "cpu", PROFILE, TOLS, [torch.float32])
    assert result.passed
    result.timing.append(timed)
    assert not result.passed
