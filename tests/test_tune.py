"""``parity tune`` (parity/tune.py) on CPU. Helion's autotuner cannot benchmark here, so its search is replaced at
the seam made for it (``Tuner.search``) by a small search over the seed configs that runs each candidate and
applies the accuracy check Helion would; the timer is a stand-in too. Everything else is real: the launch
capture, the kernels (Triton interpreter), the records and the engine's end-to-end judgements."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
from pathlib import Path
from typing import Any

import helion
import helion.language as hl
import pytest
import torch
from helion.autotuner.config_generation import ConfigGeneration
from hypothesis import strategies as st

from kernels import bmm_chunk, chunk_cumsum, chunk_scan, chunk_state, ssd_combined, ssd_combined_bwd, state_passing
from kernels import layernorm_gated as ln
from kernels.launch import launch
from parity import cli, lookup, registry, tolerances, tune
from parity.errors import ParityError
from parity.runner import execute, make_inputs, upstream_grads
from parity.spec import Impl, OpSpec
from parity.tune import (
    SearchSettings,
    Tuner,
    _as_tuned,
    accuracy_check,
    broadcast_uniform,
    capture,
    kernel_tolerance,
    most_common_form,
    snapshot,
)

pytestmark = pytest.mark.cpu

SPECS = registry.load()
TOLS = tolerances.load(specs=SPECS)
NORM = {
    "rows": 7,
    "ngroups": 2,
    "group_size": 48,
    "z": True,
    "norm_before_gate": False,
    "is_rms_norm": True,
    "bias": False,
}
NORM_SPEC = dataclasses.replace(SPECS["layernorm_gated"], training_problems=(NORM,), examples=())
"""The gated norm with a small training shape (the CPU interpreter cannot run the real one) and no examples."""
NORM_IMPL = Impl("helion", "kernels.layernorm_gated:layernorm_fn")
SUMS = "partials_sum_kernel"
"""The gated norm's third kernel (the backward's partial sums), searched after the backward."""
SSD = {
    "batch": 1,
    "seqlen": 40,
    "chunk_size": 16,
    "nheads": 4,
    "ngroups": 2,
    "headdim": 16,
    "dstate": 16,
    "D": "h",
    "dt_bias": True,
    "dt_softplus": True,
}


class Lines(list):
    """The tuner's log lines, kept."""

    def __call__(self, line: str) -> None:
        self.append(line)


class SeedSearch:
    """A stand-in for Helion's autotuner: runs each seed config as Helion does (on copies of the arguments, against
    ``autotune_baseline_fn``, judged by ``autotune_baseline_accuracy_check_fn`` on the outputs and on what the
    kernel writes into its arguments) and returns the first that passes (``lost``: the first seed, unchecked, as
    a search that lost its way). ``seen``: the kernels searched; ``rejected``: the seeds the check refused;
    ``before(kernel)`` runs first (assertions about that moment)."""

    def __init__(
        self, before: Any = None, lost: bool = False, isolated: tuple[str, ...] = (), pointered: tuple[str, ...] = ()
    ):
        self.seen: list[str] = []
        self.rejected: list[dict[str, Any]] = []
        self.before = before
        self.lost = lost
        self.isolated = isolated
        self.pointered = pointered

    def __call__(self, kernel: Any, args: tuple[Any, ...]) -> dict[str, Any]:
        settings = kernel.settings
        assert settings.static_shapes, "tuned as training runs it: the static-shape build"
        assert settings.autotune_effort == "quick" and settings.autotune_random_seed == 0
        assert settings.autotune_ignore_errors, "a config Triton cannot compile is skipped, not the search ended"
        # benchmarked here (a worker's start took the budget), but where a search here lost the CUDA context
        assert settings.autotune_benchmark_subprocess == (kernel.fn.__name__ in self.isolated)
        pinned = {"indexing": "pointer"} if kernel.fn.__name__ in self.pointered else {}
        assert settings.autotune_config_overrides == {"static_ranges": [], **pinned}, "build-dependent fields neutral"
        log = Path(settings.autotune_log)
        assert log.parent.name == "kernels" and log.suffix == ".autotune", "what the search measured is kept"
        if self.before:
            self.before(kernel)
        self.seen.append(kernel.fn.__name__)
        if self.lost:
            return dict(settings.autotune_seed_configs[0])
        base_args = snapshot(args)
        expected = settings.autotune_baseline_fn(*base_args)
        bound = kernel.bind(args)
        for config in settings.autotune_seed_configs:
            run_args = snapshot(args)
            got = bound.compile_config(config)(*run_args)
            try:
                settings.autotune_baseline_accuracy_check_fn(got, expected)
                settings.autotune_baseline_accuracy_check_fn(run_args, base_args)
            except AssertionError:
                self.rejected.append(dict(config))
                continue
            return dict(config)
        raise RuntimeError("no seed config passes")


def countdown() -> Any:
    """A stand-in timer: every call is faster than the one before (so a tuned kernel beats its default)."""
    ticks = itertools.count()
    return lambda fn: 100.0 - next(ticks)


def tuner(out: Path, search: Any, spec: OpSpec = NORM_SPEC, base: Impl = NORM_IMPL, **options: Any) -> Tuner:
    return Tuner(
        spec,
        base,
        spec.training_problems[0],
        torch.float32,
        "cpu",
        TOLS,
        out,
        search=search,
        timer=countdown(),
        log=Lines(),
        **options,
    )


def logged(t: Tuner) -> Lines:
    assert isinstance(t.log, Lines)
    return t.log


def edit_kernel_source(monkeypatch: pytest.MonkeyPatch, edited: str) -> None:
    """As if the device code of kernel ``edited`` (``module:function``) changed: its code hash does."""
    original = lookup.code_hash
    monkeypatch.setattr(lookup, "code_hash", lambda target: "edited" if target == edited else original(target))


def records(t: Tuner) -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in sorted((t.folder / "kernels").glob("*.json"))}


def _run_op(spec: Any, impl: Impl, problem: dict[str, Any], config: Any) -> dict[str, Any]:
    inputs = make_inputs(spec, problem, torch.float32, 0, "cpu")
    return execute(
        spec, dataclasses.replace(impl, config=config).load(), inputs, upstream_grads(0, torch.float32)
    ).values


