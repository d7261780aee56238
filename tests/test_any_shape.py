"""Which build a Helion kernel runs: the dynamic-shape build by default; the build specialized to the call's shapes
where its config asks (``kernels.launch.STATIC``), except inside ``kernels.launch.any_shape()`` (from any thread)
and on arguments with a size-1 dimension; and the engine enters that context for every problem but the training
problems, so the gate judges a static config's static build where training runs it."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading

import pytest
import torch
from toy_op import reference, spec

from kernels import chunk_cumsum, launch
from parity import tolerances
from parity.runner import run_problem

STATIC_CONFIG = {**chunk_cumsum.CONFIGS[0], launch.STATIC: True}


def _builds(monkeypatch) -> list[tuple[bool, int]]:
    """Record the ``static_shapes`` setting and the bound kernel (one per code generation) of every bind."""
    seen: list[tuple[bool, int]] = []
    real_bind = chunk_cumsum.chunk_cumsum_kernel.bind.__func__

    def bind(kernel, args):
        bound = real_bind(kernel, args)
        seen.append((kernel.settings.static_shapes, id(bound)))
        return bound

    monkeypatch.setattr(type(chunk_cumsum.chunk_cumsum_kernel), "bind", bind)
    monkeypatch.setattr(launch, "_COMPILED", {})
    return seen


def _run(seqlens, config, device: str, heads: int = 2) -> None:
    for seqlen in seqlens:
        dt, A = torch.rand(2, seqlen, heads, device=device), -torch.rand(heads, device=device)
        chunk_cumsum.chunk_cumsum_fwd(dt, A, 8, config=config)


def test_a_static_config_runs_one_build_per_shape_the_default_one_for_all(monkeypatch, parity_device) -> None:
    seen = _builds(monkeypatch)
    _run((16, 24), STATIC_CONFIG, parity_device)
    assert [static for static, _ in seen] == [True, True] and seen[0][1] != seen[1][1]
    _run((16, 24), chunk_cumsum.CONFIGS[0], parity_device)
    assert [static for static, _ in seen[2:]] == [False, False] and seen[2][1] == seen[3][1]


def test_any_shape_and_size_one_dims_run_the_dynamic_build(monkeypatch, parity_device) -> None:
    seen = _builds(monkeypatch)
    with launch.any_shape():
        _run((16,), STATIC_CONFIG, parity_device)
    assert not launch._ANY_SHAPE[0]
    _run((16,), STATIC_CONFIG, parity_device, heads=1)  # Helion 1.5.0's static builds fail on size-1 dimensions
    assert [static for static, _ in seen] == [False, False]


def test_static_and_dynamic_builds_agree_bit_for_bit(parity_device) -> None:
    dt, A = torch.rand(2, 40, 3, device=parity_device), -torch.rand(3, device=parity_device) * 8
    static = chunk_cumsum.chunk_cumsum_fwd(dt, A, 16, config=STATIC_CONFIG)
    dynamic = chunk_cumsum.chunk_cumsum_fwd(dt, A, 16, config=chunk_cumsum.CONFIGS[0])
    assert all(torch.equal(s, d) for s, d in zip(static, dynamic, strict=True))


def test_any_shape_reaches_other_threads(monkeypatch, parity_device) -> None:
    """A CUDA backward runs on autograd's device thread: it must run the build its forward's context chose."""
    seen = _builds(monkeypatch)
    with launch.any_shape():
        thread = threading.Thread(target=_run, args=((16,), STATIC_CONFIG, parity_device))
        thread.start()
        thread.join()
    assert [static for static, _ in seen] == [False]


@pytest.mark.cpu
def test_engine_enters_any_shape_except_at_training_problems() -> None:
    entered: list[bool] = []

    @contextlib.contextmanager
    def any_shape():
        entered.append(True)
        yield

    training = {"batch": 1, "length": 9, "chunk": 4}
    s = dataclasses.replace(spec(reference), training_problems=(training,), any_shape=any_shape)
    tols = tolerances.load()
    for problem, expected in (({"batch": 2, "length": 13, "chunk": 4}, [True]), (training, [True])):
        [result] = run_problem(s, [s.impl("reference")], problem, torch.float32, 0, "cpu", tols)
        assert result.passed and entered == expected


def test_a_launch_installs_tritons_scratch_allocator_in_its_own_thread(parity_device) -> None:
    """Device-side tensor descriptors allocate scratch at launch; Triton keeps the allocator per thread context, and
    Helion 1.5.0's generated code installs it only for host-side descriptors, so every launch must."""
    from triton.runtime import _allocation

    seen: list[object] = []

    def run() -> None:  # a fresh thread starts with a fresh context: Triton's null allocator
        seen.append(_allocation._allocator.get())
        _run((16,), chunk_cumsum.CONFIGS[0], parity_device)
        seen.append(_allocation._allocator.get())

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert isinstance(seen[0], _allocation.NullAllocator)
    assert not isinstance(seen[1], _allocation.NullAllocator)


