"""Which index width a Helion kernel runs with (issue 18, offsets past 2**31).

Helion 1.5.0's "auto" ``index_dtype`` picks int64 only when an argument's numel exceeds 2**31 - 1; a strided view
whose numel fits but whose largest element offset does not keeps the int32 build, under the same specialization
key as a small contiguous tensor (so a kernel first bound on small inputs reuses that build). ``kernels.launch``
runs the kernel's ``index_dtype=torch.int64`` twin whenever an argument or a tensor the kernel's host code hands
its device kernel (e.g. an output larger than every input) needs 64-bit offsets. No test allocates more than a few
kilobytes: big tensors are meta tensors or stride-0 expansions.
"""

from __future__ import annotations

import warnings
from typing import Any

import helion
import pytest
import torch

from kernels import bmm_chunk, chunk_cumsum, launch, layernorm_gated

BIG = 2**31  # one element past int32


def _meta(shape: tuple[int, ...], stride: tuple[int, ...] | None = None) -> torch.Tensor:
    """A meta tensor (no storage) with this shape and strides (contiguous by default)."""
    base = torch.empty(shape, device="meta")
    return base if stride is None else torch.empty_strided(shape, stride, device="meta")


def _cumsum_args(dt: torch.Tensor) -> tuple:
    """chunk_cumsum's kernel arguments for ``dt`` (batch, seqlen, nheads), A on dt's device, chunk 8."""
    return chunk_cumsum.chunk_cumsum_args(dt, -torch.ones(dt.shape[2], device=dt.device), 8)


def test_max_offset_is_the_last_elements_offset() -> None:
    assert launch.max_offset((2, 3, 4), (12, 4, 1)) == 23
    assert launch.max_offset((2, 3), (1, 2)) == 5  # transposed
    assert launch.max_offset((5, 4), (0, 1)) == 3  # expanded
    assert launch.max_offset((0, 7), (2**40, 1)) == 0  # empty: nothing addressed
    assert launch.max_offset((), ()) == 0  # a scalar


@pytest.mark.parametrize(
    ("shape", "stride", "wide"),
    [
        ((2**31 - 1,), None, False),  # the last int32 offset
        ((BIG,), None, True),  # numel past int32
        ((2, 16), (2**31, 1), True),  # 32 elements, the last at offset 2**31 + 15: a slice of a larger buffer
        ((2, 16), (2**31 - 16, 1), False),  # the last offset 2**31 - 1 exactly
        ((0, 16), (2**40, 1), False),  # empty
        ((2**16, 2**16), (0, 1), True),  # expanded: numel 2**32, offsets below 2**16
    ],
)
def test_needs_int64_looks_at_numel_and_largest_offset(shape, stride, wide) -> None:
    assert launch.needs_int64(_meta(shape, stride)) is wide
    assert launch.needs_int64((1, None, [torch.empty(2), _meta(shape, stride)])) is wide
    assert launch.needs_int64({"x": _meta(shape, stride)}) is wide


def test_non_tensors_never_need_int64() -> None:
    assert not launch.needs_int64((BIG * 4, 1.5, None, "x", torch.float32))


def test_helion_auto_picks_by_numel_only_and_reuses_the_int32_build() -> None:
    """Pins Helion 1.5.0's behaviour (helion/runtime/kernel.py ``_resolve_index_dtype``, ``_concrete_tensor_key``):
    numel past int32 gets its own int64 bind; a large-offset view of small numel gets int32 under the small
    tensor's specialization key. If this fails after a Helion upgrade, revisit kernels/launch.py's index width."""
    kernel = chunk_cumsum.chunk_cumsum_kernel
    small = _cumsum_args(_meta((2, 16, 2)))
    strided = _cumsum_args(_meta((2, 16, 2), (2**31, 2, 1)))
    assert kernel.bind(small).env.index_dtype == torch.int32
    assert kernel.bind(strided).env.index_dtype == torch.int32  # offsets up to 2**31 + 31 in int32
    assert kernel.specialization_key(strided) == kernel.specialization_key(small)
    many = _cumsum_args(torch.zeros(1, 1, 1).expand(2, 2**29, 4))  # numel 2**32, no storage behind it
    assert kernel.bind(many).env.index_dtype == torch.int64
    assert kernel.specialization_key(many) != kernel.specialization_key(small)


def test_small_calls_keep_the_default_build() -> None:
    kernel = chunk_cumsum.chunk_cumsum_kernel
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the host-code probe must run on meta tensors, not fall back
        assert launch.build(kernel, _cumsum_args(torch.zeros(2, 16, 2)), None) is kernel