def test_capture_gives_the_gated_norm_kernels_and_their_arguments():
    """The three kernels, named as the op's config names them, with the config the op runs by default (the
    fallbacks); replayed on the captured arguments they reproduce the op's output and grad.x bit for bit."""
    launches = capture(NORM_SPEC, NORM_IMPL, NORM, torch.float32, "cpu", ln.PHASES)
    assert set(launches) == set(ln.PHASES)
    fwd, bwd, sums = launches["fwd"], launches["bwd"], launches["bwd_sum"]
    assert fwd.kernel is ln.layer_norm_fwd_kernel and bwd.kernel is ln.layer_norm_bwd_kernel
    assert sums.kernel is ln.partials_sum_kernel and sums.config == ln.SUM_FALLBACK
    assert fwd.config == ln.fwd_fallback_config(64) and bwd.count == 1 and len(fwd.signatures) == 1
    assert fwd.target == "kernels.layernorm_gated:layer_norm_fwd_kernel"
    values = _run_op(NORM_SPEC, NORM_IMPL, NORM, {})
    args = snapshot(fwd.args)
    launch(fwd.kernel, args, fwd.config, **fwd.options)
    assert torch.equal(args[ln.FwdArgs._fields.index("out")], values["out"].reshape(args[0].shape))
    args = snapshot(bwd.args)
    launch(bwd.kernel, args, bwd.config, **bwd.options)
    assert torch.equal(args[ln.BwdArgs._fields.index("dx")], values["grad.x"])


SSD_IMPL = Impl("helion", "kernels.ssd_combined:mamba_chunk_scan_combined")


@functools.cache
def ssd_launches() -> dict[str, Any]:
    """The combined op's launches at :data:`SSD` (a capture runs the op four times in the interpreter: the tests
    that read them share one, in one xdist group)."""
    return capture(SPECS["ssd_combined"], SSD_IMPL, SSD, torch.float32, "cpu", ssd_combined.OPS)


@pytest.mark.xdist_group("ssd_capture")
def test_capture_gives_every_ssd_kernel_forward_and_backward():
    """Every kernel of the combined op's forward and backward (the varlen states kernel only runs with
    cu_seqlens), each the module's kernel; the forward's four recomputed in the backward launch twice; the
    captured chunk_scan launch reproduces the op's output bit for bit."""
    spec = SPECS["ssd_combined"]
    launches = ssd_launches()
    kernels = {
        "chunk_cumsum": chunk_cumsum.chunk_cumsum_kernel,
        "chunk_state": chunk_state.chunk_state_kernel,
        "state_passing": state_passing.state_passing_kernel,
        "bmm_chunk": bmm_chunk.bmm_chunk_kernel,
        "chunk_scan": chunk_scan.chunk_scan_kernel,
        "bwd_states": ssd_combined_bwd.states_bwd_kernel,
        "bwd_dx": ssd_combined_bwd.dx_kernel,
        "bwd_dcb": ssd_combined_bwd.dcb_kernel,
        "bwd_dc": ssd_combined_bwd.dc_kernel,
        "bwd_db": ssd_combined_bwd.db_kernel,
        "bwd_ddt": ssd_combined_bwd.ddt_kernel,
    }
    assert {name: launch.kernel for name, launch in launches.items()} == kernels
    assert {name for name, launch in launches.items() if launch.count == 2} == {
        "chunk_cumsum",
        "chunk_state",
        "state_passing",
        "bmm_chunk",
    }
    scan = launches["chunk_scan"]
    assert scan.config is None
    values = _run_op(spec, SSD_IMPL, SSD, {})
    out = launch(scan.kernel, snapshot(scan.args), None, **scan.options)[0]
    assert torch.equal(out, values["out"])


def test_accuracy_check_is_the_engines_rule():
    """Helion's accuracy callback: within atol + rtol * max|baseline| passes, beyond fails; a NaN the baseline
    does not have, another structure or rank, an integer or a scalar that differs fail; partials of a split
    reduction (an extent that depends on the config) are compared by their sums."""
    tol = kernel_tolerance(TOLS, "layernorm_gated", torch.float32)
    check = accuracy_check(tol)
    base = torch.linspace(-3, 3, 50, dtype=torch.float32)
    limit = tol.atol + tol.rtol * 3
    check((base + 0.5 * limit, torch.arange(3)), (base, torch.arange(3)))
    check((base, None, 1.5), (base, None, 1.5))
    for wrong in (
        (base + 2 * limit, torch.arange(3)),
        (torch.where(base > 2.9, float("nan"), base), torch.arange(3)),
        (base, torch.arange(3) + 1),
        (base[None], torch.arange(3)),
        (base,),
    ):
        with pytest.raises(AssertionError):
            check(wrong, (base, torch.arange(3)))
    with pytest.raises(AssertionError):
        check((base, 2.0), (base, 1.5))
    nan = torch.tensor([1.0, float("nan")])
    check(nan.clone(), nan)
    partials = base.reshape(1, 5, 10)
    check(partials.sum(1, keepdim=True), partials)  # one row group where the baseline had five
    with pytest.raises(AssertionError, match="summed over dims"):
        check(partials[:, :2], partials)


def test_tunes_each_kernel_writes_as_it_goes_and_judges_the_op(tmp_path):
    """Both kernels searched with the seeds, parity's baseline and check; the first kernel's record is on disk
    before the second search starts; the assembled config passes the engine and is written for promote."""
    holder: dict[str, Tuner] = {}

    def before(kernel: Any) -> None:
        if kernel.fn is ln.layer_norm_bwd_kernel.fn:
            assert (holder["t"].folder / "kernels" / "fwd.json").exists()

    search = SeedSearch(before)
    t = holder["t"] = tuner(tmp_path, search)
    outcome = t.run()
    assert outcome.status == "done", t.log
    assert search.seen == ["layer_norm_fwd_kernel", "layer_norm_bwd_kernel", "partials_sum_kernel"]
    found = records(t)
    assert set(found) == set(ln.PHASES) and all(r["status"] == "tuned" for r in found.values())
    assert found["bwd"]["config"] == found["bwd"]["seeds"][0] and found["bwd"]["ms"] < found["bwd"]["baseline_ms"]
    assert found["fwd"]["code_hash"] == lookup.code_hash("kernels.layernorm_gated:layer_norm_fwd_kernel")
    static = {"static_shapes": True}  # the op runs the static-shape build each kernel was tuned on
    written = json.loads(outcome.config_path.read_text())
    assert written == {name: {**found[name]["config"], **static} for name in ln.PHASES}
    assert [j["passed"] for j in outcome.judged] == [True, True] and outcome.judged[0]["config"] == {}