def test_a_config_is_read_once_per_object_and_again_when_changed_in_place(monkeypatch, parity_device) -> None:
    """The launcher reads a config's fields once per config object (the drop-ins pass the same promoted dicts on every
    call), but a config changed in place between calls runs as changed, and a ``helion.Config`` works as a dict."""
    chosen: list[dict] = []
    real = launch._choose

    def choose(kernel, args, fields):
        chosen.append(dict(fields))
        return real(kernel, args, fields)

    monkeypatch.setattr(launch, "_choose", choose)
    monkeypatch.setattr(launch, "_COMPILED", {})
    config = {"block_sizes": [1], "num_warps": 1}
    _run((16, 16), config, parity_device)
    assert chosen == [config]  # the second call: the same object, unchanged, the same compiled kernel
    config["block_sizes"] = [2]
    _run((16,), config, parity_device)
    assert chosen == [{"block_sizes": [1], "num_warps": 1}, {"block_sizes": [2], "num_warps": 1}]
    _run((16,), launch.as_config({"block_sizes": [2], "num_warps": 1}), parity_device)
    assert len(chosen) == 2  # equal fields: the kernel compiled for the dict


def test_aliased_arguments_compile_apart_from_distinct_ones(monkeypatch, parity_device) -> None:
    """Helion specializes on which inputs alias: the launcher's key tells a call with one tensor passed twice from a
    call with two equal-shaped tensors."""
    first, _ = launch._arguments_key((torch.zeros(4, device=parity_device), torch.zeros(4, device=parity_device), 3))
    shared = torch.zeros(4, device=parity_device)
    second, _ = launch._arguments_key((shared, shared, 3))
    assert first != second and first[0] == second[0] and first[2] == second[2] == 3


def test_a_build_replays_the_kernels_its_first_call_compiled(monkeypatch) -> None:
    """After its first call a build launches the compiled Triton kernels it recorded, with the grid padded to three
    dimensions, without Helion's launcher; a build with other launcher options, or whose launcher returns no compiled
    kernel (the CPU interpreter), keeps Helion's launcher on every call."""
    through_helion: list[tuple] = []
    direct: list[tuple] = []

    class Compiled:
        packed_metadata = b""

        def __getitem__(self, grid):
            return lambda *args: direct.append((grid, args))

    def helions(triton_kernel, grid, *args, **options):
        through_helion.append((grid, args))
        return compiled_result

    def host(x, *, _launcher=helions, **options):  # as Helion's generated host code is
        _launcher(jit, (x,), x, 7, num_warps=4, num_stages=1, **options)
        return x * 2

    jit = object()
    monkeypatch.setattr(launch.helion.runtime, "default_launcher", helions)
    compiled_result = Compiled()
    replay = launch._Replay(host)
    assert [replay((3,)), replay((5,)), replay((6,))] == [6, 10, 12]
    assert through_helion == [((3,), (3, 7))] and direct == [((5, 1, 1), (5, 7)), ((6, 1, 1), (6, 7))]
    for result, options in ((None, {}), (Compiled(), {"launch_cooperative_grid": True})):
        through_helion.clear()
        compiled_result = result
        replay = launch._Replay(functools.partial(host, **options))
        replay((3,)), replay((4,))
        assert [grid for grid, _ in through_helion] == [(3,), (4,)]


def test_repeated_launches_agree_with_helions_launcher_bit_for_bit(monkeypatch, parity_device) -> None:
    """Calls after the first launch what the first compiled (on CUDA, without Helion's launcher); their results are
    those of the build run through Helion's launcher."""
    monkeypatch.setattr(launch, "_COMPILED", {})
    real = launch.helion.runtime.default_launcher
    calls: list[object] = []
    monkeypatch.setattr(launch.helion.runtime, "default_launcher", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    dt, A = torch.rand(2, 40, 3, device=parity_device), -torch.rand(3, device=parity_device) * 8
    config = chunk_cumsum.CONFIGS[1]
    args = chunk_cumsum.chunk_cumsum_args(dt, A, 16)
    results = [launch.launch(chunk_cumsum.chunk_cumsum_kernel, args, config) for _ in range(3)]
    assert len(calls) == (1 if parity_device == "cuda" else 3)
    expected = launch._choose(chunk_cumsum.chunk_cumsum_kernel, args, config)[1](*args, _launcher=real)
    for result in results:
        assert all(torch.equal(r, e) for r, e in zip(result, expected, strict=True))
