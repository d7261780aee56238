"""The baseline's autotune pinning (reference.mamba_triton._pin), with a stand-in autotuner: mamba-ssm's
kernels run one config per argument dtypes for every key (the recorded choice, else their first config; a
recording run autotunes once and records); a pinned config that does not fit runs a smaller one; fp32 runs
compile their dots in IEEE fp32."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from triton import knobs
from triton.runtime.errors import OutOfResources

from reference import mamba_triton


class FakeTuner:
    """What _pin reads of a triton Autotuner: run, configs, best_config, arg_names, base_fn.__name__."""

    def __init__(self, configs: list[Any], too_big: set[tuple[str, int]] = frozenset()) -> None:
        self.configs = configs
        self.arg_names = ["x", "n"]
        self.base_fn = SimpleNamespace(__name__="fake_kernel")
        self.too_big = too_big
        self.benchmarked: list[int] = []
        self.ran: list[tuple[str, int, str | None]] = []
        self.best_config: str | None = None

    def run(self, x: torch.Tensor, n: int, seq_idx: torch.Tensor | None = None, z: torch.Tensor | None = None) -> Any:
        if len(self.configs) > 1:  # "autotune": the choice depends on the key n
            self.benchmarked.append(n)
            config = self.configs[n % len(self.configs)]
        else:
            config = self.configs[0]
            if (str(config), n) in self.too_big:
                raise OutOfResources(1 << 20, 1 << 18, "shared memory")
        self.best_config = config
        self.ran.append((config, n, knobs.language.fp32_default))
        return config


@pytest.fixture(autouse=True)
def _clean_record():
    saved = dict(mamba_triton.BASELINE_CONFIGS)
    mamba_triton.BASELINE_CONFIGS.clear()
    yield
    mamba_triton.BASELINE_CONFIGS.clear()
    mamba_triton.BASELINE_CONFIGS.update(saved)


@pytest.fixture
def recording(monkeypatch) -> list[str]:
    """A recording run (``PARITY_RECORD_BASELINE=1``) whose records are collected here, not written."""
    recorded: list[str] = []
    monkeypatch.setenv("PARITY_RECORD_BASELINE", "1")
    monkeypatch.setattr(mamba_triton, "_record", lambda label, config: recorded.append(label))
    return recorded


def test_without_a_record_the_first_config_runs_for_every_key():
    """No autotune storm where nothing is recorded: the kernel's first config, for every key, said so."""
    tuner = FakeTuner(["a", "b", "c"])
    mamba_triton._pin(tuner)
    bf16 = torch.zeros(2, dtype=torch.bfloat16)
    assert [tuner.run(bf16, n) for n in (1, 2)] == ["a", "a"]
    assert tuner.benchmarked == []
    assert "first config: none recorded" in mamba_triton.BASELINE_CONFIGS["fake_kernel[bfloat16]"]


def test_autotunes_once_per_dtypes_then_pins(recording):
    tuner = FakeTuner(["a", "b", "c"])
    mamba_triton._pin(tuner)
    bf16, fp32 = torch.zeros(2, dtype=torch.bfloat16), torch.zeros(2)
    assert tuner.run(bf16, 1) == "b"  # the first key autotunes
    assert tuner.run(bf16, 2) == "b"  # a new key reuses that choice: no benchmark
    assert tuner.run(fp32, 2) == "c"  # other dtypes autotune once for themselves
    assert tuner.run(fp32, 0) == "c"
    assert tuner.benchmarked == [1, 2]
    assert mamba_triton.BASELINE_CONFIGS == {"fake_kernel[bfloat16]": "b", "fake_kernel[float32]": "c"}
    assert recording == ["fake_kernel[bfloat16]", "fake_kernel[float32]"]


def test_optional_and_integer_arguments_do_not_re_autotune(recording):
    """The key is the set of float dtypes: a problem with more optional inputs (seq_idx int32, a second bf16
    tensor) runs with the choice already made (seen on the H200: keying on every argument re-autotuned)."""
    tuner = FakeTuner(["a", "b", "c"])
    tuner.arg_names = ["x", "n", "seq_idx", "z"]
    mamba_triton._pin(tuner)
    bf16 = torch.zeros(2, dtype=torch.bfloat16)
    tuner.run(bf16, 1)
    tuner.run(bf16, 2, torch.zeros(2, dtype=torch.int32), torch.zeros(2, dtype=torch.bfloat16))
    assert tuner.benchmarked == [1]