class PinnedSearch(SeedSearch):
    """A :class:`SeedSearch` that returns ``pinned[kernel function name]`` for those kernels (as a search that
    found that config), searching the others over their seeds."""

    def __init__(self, pinned: dict[str, dict[str, Any]]):
        super().__init__()
        self.pinned = pinned

    def __call__(self, kernel: Any, args: tuple[Any, ...]) -> dict[str, Any]:
        if kernel.fn.__name__ not in self.pinned:
            return super().__call__(kernel, args)
        self.seen.append(kernel.fn.__name__)
        return dict(self.pinned[kernel.fn.__name__])


def partial_rows(launch: Any) -> int:
    """The row groups of the gated norm's partials a captured ``partials_sum_kernel`` launch sums."""
    return int(launch.args[0].shape[1])


def test_the_partial_sums_are_tuned_on_the_row_groups_of_the_tuned_backward(tmp_path):
    """The partial sums' arguments depend on the backward's config (one row per row group): they are captured and
    searched with the backward's tuned config, not its default; a backward re-tuned to another row-group count
    makes the sums' record stale, and the next run tunes them again on the new partials."""
    default = capture(NORM_SPEC, NORM_IMPL, NORM, torch.float32, "cpu", ln.PHASES)
    four, seven = {"block_sizes": [2, 1]}, {"block_sizes": [1, 1]}  # 4 and 7 row groups of the 7 rows
    assert partial_rows(default["bwd_sum"]) not in (4, 7)
    tuned = capture(
        NORM_SPEC, NORM_IMPL, NORM, torch.float32, "cpu", ln.PHASES, configs={"bwd": {**four, "static_shapes": True}}
    )
    assert partial_rows(tuned["bwd_sum"]) == 4
    assert {n: launch.config for n, launch in tuned.items()} == {n: launch.config for n, launch in default.items()}
    assert tuned["bwd"].signatures == default["bwd"].signatures  # the backward's own arguments: its inputs

    t = tuner(tmp_path, PinnedSearch({"layer_norm_bwd_kernel": four}))
    assert t.run().status == "done", logged(t)
    assert records(t)["bwd_sum"]["signature"] == tuned["bwd_sum"].signatures[0]

    again = PinnedSearch({"layer_norm_bwd_kernel": seven})
    t = tuner(tmp_path, again)
    outcome = t.run(only=["bwd"], force=True)
    assert outcome.status == "incomplete" and again.seen == ["layer_norm_bwd_kernel"]
    assert any("not tuned yet: bwd_sum" in line for line in logged(t))

    third = SeedSearch()
    t = tuner(tmp_path, third)
    assert t.run().status == "done", logged(t)
    assert third.seen == ["partials_sum_kernel"]
    assert "[1, 7, 96]" in records(t)["bwd_sum"]["signature"]


def test_a_kernel_whose_arguments_change_with_a_re_tuned_kernel_is_tuned_again_from_its_last_best(
    tmp_path, monkeypatch
):
    """The backward's source changes and its re-tune picks another row-group count: the partial sums, current at
    the plan (the default backward gives them as many rows as the old tuned one), are queued again after the
    backward's search and searched from their last best."""
    sums_best = {"block_sizes": [8, 64]}
    two = {"block_sizes": [4, 1]}  # 2 row groups of the 7 rows, as many as the default backward's
    assert tuner(tmp_path, PinnedSearch({"layer_norm_bwd_kernel": two, SUMS: sums_best})).run().status == "done"
    edit_kernel_source(monkeypatch, "kernels.layernorm_gated:layer_norm_bwd_kernel")
    again = PinnedSearch({"layer_norm_bwd_kernel": {"block_sizes": [2, 1]}})
    t = tuner(tmp_path, again)
    assert t.run().status == "done", logged(t)
    assert again.seen == ["layer_norm_bwd_kernel", SUMS]
    assert any(
        line.endswith("bwd_sum: its arguments changed with another kernel's tuned config: tuned again")
        for line in logged(t)
    )
    found = records(t)["bwd_sum"]
    assert found["seeds"][0] == sums_best and "[1, 4, 96]" in found["signature"]


def test_the_trust_is_judged_at_the_tuning_problem_and_a_pass_on_more_problems_answers_it(tmp_path):
    """The trust (the searches' baseline) is judged at the tuning problem alone; the tuned configs' judgement adds
    the op's examples. A stored pass of the default configs on more problems (an earlier run that judged the trust
    with the examples) is reused, not judged again."""
    example = {**NORM, "rows": 5}
    spec = dataclasses.replace(NORM_SPEC, examples=(example,))
    t = tuner(tmp_path, SeedSearch(), spec=spec)
    outcome = t.run()
    assert outcome.status == "done", logged(t)
    assert [j["problems"] for j in outcome.judged] == [[NORM], [NORM, example]]
    [trust] = [p for p in (t.folder / "judged").glob("*.json") if json.loads(p.read_text())["config"] == {}]
    earlier = {**json.loads(trust.read_text()), "problems": [NORM, example]}
    trust.unlink()
    (t.folder / "judged" / "earlier.json").write_text(json.dumps(earlier))
    again = tuner(tmp_path, SeedSearch(), spec=spec)
    assert again.run(only=["fwd"], force=True).status == "done", logged(again)
    assert any("judged before: the default configs" in line for line in logged(again))
    assert not any("judging the default configs" in line for line in logged(again))
    earlier["passed"] = False  # a failure on more problems says nothing about the tuning problem alone
    (t.folder / "judged" / "earlier.json").write_text(json.dumps(earlier))
    third = tuner(tmp_path, SeedSearch(), spec=spec)
    assert third.run(only=["fwd"], force=True).status == "done", logged(third)
    assert any("judging the default configs" in line and "1 problem(s)" in line for line in logged(third))