def test_a_persistent_config_keeps_the_default_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """A persistent config's host code asks Helion for the SM count of its arguments' device; the meta-tensor probe
    answers with the real device's (Helion's own answer for meta is an AssertionError, seen on the H200 in run 22:
    every tuned persistent bmm_chunk fell back to the int64 build). The CPU stand-in counts 4 SMs."""

    def sm_count(device: torch.device, **_: Any) -> int:
        if device.type != "cpu":
            raise AssertionError("TODO: implement for other devices")
        return 4

    monkeypatch.setattr(helion.runtime, "get_num_sm", sm_count)
    small = bmm_chunk.bmm_chunk_args(torch.zeros(1, 512, 1, 16), torch.zeros(1, 512, 1, 16), 256)
    config = {"block_sizes": [16, 16, 16], "pid_type": "persistent_interleaved"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert launch.build(bmm_chunk.bmm_chunk_kernel, small, config) is bmm_chunk.bmm_chunk_kernel
    assert helion.runtime.get_num_sm is sm_count  # restored after the probe


@pytest.mark.parametrize(
    "dt",
    [_meta((2, 16, 2), (2**31, 2, 1)), torch.zeros(1, 1, 1).expand(2, 2**29, 4)],
    ids=["large-offset-view", "large-numel"],
)
def test_arguments_that_need_int64_get_the_int64_twin(dt: torch.Tensor) -> None:
    kernel = chunk_cumsum.chunk_cumsum_kernel
    wide = launch.build(kernel, _cumsum_args(dt), None)
    assert wide is not kernel and wide.fn is kernel.fn
    assert wide.settings.index_dtype == torch.int64 and not wide.settings.static_shapes


def test_an_output_larger_than_every_input_gets_the_int64_twin() -> None:
    """bmm_chunk's output (batch, nchunks, ngroups, chunk, chunk) outgrows its inputs (batch, seqlen, ngroups, k)
    when chunk > k: inputs of 2**29 elements, an output of 2**33. Neither Helion nor an argument check sees it."""
    a = torch.zeros(1, 1, 1, 1).expand(1, 2**25, 1, 16)
    args = bmm_chunk.bmm_chunk_args(a, a, 256)
    assert not launch.needs_int64(args)
    wide = launch.build(bmm_chunk.bmm_chunk_kernel, args, None)
    assert wide.settings.index_dtype == torch.int64
    small = bmm_chunk.bmm_chunk_args(torch.zeros(1, 512, 1, 16), torch.zeros(1, 512, 1, 16), 256)
    assert launch.build(bmm_chunk.bmm_chunk_kernel, small, None) is bmm_chunk.bmm_chunk_kernel


def test_a_static_build_keeps_static_shapes_in_its_int64_twin() -> None:
    kernel = chunk_cumsum.chunk_cumsum_kernel
    wide = launch.build(kernel, _cumsum_args(_meta((2, 16, 2), (2**31, 2, 1))), None, static=True)
    assert wide.settings.static_shapes and wide.settings.index_dtype == torch.int64
    assert launch.build(kernel, _cumsum_args(torch.zeros(2, 16, 2)), None, static=True).settings.index_dtype is None


def _index_casts(code: str) -> tuple[int, int]:
    """How many index values the device code casts to int32 and to int64."""
    device = code.rsplit("\ndef ", 1)[0]  # the host wrapper is the last function
    return device.count(".to(tl.int32)"), device.count(".to(tl.int64)")


@pytest.mark.parametrize(
    ("kernel", "args"),
    [
        (chunk_cumsum.chunk_cumsum_kernel, _cumsum_args(torch.zeros(2, 16, 2))),
        (
            layernorm_gated.layer_norm_fwd_kernel,
            layernorm_gated.layer_norm_fwd_args(torch.zeros(4, 32), torch.ones(32), None, 1e-5, group_size=16),
        ),
    ],
    ids=["chunk_cumsum", "layer_norm_fwd"],
)
def test_the_int64_twin_generates_int64_offsets(kernel, args) -> None:
    """Bound on the same tiny tensors, the default build indexes in int32 and its int64 twin in int64 (program ids
    and aranges widened before any offset is formed)."""
    default = kernel.bind(args)
    wide = launch._twin(kernel, static=False, wide=True).bind(args)
    assert (default.env.index_dtype, wide.env.index_dtype) == (torch.int32, torch.int64)
    config = default.config_spec.default_config()
    narrow_code, wide_code = default.to_triton_code(config), wide.to_triton_code(config)
    assert _index_casts(narrow_code)[0] > 0 and _index_casts(narrow_code)[1] == 0
    assert _index_casts(wide_code)[0] == 0 and _index_casts(wide_code)[1] > 0
    assert "tl.program_id(0).to(tl.int64)" in wide_code and "tl.program_id(0).to(tl.int64)" not in narrow_code


@pytest.mark.cpu
def test_launch_runs_the_int64_twin_when_offsets_need_it(monkeypatch: pytest.MonkeyPatch, parity_device) -> None:
    """With the int32 limit lowered to 100 elements, a 128-element call runs (in the interpreter, or on the GPU)
    the int64 twin, with the default build's results; a 32-element call still runs the default build."""
    kernel = chunk_cumsum.chunk_cumsum_kernel
    bound: list[torch.dtype | None] = []
    real_bind = type(kernel).bind

    def bind(self, args):
        bound.append(self.settings.index_dtype)
        return real_bind(self, args)

    dt = torch.rand(2, 32, 2, device=parity_device)
    A = -torch.rand(2, device=parity_device)
    monkeypatch.setattr(launch, "_COMPILED", {})
    expected = chunk_cumsum.chunk_cumsum_fwd(dt, A, 8)
    monkeypatch.setattr(type(kernel), "bind", bind)
    monkeypatch.setattr(launch, "INT32_MAX", 100)
    monkeypatch.setattr(launch, "_COMPILED", {})
    got = chunk_cumsum.chunk_cumsum_fwd(dt, A, 8)
    assert bound == [torch.int64]
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=0, atol=0)
    chunk_cumsum.chunk_cumsum_fwd(dt[:, :8], A, 8)
    assert bound == [torch.int64, None]