def test_recorded_choice_runs_the_tuners_own_config_and_skips_autotuning(monkeypatch):
    """The record names one of the autotuner's configs; that very object runs, with its pre-hook (mamba-ssm's
    configs zero their atomic accumulators in one: a copy rebuilt from the record would sum into garbage)."""
    from triton import Config

    def zero(nargs: dict[str, Any]) -> None:
        nargs["x"].zero_()

    configs = [Config({"BLOCK": 32}, num_warps=4, pre_hook=zero), Config({"BLOCK": 64}, num_warps=4, pre_hook=zero)]
    record = {"kwargs": {"BLOCK": 64}, "num_warps": 4, "num_stages": 3, "num_ctas": 1, "maxnreg": None}
    monkeypatch.setattr(mamba_triton, "_recorded", lambda: {"fake_kernel[float32]": record})
    tuner = FakeTuner(configs)
    mamba_triton._pin(tuner)
    assert tuner.run(torch.zeros(2), 1) is configs[1]
    assert tuner.benchmarked == []
    assert "recorded" in mamba_triton.BASELINE_CONFIGS["fake_kernel[float32]"]


def test_recorded_choice_that_is_not_one_of_the_tuners_configs_autotunes(monkeypatch, recording):
    from triton import Config

    configs = [Config({"BLOCK": 32}, num_warps=4), Config({"BLOCK": 64}, num_warps=4)]
    record = {"kwargs": {"BLOCK": 128}, "num_warps": 4, "num_stages": 3, "num_ctas": 1, "maxnreg": None}
    monkeypatch.setattr(mamba_triton, "_recorded", lambda: {"fake_kernel[float32]": record})
    tuner = FakeTuner(configs)
    mamba_triton._pin(tuner)
    tuner.run(torch.zeros(2), 1)
    assert tuner.benchmarked == [1]


def test_fp32_dots_in_ieee_half_precision_untouched():
    tuner = FakeTuner(["a", "b"])
    mamba_triton._pin(tuner)
    tuner.run(torch.zeros(2), 0)
    tuner.run(torch.zeros(2, dtype=torch.float16), 0)
    assert [r[2] for r in tuner.ran] == ["ieee", None]
    assert knobs.language.fp32_default is None  # restored after the call


def test_config_that_does_not_fit_runs_the_largest_smaller_one_that_does(recording):
    """Out of shared memory at a shape: the next smaller configs are tried one by one without benchmarking, the
    one that fits is remembered and said; only when none fits is the key autotuned."""
    from triton import Config

    big, mid, small, tiny = (Config({"BLOCK_SIZE_M": m}, num_stages=2) for m in (128, 64, 32, 16))
    tuner = FakeTuner([big, mid, small, tiny], too_big={(str(big), 3), (str(mid), 3), (str(big), 5)})
    tuner.configs = [big, mid, small, tiny]
    mamba_triton._pin(tuner)
    x = torch.zeros(2, dtype=torch.bfloat16)
    assert tuner.run(x, 0) is big  # autotuned once (0 % 4 -> big), then pinned
    assert tuner.run(x, 3) is small  # big and mid out of resources: small, no benchmarking
    assert tuner.run(x, 5) is small  # remembered: tried first after big
    assert tuner.benchmarked == [0]
    assert "pinned config out of resources" in mamba_triton.BASELINE_CONFIGS["fake_kernel[bfloat16] (other shapes)"]


def test_a_shape_no_config_fits_is_autotuned(recording):
    tuner = FakeTuner(["a", "b"], too_big={("b", 3)})
    mamba_triton._pin(tuner)
    x = torch.zeros(2, dtype=torch.bfloat16)
    assert tuner.run(x, 1) == "b"
    assert tuner.run(x, 3) == "b"  # "b" raised, no smaller config: the key was autotuned (3 % 2 -> "b")
    assert tuner.benchmarked == [1, 3]
    assert any("no config fits" in v for v in mamba_triton.BASELINE_CONFIGS.values())