class FullConfigSearch:
    """A stand-in for Helion's autotuner that returns what Helion returns: the bound kernel's default config with
    every field written out, per-operation lists as long as the tuned build's loads and stores."""

    def __call__(self, kernel: Any, args: tuple[Any, ...]) -> dict[str, Any]:
        return dict(kernel.bind(args).config_spec.default_config())


def test_a_config_tuned_on_one_build_runs_on_builds_with_more_loads(tmp_path):
    """H200 run 21: the gated norm's backward tuned at the training build (z, RMS, no bias) carried an
    8-entry ``indexing`` list; the build with bias, norm_before_gate and LayerNorm has a 9th load/store and
    Helion refused the list. Uniform per-operation fields are now one value, which Helion broadcasts."""
    wide = {**NORM, "rows": 5, "ngroups": 3, "group_size": 24, "norm_before_gate": True, "is_rms_norm": False}
    spec = dataclasses.replace(NORM_SPEC, examples=({**wide, "bias": True},))
    t = tuner(tmp_path, FullConfigSearch(), spec=spec)
    outcome = t.run()
    assert outcome.status == "done", logged(t)
    tuned = records(t)["bwd"]["config"]
    assert isinstance(tuned["indexing"], list) and len(set(tuned["indexing"])) == 1
    assert json.loads(outcome.config_path.read_text())["bwd"]["indexing"] == tuned["indexing"][0]


class MixedIndexingSearch:
    """A stand-in for Helion's autotuner that returns the tuned build's default config with the last load or store
    indexed another way: a per-operation list with different entries, as Helion's search writes them (H100 run
    30: bwd_state_passing's ``indexing``, six pointers then a tensor descriptor)."""

    def __call__(self, kernel: Any, args: tuple[Any, ...]) -> dict[str, Any]:
        spec = kernel.bind(args).config_spec
        other = next(c for c in spec.valid_indexing_types() if c != "pointer")
        return {**dict(spec.default_config()), "indexing": ["pointer"] * (spec.indexing.length - 1) + [other]}


def test_a_mixed_per_operation_list_refused_by_another_build_is_kept_as_its_most_common_entry(tmp_path):
    """The backward's tuned config indexes its loads and stores two ways; the build of the pinned example (bias,
    LayerNorm, norm before the gate) has more of them and Helion refuses the list: that form is rejected, and the
    form with the list as its most common entry, checked and timed on the kernel when tuned, is kept."""
    wide = {**NORM, "rows": 5, "ngroups": 3, "group_size": 24, "norm_before_gate": True, "is_rms_norm": False}
    spec = dataclasses.replace(NORM_SPEC, examples=({**wide, "bias": True},))
    t = tuner(tmp_path, MixedIndexingSearch(), spec=spec)
    outcome = t.run()
    assert outcome.status == "done", logged(t)
    bwd = records(t)["bwd"]
    assert len(set(bwd["config"]["indexing"])) == 2 and bwd["common_config"]["indexing"] == "pointer"
    assert bwd["common_ms"] < bwd["baseline_ms"]
    assert bwd["rejected_forms"] == [_as_tuned(bwd["config"])]
    assert outcome.config["bwd"] == _as_tuned(bwd["common_config"])
    assert any("bwd (per-operation lists as one value): pass" in line for line in logged(t))
    again = tuner(tmp_path, MixedIndexingSearch(), spec=spec)  # the rejection is remembered: nothing judged twice
    assert again.run().config == outcome.config and not any("rejected" in line for line in logged(again))


def test_most_common_form_writes_every_per_operation_list_as_one_value():
    config = {"indexing": ["pointer", "block_ptr", "pointer"], "atomic_indexing": [], "block_sizes": [32, 32]}
    assert most_common_form(config) == {**config, "indexing": "pointer"}
    assert most_common_form({"indexing": ["block_ptr", "pointer"]}) == {"indexing": "block_ptr"}


def test_broadcast_uniform_writes_only_uniform_per_operation_lists_as_one_value():
    config = {
        "indexing": ["pointer", "pointer"],
        "load_eviction_policies": ["last", ""],
        "atomic_indexing": [],
        "block_sizes": [32, 32],
    }
    assert broadcast_uniform(config) == {**config, "indexing": "pointer"}


@pytest.mark.xdist_group("ssd_capture")
def test_a_config_tuned_on_the_static_build_loads_on_builds_without_its_static_range():
    """H200 run 26: state_passing tuned on the static build at the training shape, whose block loop has a static
    range (Helion writes ``static_ranges: [False]``), was refused by the dynamic build (batch 1, the gate's
    shapes), which has no such loop. The tuned config as the op runs it omits the field and loads on both."""
    launch_ = ssd_launches()["state_passing"]
    static = helion.kernel(launch_.kernel.fn, settings=launch_.kernel.settings.copy(static_shapes=True))
    best = dict(FullConfigSearch()(static, launch_.args))
    assert best["static_ranges"] == [False]
    dynamic = launch_.kernel.bind(launch_.args).config_spec
    with pytest.raises(helion.exc.InvalidConfig, match="static_ranges"):
        dynamic.normalize(helion.Config(**best))
    tuned = {k: v for k, v in _as_tuned(best).items() if k != lookup.STATIC_SHAPES}
    assert "static_ranges" not in tuned
    dynamic.normalize(helion.Config(**tuned))
    static.bind(launch_.args).config_spec.normalize(helion.Config(**tuned))
    values = _run_op(SPECS["ssd_combined"], SSD_IMPL, SSD, {"state_passing": _as_tuned(best)})  # batch 1: dynamic
    assert torch.isfinite(values["out"]).all()
    with pytest.raises(ParityError, match=r"static_ranges=\[True\]"):
        _as_tuned({**best, "static_ranges": [True]})
    # the override the tuner passes (SeedSearch checks it) keeps Helion's own config generation off static ranges
    held = ConfigGeneration(static.bind(launch_.args).config_spec, overrides={"static_ranges": []})
    assert {tuple(held.random_config().config["static_ranges"]) for _ in range(40)} == {(False,)}


def test_a_rerun_skips_what_is_current_and_a_changed_source_re_tunes(tmp_path, monkeypatch):
    """Resumable: a second run searches nothing and reuses the stored judgements; a kernel whose source hash
    changed is tuned again, alone."""
    assert tuner(tmp_path, SeedSearch()).run().status == "done"
    again = SeedSearch()
    t = tuner(tmp_path, again)
    assert t.run().status == "done" and again.seen == []
    assert any("judged before" in line for line in logged(t))
    edit_kernel_source(monkeypatch, "kernels.layernorm_gated:layer_norm_bwd_kernel")
    path = t.folder / "kernels" / "bwd.json"
    best = {"block_sizes": [16, 1], "num_warps": 1}  # a config of no seed: as a search outside the grid finds
    path.write_text(json.dumps({**json.loads(path.read_text()), "config": best}))
    third = SeedSearch()
    t = tuner(tmp_path, third)
    assert t.run().status == "done"
    assert third.seen == ["layer_norm_bwd_kernel"]
    assert any("plan bwd:" in line and "its last best config seeded" in line for line in logged(t))
    assert records(t)["bwd"]["seeds"][0] == best  # the re-tune starts from the stale record's best


def test_a_host_code_edit_judges_the_tuned_configs_again_without_the_trust_or_a_search(tmp_path, monkeypatch):
    """An edit outside the kernels' device code (the launcher, the op's glue) moves the op's source hash, not a
    kernel's code hash: the run searches nothing, skips the trust (it is the searches' baseline) and judges the
    tuned configs again, which the promote gate then checks."""
    assert tuner(tmp_path, SeedSearch()).run().status == "done"
    original = lookup.source_hash
    monkeypatch.setattr(
        lookup, "source_hash", lambda target: "edited" if target.startswith("kernels.") else original(target)
    )
    again = SeedSearch()
    t = tuner(tmp_path, again)
    outcome = t.run()
    assert outcome.status == "done" and again.seen == []
    assert any("no kernel to search: the baseline's trust is not judged" in line for line in logged(t))
    assert not any("judging the default configs" in line or "judged before" in line for line in logged(t))
    assert [j["source_hash"] for j in outcome.judged] == ["edited"] and all(j["config"] for j in outcome.judged)


def test_same_search_re_tunes_what_another_search_found_once(tmp_path):
    """``--same-search`` with a new budget: each kernel found with the old one is tuned again, and a run with the
    same settings after it searches nothing (resumable, unlike ``--force``); without it the old records stand."""
    assert tuner(tmp_path, SeedSearch(), settings=SearchSettings(budget_seconds=25)).run().status == "done"
    kept = SeedSearch()
    assert tuner(tmp_path, kept, settings=SearchSettings(budget_seconds=60)).run().status == "done"
    assert kept.seen == []
    redo = SeedSearch()
    t = tuner(tmp_path, redo, settings=SearchSettings(budget_seconds=60), same_search=True)
    assert t.run().status == "done" and redo.seen == ["layer_norm_fwd_kernel", "layer_norm_bwd_kernel", SUMS]
    assert any("plan bwd:" in line and "stale (search changed)" in line for line in logged(t))
    assert all(r["search"]["budget_seconds"] == 60 for r in records(t).values())
    again = SeedSearch()
    assert tuner(tmp_path, again, settings=SearchSettings(budget_seconds=60), same_search=True).run().status == "done"
    assert again.seen == []


def test_a_search_that_loses_the_cuda_context_resumes_in_a_worker_process(tmp_path, monkeypatch):
    """H200 run 31: a candidate of chunk_scan's in-process search hit a misaligned address, which ends the run. The
    resumed run searches that kernel alone with Helion's worker-process benchmarks (the candidate then costs the
    worker), the others as before, and ``--same-search`` holds its record current with those settings."""
    lost: list[RuntimeError] = []
    monkeypatch.setattr(tune, "_context_lost", lambda device: lost[0] if lost else None)

    def crash(kernel: Any) -> None:
        if kernel.fn.__name__ == "layer_norm_bwd_kernel":
            lost.append(RuntimeError("CUDA error: misaligned address"))
            raise RuntimeError("TritonUnrecoverableRuntimeError")

    t = tuner(tmp_path, SeedSearch(before=crash), same_search=True)
    with pytest.raises(ParityError, match=r"CUDA context is lost.*re-run to resume"):
        t.run()
    assert "misaligned address" in json.loads((t.folder / "kernels" / "bwd.context-lost.json").read_text())["error"]
    lost.clear()
    resumed = SeedSearch(isolated=("layer_norm_bwd_kernel",))
    t = tuner(tmp_path, resumed, same_search=True)
    assert t.run().status == "done" and resumed.seen == ["layer_norm_bwd_kernel", SUMS]  # the sums: never reached
    assert any("plan bwd:" in line and "worker process" in line for line in logged(t))
    assert (
        records(t)["bwd"]["search"]["benchmark_subprocess"] and not records(t)["fwd"]["search"]["benchmark_subprocess"]
    )
    again = SeedSearch()
    assert tuner(tmp_path, again, same_search=True).run().status == "done" and again.seen == []


def helion_csv(path: Path, rows: list[tuple[str, str, str]]) -> None:
    """An autotune CSV log as Helion writes it: (config_id, status, config) per row."""
    lines = ["run_id,timestamp_s,config_id,generation,status,perf_ms,compile_time_s,config"]
    lines += [f'r,{i},{cid},0,{status},,1.0,"{config}"' for i, (cid, status, config) in enumerate(rows)]
    path.write_text("\n".join(lines) + "\n")


def test_the_candidate_a_failed_search_was_measuring_is_the_last_started_and_never_finished(tmp_path):
    log = tmp_path / "k.csv"
    helion_csv(
        log,
        [
            ("a", "started", "Config(indexing=['pointer'])"),
            ("a", "ok", "Config(indexing=['pointer'])"),
            ("b", "started", "Config(indexing=['tensor_descriptor'])"),
            ("c", "started", "Config(num_warps=1)"),
            ("c", "error", "Config(num_warps=1)"),
        ],
    )
    assert tune.unfinished_candidate(log) == "Config(indexing=['tensor_descriptor'])"
    helion_csv(log, [("a", "started", "x"), ("a", "ok", "x")])
    assert tune.unfinished_candidate(log) is None
    assert tune.unfinished_candidate(tmp_path / "absent.csv") is None