def test_wrapped_run_passes_keyword_arguments():
    tuner = FakeTuner(["a"])
    mamba_triton._pin(tuner)
    assert tuner.run(x=torch.zeros(1), n=0) == "a"


def test_every_autotuned_kernel_the_combined_op_launches_is_pinned():
    """The combined op's wrapper (ssd_combined) launches kernels defined in mamba-ssm's other Triton modules:
    every autotuner of every loaded module must be pinned, not only those of the module asked for (an unpinned
    one re-autotunes on every new shape). Run in a fresh process without the interpreter (pinning is GPU-only)."""
    import os
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from triton.runtime.autotuner import Autotuner, Heuristics\n"
        "from reference import mamba_triton\n"
        "mamba_triton._module('ssd_combined')\n"
        "found = []\n"
        "for name, module in list(sys.modules.items()):\n"
        "    if name.startswith('mamba_ssm.ops.triton.'):\n"
        "        for value in vars(module).values():\n"
        "            while isinstance(value, Heuristics):\n"
        "                value = value.fn\n"
        "            if isinstance(value, Autotuner):\n"
        "                found.append((value.base_fn.__name__, getattr(value, 'parity_pinned', False)))\n"
        "print(len(found), sorted({n for n, pinned in found if not pinned}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        cwd=mamba_triton.AUTOTUNE_RECORD.parents[1],
    ).stdout.split(maxsplit=1)
    assert int(out[0]) >= 10, out  # chunk_cumsum, chunk_state, state_passing, bmm, chunk_scan, ... fwd and bwd
    assert out[1].strip() == "[]", f"autotuned kernels left unpinned: {out[1]}"


def test_a_dtype_set_the_record_lacks_runs_the_kernels_choice_for_another(monkeypatch):
    """No autotune storm for a dtype set the record has not seen (fp32 runs when only bf16 was recorded): the
    kernel runs the choice recorded for its other dtype set, and says so."""
    from triton import Config

    configs = [Config({"BLOCK": 32}, num_warps=4), Config({"BLOCK": 64}, num_warps=4)]
    record = {"kwargs": {"BLOCK": 64}, "num_warps": 4, "num_stages": 3, "num_ctas": 1, "maxnreg": None}
    monkeypatch.setattr(mamba_triton, "_recorded", lambda: {"fake_kernel[bfloat16,float32]": record})
    tuner = FakeTuner(configs)
    mamba_triton._pin(tuner)
    assert tuner.run(torch.zeros(2), 1) is configs[1]
    assert tuner.benchmarked == []
    assert mamba_triton.BASELINE_CONFIGS["fake_kernel[float32]"].endswith("as fake_kernel[bfloat16,float32])")


def test_a_recording_run_autotunes_a_dtype_set_the_record_lacks(monkeypatch, recording):
    """``PARITY_RECORD_BASELINE=1`` fills the record in: the missing dtype set autotunes and is recorded, rather
    than borrowing the other dtype set's choice."""
    from triton import Config

    configs = [Config({"BLOCK": 32}, num_warps=4), Config({"BLOCK": 64}, num_warps=4)]
    record = {"kwargs": {"BLOCK": 64}, "num_warps": 4, "num_stages": 3, "num_ctas": 1, "maxnreg": None}
    monkeypatch.setattr(mamba_triton, "_recorded", lambda: {"fake_kernel[bfloat16,float32]": record})
    tuner = FakeTuner(configs)
    mamba_triton._pin(tuner)
    assert tuner.run(torch.zeros(2), 2) is configs[0]
    assert tuner.benchmarked == [2]
    assert recording == ["fake_kernel[float32]"]


def test_a_speed_comparison_runs_mamba_ssm_as_shipped(monkeypatch):
    """Benchmarks call autotune_as_shipped(): no kernel is pinned afterwards; once pinned, it is refused."""
    monkeypatch.setattr(mamba_triton, "_AS_SHIPPED", False)
    monkeypatch.setattr(mamba_triton, "_PINNED_MODULES", set())
    mamba_triton.autotune_as_shipped()
    assert mamba_triton._AS_SHIPPED
    monkeypatch.setattr(mamba_triton, "_PINNED_MODULES", {"mamba_ssm.ops.triton.ssd_combined"})
    with pytest.raises(RuntimeError, match="already pinned"):
        mamba_triton.autotune_as_shipped()