def test_a_tensor_descriptor_candidate_that_loses_the_context_pins_pointer_indexing_then_a_worker(
    tmp_path, monkeypatch
):
    """H200 run 31 and H100 run 32: chunk_scan's in-process search lost the CUDA context on a candidate with a
    tensor descriptor (a misaligned address). The resumed run searches it in this process with every load and store
    by pointer; should that search lose the context too (a pointer candidate), the next one uses the worker."""
    lost: list[RuntimeError] = []
    monkeypatch.setattr(tune, "_context_lost", lambda device: lost[0] if lost else None)
    candidates = iter(["Config(indexing=['pointer', 'tensor_descriptor'])", "Config(indexing=['pointer'])"])

    def crash(kernel: Any) -> None:
        if kernel.fn.__name__ == "layer_norm_bwd_kernel":
            log = Path(kernel.settings.autotune_log).with_suffix(".csv")
            helion_csv(log, [("a", "started", next(candidates))])
            lost.append(RuntimeError("CUDA error: misaligned address"))
            raise RuntimeError("TritonUnrecoverableRuntimeError")

    t = tuner(tmp_path, SeedSearch(before=crash), same_search=True)
    with pytest.raises(ParityError, match="CUDA context is lost"):
        t.run()
    assert "tensor_descriptor" in json.loads((t.folder / "kernels" / "bwd.context-lost.json").read_text())["candidate"]
    lost.clear()
    pinned = SeedSearch(before=crash, pointered=("layer_norm_bwd_kernel",))
    t = tuner(tmp_path, pinned, same_search=True)
    assert (
        t.settings_for("bwd").stored()["pointer_indexing"] and "pointer_indexing" not in t.settings_for("fwd").stored()
    )
    with pytest.raises(ParityError, match="CUDA context is lost"):
        t.run()
    assert pinned.seen == [] and any("pointer indexing only" in line for line in logged(t))
    lost.clear()
    isolated = SeedSearch(isolated=("layer_norm_bwd_kernel",))
    t = tuner(tmp_path, isolated, same_search=True)
    assert t.run().status == "done" and isolated.seen == ["layer_norm_bwd_kernel", SUMS]
    search = records(t)["bwd"]["search"]
    assert search["benchmark_subprocess"] and "pointer_indexing" not in search


def test_a_first_search_on_a_gpu_starts_from_the_best_found_on_another_of_its_architecture(tmp_path, monkeypatch):
    """Tuning on an H100 with an H200's records in the tree: each kernel's search is seeded with the H200's best
    (the same SMs); a GPU of another architecture is not a source."""
    monkeypatch.setattr(lookup, "device_key", lambda device: "gpu-a-sm90")
    assert tuner(tmp_path, SeedSearch()).run().status == "done"
    bests = {"gpu-a-sm90": {"block_sizes": [16, 1], "num_warps": 1}, "gpu-c-sm80": {"block_sizes": [8, 1]}}
    rel = tuner(tmp_path, SeedSearch()).folder.relative_to(tmp_path / "gpu-a-sm90") / "kernels" / "bwd.json"
    record = json.loads((tmp_path / "gpu-a-sm90" / rel).read_text())
    for key, best in bests.items():
        (tmp_path / key / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / key / rel).write_text(json.dumps({**record, "config": best}))
    monkeypatch.setattr(lookup, "device_key", lambda device: "gpu-b-sm90")
    t = tuner(tmp_path, SeedSearch())
    assert t.run().status == "done"
    assert t.folder.is_relative_to(tmp_path / "gpu-b-sm90")
    assert any("plan bwd:" in line and "gpu-a-sm90's best seeded" in line for line in logged(t))
    seeds = records(t)["bwd"]["seeds"]
    assert seeds[0] == bests["gpu-a-sm90"] and bests["gpu-c-sm80"] not in seeds


def test_a_new_shape_bucket_starts_each_search_from_the_best_found_at_another_shape(tmp_path):
    """Tuning the op at a second problem (another shape bucket) on the same device searches every kernel again (a
    record of the first problem is not this one's), each search starting from that kernel's best at the first."""
    first = tuner(tmp_path, SeedSearch())
    assert first.run().status == "done"
    best = {"block_sizes": [16, 1], "num_warps": 1}
    path = first.folder / "kernels" / "bwd.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "config": best}))
    wider = dataclasses.replace(NORM_SPEC, training_problems=({**NORM, "rows": NORM["rows"] * 2},))
    search = SeedSearch()
    t = tuner(tmp_path, search, spec=wider)
    assert t.folder != first.folder and t.folder.parent == first.folder.parent
    assert t.run().status == "done" and search.seen == ["layer_norm_fwd_kernel", "layer_norm_bwd_kernel", SUMS]
    tag = f"the {first.folder.name} tuning's best seeded"
    assert any("plan bwd:" in line and tag in line for line in logged(t))
    assert records(t)["bwd"]["seeds"][0] == best


def test_force_with_kernel_re_tunes_that_kernel_and_keeps_the_others(tmp_path):
    """``--force --kernel bwd`` (a search that failed, say) searches bwd alone and judges the op with fwd's record."""
    assert tuner(tmp_path, SeedSearch()).run().status == "done"
    fwd_before = records(tuner(tmp_path, SeedSearch()))["fwd"]
    again = SeedSearch()
    t = tuner(tmp_path, again)
    assert t.run(only=["bwd"], force=True).status == "done"
    assert again.seen == ["layer_norm_bwd_kernel"]
    assert records(t)["fwd"] == fwd_before


@helion.kernel(static_shapes=False)
def row_cumsum_kernel(x: torch.Tensor) -> torch.Tensor:
    """Cumulative sums along rows, scanned per tile: wrong with a column block narrower than the row (Helion
    accepts a scan along a dimension tiled by a smaller block): a kernel with right and wrong configs."""
    m, n = x.shape
    out = torch.empty_like(x)
    for tile_m, tile_n in hl.tile([m, n]):
        out[tile_m, tile_n] = torch.cumsum(x[tile_m, tile_n], dim=1)
    return out


def row_cumsum(x: torch.Tensor, *, config: Any = None) -> torch.Tensor:
    """The toy op: its config names one kernel, ``{"scan": Helion config}``."""
    return launch(row_cumsum_kernel, (x,), (config or {}).get("scan"))


ROWS = {"rows": 4, "cols": 32}
ROW_IMPL = Impl("helion", row_cumsum, backward=False)
ROW_SPEC = OpSpec(
    name="row_cumsum",
    reference=Impl("torch", lambda x: torch.cumsum(x, 1)),
    make_inputs=lambda p, dtype, seed, device: {
        "x": torch.randn(p["rows"], p["cols"], generator=torch.Generator().manual_seed(seed)).to(device, dtype)
    },
    problems=lambda profile: st.just(ROWS),
    outputs=("out",),
    candidates=(ROW_IMPL,),
    dtypes=(torch.float32,),
    training_problems=(ROWS,),
    tuning_configs=lambda inputs, count: [
        {"scan": {"block_sizes": [1, 8]}},  # wrong: a scan across column tiles
        {"scan": {"block_sizes": [2, 32]}},
        {"scan": {"block_sizes": [1, 8, 4]}},  # malformed: dropped before the search
        {"scan": {"block_sizes": [4, 32], "indexing": ["pointer"] * 3}},  # one load or store more than the kernel's
    ][:count],
)


def test_the_check_refuses_a_wrong_config_and_takes_a_right_one(tmp_path):
    """On the kernel's real outputs: the seed that scans across tiles is refused by parity's check, the next one
    is taken; a malformed seed never reaches the search, nor one with a per-load list of another length (Helion's
    normalization keeps it, and its search then failed as a whole: bwd_ddt on the H100, h200-run42)."""
    search = SeedSearch()
    t = tuner(tmp_path, search, spec=ROW_SPEC, base=ROW_IMPL)
    outcome = t.run()
    assert outcome.status == "done" and outcome.config == {"scan": {"block_sizes": [2, 32], "static_shapes": True}}
    assert search.rejected == [{"block_sizes": [1, 8]}]
    assert records(t)["scan"]["seeds"] == [{"block_sizes": [1, 8]}, {"block_sizes": [2, 32]}]
    dropped = [line for line in logged(t) if "seed dropped" in line]
    assert len(dropped) == 2 and "indexing has 3 entries, the kernel 2" in dropped[1], dropped


def test_a_wrong_best_config_is_recorded_as_failed_and_not_kept(tmp_path):
    """A search that returns a wrong config: the tuner's own check of the best config records the kernel as
    failed, and no config is kept (exit 1 from the command)."""
    t = tuner(tmp_path, SeedSearch(lost=True), spec=ROW_SPEC, base=ROW_IMPL)
    outcome = t.run()
    record = records(t)["scan"]
    assert record["status"] == "failed" and record["error"].startswith("AssertionError: leaf 0: max_abs")
    assert outcome.status == "no-gain" and not (t.folder / "config.json").exists()


BAD_BWD: dict[str, Any] = {}
"""The backward config :func:`wrong_with_tuned_bwd` corrupts the op's output with (set by the test)."""


def wrong_with_tuned_bwd(*, config: Any = None, **kwargs: Any) -> torch.Tensor:
    """The gated norm, wrong end to end (output x 1.01) when run with the backward config BAD_BWD: each kernel
    passes its own check, only the op's judge can see it."""
    out = ln.layernorm_fn(**kwargs, config=config)
    return out * 1.01 if BAD_BWD and (config or {}).get("bwd") == BAD_BWD else out


def test_an_assembled_config_that_fails_end_to_end_is_rejected(tmp_path, monkeypatch):
    """The op fails the engine with the tuned backward config: the assembled config is rejected, the kernels are
    added one at a time, the backward's config is rejected (recorded) and the others kept."""
    seeds = ln.tuning_configs({"x": torch.zeros(NORM["rows"], 96), "group_size": 48}, 8)
    monkeypatch.setitem(BAD_BWD, "block_sizes", seeds[0]["bwd"]["block_sizes"])
    monkeypatch.setitem(BAD_BWD, "num_warps", seeds[0]["bwd"]["num_warps"])
    monkeypatch.setitem(BAD_BWD, "static_shapes", True)  # as the tuner assembles it
    impl = Impl("helion", wrong_with_tuned_bwd)
    spec = dataclasses.replace(NORM_SPEC, candidates=(impl,))
    t = tuner(tmp_path, SeedSearch(), spec=spec, base=impl)
    outcome = t.run()
    kept = {name: {**records(t)[name]["config"], "static_shapes": True} for name in ("fwd", "bwd_sum")}
    assert outcome.status == "done" and outcome.config == kept
    assert [j["passed"] for j in outcome.judged] == [True, False, True, False, True]
    assert "rejected" in records(t)["bwd"] and "rejected" not in records(t)["fwd"]
    assert records(t)["bwd"]["rejected_forms"] == [BAD_BWD]
    assert json.loads(outcome.config_path.read_text()) == outcome.config
    again = tuner(tmp_path, SeedSearch(), spec=spec, base=impl)
    assert again.run().config == kept and not any("bwd: rejected" in line for line in logged(again))
    # a rejection recorded for another form of the config (before the tuner changed how it assembles) is judged
    # again, here failing again
    path = t.folder / "kernels" / "bwd.json"
    path.write_text(json.dumps({**records(t)["bwd"], "rejected_forms": [{"indexing": ["pointer"]}]}))
    third = tuner(tmp_path, SeedSearch(), spec=spec, base=impl)
    assert third.run().config == kept and any("bwd: rejected" in line for line in logged(third))
    assert records(t)["bwd"]["rejected_forms"] == [{"indexing": ["pointer"]}, BAD_BWD]


def test_plan_captures_and_prints_without_tuning(tmp_path, capsys):
    """``--plan``: one line per kernel name, nothing searched, judged or written (also on CPU)."""
    shape = json.dumps(NORM)
    code = cli.main(
        [
            "tune",
            "layernorm_gated",
            "--plan",
            "--device",
            "cpu",
            "--dtype",
            "float32",
            "--shape",
            shape,
            "--out",
            str(tmp_path),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "plan fwd: layer_norm_fwd_kernel x1" in out and "plan bwd: layer_norm_bwd_kernel x1" in out
    assert "8 seed(s): not tuned" in out
    assert not any(tmp_path.iterdir())


def test_time_limit_starts_no_judgement_longer_than_the_last_one_took(tmp_path):
    """Each judgement records its seconds; with a stored one of 1000 s, a run with a 600 s limit reuses the stored
    trust, searches the kernels (a stand-in search takes no time) but starts no judgement of the tuned configs."""
    first = tuner(tmp_path, SeedSearch())
    assert first.run().status == "done"
    judged = sorted((first.folder / "judged").glob("*.json"))
    assert judged and all(json.loads(p.read_text())["seconds"] >= 0 for p in judged)
    for path in judged:  # the trust's verdict took 1000 s; the tuned configs' verdict is to be made again
        record = json.loads(path.read_text())
        if record["config"]:
            path.unlink()
        else:
            path.write_text(json.dumps({**record, "seconds": 1000.0}))
    search = SeedSearch()
    t = tuner(tmp_path, search, time_limit=600)
    assert t.run(force=True).status == "incomplete" and search.seen
    assert any("stopping before judging the tuned configs" in line for line in logged(t))


def test_time_limit_scales_the_trusts_time_to_the_problems_of_a_full_judgement(tmp_path):
    """The trust judges the tuning problem alone: with no tuned configs' verdict stored, a judgement of the problem
    and one example is expected to take twice the trust's 400 s, and a 600 s limit starts none."""
    spec = dataclasses.replace(NORM_SPEC, examples=({**NORM, "rows": 5},))
    first = tuner(tmp_path, SeedSearch(), spec=spec)
    assert first.run().status == "done"
    for path in sorted((first.folder / "judged").glob("*.json")):
        record = json.loads(path.read_text())
        if record["config"]:
            path.unlink()
        else:
            path.write_text(json.dumps({**record, "seconds": 400.0}))
    t = tuner(tmp_path, SeedSearch(), spec=spec, time_limit=600)
    assert t.run(force=True).status == "incomplete"
    assert any("stopping before judging the tuned configs" in line for line in logged(t))


def test_time_limit_expects_a_judgement_to_take_as_long_as_the_longest_of_tuned_configs(tmp_path):
    """Once a tuned config's judgement is stored, its time is the estimate, not the trust's (which built every
    default kernel on a cold cache): with the trust at 1000 s and a tuned one at 10 s, a 600 s limit judges."""
    first = tuner(tmp_path, SeedSearch())
    assert first.run().status == "done"
    for path in sorted((first.folder / "judged").glob("*.json")):
        record = json.loads(path.read_text())
        if record["config"]:  # stands for another tuned config's verdict: the tuned configs are judged again
            record.update(config={"fwd": {"num_warps": 1}}, seconds=10.0)
        else:
            record["seconds"] = 1000.0
        path.write_text(json.dumps(record))
    t = tuner(tmp_path, SeedSearch(), time_limit=600)
    outcome = t.run()
    assert outcome.status == "done", logged(t)
    assert any(line.endswith("end to end, forward and backward, on 1 problem(s)") for line in logged(t))


def test_time_limit_expects_a_search_to_take_as_long_as_the_longest_stored_with_its_settings(tmp_path):
    """Helion's final verification can run a search well past its budget (H100 run 32, bmm_chunk): with a stored
    search of 1000 s under the same settings, a 600 s limit starts no other search; one stored under other
    settings (another budget) is no guide, and the search starts."""
    first = tuner(tmp_path, SeedSearch())
    assert first.run().status == "done"
    folder = first.folder / "kernels"
    fwd = json.loads((folder / "fwd.json").read_text())
    for search, started in (
        (fwd["search"], False),
        ({**fwd["search"], "budget_seconds": 7}, True),
    ):
        (folder / "fwd.json").write_text(json.dumps({**fwd, "search": search, "seconds": 1000.0}))
        (folder / "bwd.json").unlink(missing_ok=True)
        probe = SeedSearch()
        t = tuner(tmp_path, probe, time_limit=600)
        t.run(only=["bwd"])
        assert ("bwd" in " ".join(probe.seen)) == started, logged(t)
        assert any("stopping before bwd" in line for line in logged(t)) != started


def test_time_limit_stops_before_starting_work_and_says_so(tmp_path):
    """A time limit already spent: nothing is judged or searched, and the log says to run again."""
    search = SeedSearch()
    t = tuner(tmp_path, search, time_limit=0.001)
    assert t.run().status == "incomplete" and search.seen == []
    assert any("re-run the same command to continue" in line for line in logged(t))


def test_a_judgement_runs_the_examples_in_workers_with_the_same_verdicts(tmp_path, monkeypatch):
    """With ``workers`` (``parity tune --workers``), the judgement runs the op's pinned examples in spawned processes
    while the tuning problem runs here: the same cases, in the same order, with the same verdicts as all here."""
    import parity.workers

    spec = SPECS["chunk_cumsum"]
    base = dataclasses.replace(spec.candidates[0], config=None)
    problem = {**spec.examples[0], "seqlen": 40}
    spread_over: list[int] = []
    real = parity.workers.run_groups

    def counted(work: Any, device: str, tols: Any, workers: int, on_result: Any) -> None:
        spread_over.append(workers)
        real(work, device, tols, workers, on_result)

    monkeypatch.setattr(parity.workers, "run_groups", counted)
    cases = {}
    for workers in (1, 2):
        t = Tuner(spec, base, problem, torch.float32, "cpu", TOLS, tmp_path / str(workers), workers=workers)
        impl = dataclasses.replace(base, config={})
        cases[workers] = t._run_problems(impl, [problem, *spec.examples])
    assert spread_over == [2]
    assert [r.problem for r in cases[2]] == [problem, *spec.examples] == [r.problem for r in cases[1]]
    assert [(r.passed, [q.name for q in r.quantities]) for r in cases[2]] == [
        (r.passed, [q.name for q in r.quantities]) for r in cases[1]
    ]
    assert all(r.passed for r in cases[2])
