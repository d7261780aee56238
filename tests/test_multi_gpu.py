"""Several GPUs on one host (CPU only, torch.cuda monkeypatched): worker K of pytest-xdist or of ``--workers`` runs
on GPU K mod the visible GPUs, its oracle/baseline cache takes its share of that GPU's memory among the workers on
that GPU, the large-problem slots are per GPU, and N promoters writing into one store at once lose nothing."""

from __future__ import annotations

import json
import multiprocessing
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from parity import device, lookup, runner, workers
from parity.lookup import Key
from parity.store import Store

GIB = 1 << 30


@pytest.fixture()
def gpus(monkeypatch):
    """A host with ``n`` fake GPUs (``gpus(n)``): the devices set and the memory of each (80 GiB + index GiB)."""
    calls: list[int] = []

    def install(n: int) -> list[int]:
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
        monkeypatch.setattr(torch.cuda, "set_device", lambda index: calls.append(index))
        monkeypatch.setattr(
            torch.cuda, "get_device_properties", lambda index: SimpleNamespace(total_memory=(80 + index) * GIB)
        )
        monkeypatch.setattr(device, "_pinned", [None])
        return calls

    yield install


@pytest.fixture()
def shared_limit(monkeypatch):
    """The cache limit share_device sets, restored after the test."""
    monkeypatch.setattr(runner, "_SHARED_GPU_BYTES", runner._SHARED_GPU_BYTES)
    return lambda: runner._SHARED_GPU_BYTES


@pytest.mark.parametrize(
    ("worker", "number"), [("gw0", 0), ("gw7", 7), ("gw12", 12), (3, 3), (None, None), ("master", None), ("", None)]
)
def test_worker_numbers_of_xdist_and_of_the_pool(worker, number):
    assert device.worker_number(worker) == number


def test_workers_go_round_robin_over_the_gpus():
    assert [device.gpu_for_worker(k, 8) for k in range(10)] == [0, 1, 2, 3, 4, 5, 6, 7, 0, 1]
    assert [device.gpu_for_worker(k, 3) for k in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert [device.gpu_for_worker(k, 1) for k in range(4)] == [0, 0, 0, 0]
    assert device.gpu_for_worker(5, 0) == 0  # no GPU counted: stay on the default


def test_workers_per_gpu_count_what_round_robin_puts_there():
    for total in range(1, 20):
        for n in range(1, 9):
            placed = [device.gpu_for_worker(k, n) for k in range(total)]
            for gpu in sorted(set(placed)):
                assert device.workers_on_gpu(total, n, gpu) == placed.count(gpu)
    assert [device.workers_on_gpu(15, 2, g) for g in (0, 1)] == [8, 7]
    assert device.workers_on_gpu(15, 1, 0) == 15
    assert device.workers_on_gpu(2, 8, 5) == 1  # the asking process counts itself


def test_pinning_sets_each_xdist_worker_on_its_gpu(gpus):
    calls = gpus(4)
    assert [device.pin_worker(f"gw{k}") for k in range(6)] == [0, 1, 2, 3, 0, 1]
    assert calls == [0, 1, 2, 3, 0, 1]
    assert device.current_gpu() == 1


def test_one_gpu_sets_nothing(gpus):
    """With one GPU a worker is not pinned at all: it stays on GPU 0 as before (no set_device, no CUDA init)."""
    calls = gpus(1)
    assert [device.pin_worker(f"gw{k}") for k in range(3)] == [0, 0, 0]
    assert calls == [] and device._pinned == [None] and device.current_gpu() == 0


def test_the_controller_is_not_pinned_elsewhere(gpus):
    calls = gpus(4)
    assert device.pin_worker(None) == 0 and calls == [0]


def test_each_worker_shares_its_own_gpu(gpus, shared_limit):
    """15 workers on 2 GPUs: GPU 0 holds 8 of them, GPU 1 seven; each cache takes its share of its GPU."""
    gpus(2)
    device.pin_worker("gw0")
    workers.share_device(15)
    assert shared_limit() == int(workers._CACHE_SHARE * 80 * GIB / 8)
    device.pin_worker("gw1")
    workers.share_device(15)
    assert shared_limit() == int(workers._CACHE_SHARE * 81 * GIB / 7)


def test_one_gpu_shares_as_before(gpus, shared_limit, monkeypatch):
    gpus(1)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    device.pin_worker("gw3")
    workers.share_device(15)
    assert shared_limit() == int(workers._CACHE_SHARE * 80 * GIB / 15)


def test_pool_workers_pin_before_sharing(gpus, shared_limit, monkeypatch):
    """``parity check --workers N``: the pool's initializer pins worker K, then sizes its cache on that GPU."""
    calls = gpus(3)
    monkeypatch.setattr(device, "configure", lambda name: None)
    monkeypatch.setattr("parity.registry.load", lambda: {})
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
    workers._start("cuda", None, 7, 2)
    assert calls == [2] and device.current_gpu() == 2
    assert shared_limit() == int(workers._CACHE_SHARE * 82 * GIB / 2)  # workers 2 and 5 are on GPU 2


def test_xdist_workers_pin_in_pytest_configure(gpus, monkeypatch):
    """The plugin pins an xdist worker by its worker id before sharing the device; the controller is not pinned."""
    from parity import pytest_plugin

    calls = gpus(2)
    shared: list[int] = []
    monkeypatch.setattr(pytest_plugin, "_cuda_available", lambda: True)
    monkeypatch.setattr(device, "configure", lambda name: None)
    monkeypatch.setattr(workers, "share_device", lambda n: shared.append((device.current_gpu(), n)))
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "4")
    options = {"--parity-device": "cuda", "parity_report": None, "--parity-durations": None}

    def config(**extra):
        return SimpleNamespace(
            getoption=lambda name, default=None: options.get(name, default),
            getini=lambda name: "",
            addinivalue_line=lambda *args: None,
            option=SimpleNamespace(),
            **extra,
        )

    pytest_plugin.pytest_configure(config(workerinput={"workerid": "gw3"}))
    assert calls == [1] and shared == [(1, 4)]
    monkeypatch.setattr(device, "_pinned", [None])
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    pytest_plugin.pytest_configure(config())
    assert calls == [1] and shared[-1] == (0, 4)
    pytest_plugin._IN_WORKER[0] = False


def test_slot_folders_are_per_gpu(gpus, monkeypatch, tmp_path):
    gpus(2)
    monkeypatch.setattr(device.tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert device.slot_folder(0) != device.slot_folder(1)
    assert device.slot_folder(0).parent == device.slot_folder(1).parent
    device.pin_worker("gw1")
    assert device.slot_folder() == device.slot_folder(1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6,3")  # visible GPU 1 is the host's GPU 3
    assert device.slot_folder(1).name == "gpu3" and device.slot_folder(0).name == "gpu6"


def test_large_slots_are_counted_per_gpu(gpus, monkeypatch, tmp_path):
    """LARGE_SLOTS per GPU: GPU 0's slots all taken does not hold up a large problem on GPU 1."""
    gpus(2)
    monkeypatch.setattr(device, "LARGE_SLOTS", 2)
    monkeypatch.setattr(device.tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    entered = {0: threading.Event(), 1: threading.Event()}

    def third(gpu: int) -> None:
        with device.large_problem_slot(gpu=gpu):
            entered[gpu].set()

    with device.large_problem_slot(gpu=0), device.large_problem_slot(gpu=0):
        beside = threading.Thread(target=third, args=(1,))
        beside.start()
        assert entered[1].wait(5), "GPU 1's large problem waited on GPU 0's slots"
        waiting = threading.Thread(target=third, args=(0,))
        waiting.start()
        assert not entered[0].wait(0.6), "a third large problem ran beside two on GPU 0"
    assert entered[0].wait(5)
    beside.join()
    waiting.join()


def _promote(root: str, module_dir: str, op: str, bucket: str) -> None:
    sys.path.insert(0, module_dir)
    Store(root).put(Key("nvidia-h200-sm90", op, "toykernel:kernel", "bfloat16", bucket), {"bucket": bucket}, {})


def _without_dates(path: Path) -> str:
    data = json.loads(path.read_text())
    for entry in data["entries"]:
        entry["date"] = "-"
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def test_concurrent_promoters_keep_every_entry(tmp_path, monkeypatch):
    """8 spawned processes promote at once into one store, 4 buckets of each of 2 ops: one file per device and op,
    every entry there, valid JSON with sorted keys and entries, no temporary file left; the same entries promoted
    one by one in another order give the same bytes (dates aside)."""
    module = tmp_path / "toykernel.py"
    module.write_text("def kernel(**kw):\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    lookup.clear_caches()
    jobs = [(op, f"b{i}") for op in ("toy_a", "toy_b") for i in range(4)]
    root = tmp_path / "configs"
    context = multiprocessing.get_context("spawn")
    procs = [context.Process(target=_promote, args=(str(root), str(tmp_path), op, b)) for op, b in jobs]
    for process in procs:
        process.start()
    for process in procs:
        process.join(120)
        assert process.exitcode == 0
    store = Store(root)
    assert store.files() == [("nvidia-h200-sm90", "toy_a"), ("nvidia-h200-sm90", "toy_b")]
    for op in ("toy_a", "toy_b"):
        path = store.path("nvidia-h200-sm90", op)
        text = path.read_text()
        data = json.loads(text)
        assert [e["bucket"] for e in data["entries"]] == ["b0", "b1", "b2", "b3"]
        assert text == json.dumps(data, indent=1, sort_keys=True) + "\n"
    device_dir = root / "nvidia-h200-sm90"
    assert sorted(p.name for p in device_dir.iterdir()) == ["toy_a.json", "toy_a.lock", "toy_b.json", "toy_b.lock"]
    again = Store(tmp_path / "again")
    for op, bucket in reversed(jobs):
        _promote(str(again.root), str(tmp_path), op, bucket)
    for op in ("toy_a", "toy_b"):
        first, second = store.path("nvidia-h200-sm90", op), again.path("nvidia-h200-sm90", op)
        assert _without_dates(first) == _without_dates(second)
    lookup.clear_caches()


class _Inline:
    """A stand-in for a spawned process: runs its target at once, here."""

    def __init__(self, target, args, started):
        started.append(args)
        target(*args)
        self.exitcode = 0

    def join(self) -> None:
        pass


@pytest.mark.cpu
def test_tune_deals_kernels_to_one_process_per_gpu_then_assembles(tmp_path, monkeypatch):
    """``parity tune`` on 2 GPUs: fwd and the partial sums searched by GPU 0's process, bwd by GPU 1's, each writing
    its records; the parent reads them back, searches the partial sums again (GPU 0 searched them on the partials of
    the default backward, and the tuned one has another row-group count), and judges the assembled config."""
    from test_tune import NORM_SPEC, SeedSearch, records, tuner

    from parity import registry, tune

    started: list[tuple] = []
    monkeypatch.setattr(tune, "spawn", lambda target, args: _Inline(target, args, started))
    monkeypatch.setattr(registry, "get", lambda name: NORM_SPEC)
    search = SeedSearch()
    t = tuner(tmp_path, search, gpus=2)
    outcome = t.run()
    assert outcome.status == "done", t.log
    assert [(gpu, names) for gpu, _, _, names in started] == [(0, ["fwd", "bwd_sum"]), (1, ["bwd"])]
    assert search.seen == [
        "layer_norm_fwd_kernel",
        "partials_sum_kernel",
        "layer_norm_bwd_kernel",
        "partials_sum_kernel",
    ]
    assert any(
        line.endswith("bwd_sum: its arguments changed with another kernel's tuned config: tuned again")
        for line in t.log
    )
    assert {name: r["status"] for name, r in records(t).items()} == dict.fromkeys(("fwd", "bwd", "bwd_sum"), "tuned")
    assert "GPU 0 tunes fwd, bwd_sum" in " ".join(t.log) and "GPU 1 tunes bwd" in " ".join(t.log)
    again = tuner(tmp_path, SeedSearch(), gpus=2)
    assert again.run().status == "done" and len(started) == 2  # a re-run finds all current: nothing spawned


@pytest.mark.cpu
def test_tune_processes_get_what_pickles(tmp_path, monkeypatch):
    """What a spawned tuning process receives pickles (the spec goes by name), with the time left, not the limit."""
    import pickle

    from test_tune import NORM_IMPL, NORM_SPEC, TOLS

    from parity import tune

    sent: list[tuple] = []

    class Done:
        exitcode = 0

        def join(self) -> None:
            pass

    monkeypatch.setattr(tune, "spawn", lambda target, args: sent.append((target, args)) or Done())
    t = tune.Tuner(NORM_SPEC, NORM_IMPL, NORM_SPEC.training_problems[0], torch.bfloat16, "cuda", TOLS, tmp_path)
    t = tune.Tuner(**{**t.__dict__, "time_limit": 600.0, "gpus": 2})
    tune.spread(t, [(0, ["fwd"]), (1, ["bwd"])])
    assert [(target, args[0], args[1], args[3]) for target, args in sent] == [
        (tune.tune_on_gpu, 0, "layernorm_gated", ["fwd"]),
        (tune.tune_on_gpu, 1, "layernorm_gated", ["bwd"]),
    ]
    for _, args in sent:
        fields = pickle.loads(pickle.dumps(args))[2]
        assert fields["search"] is tune.helion_search and fields["device"] == "cuda"
        assert 0 < fields["time_limit"] <= 600.0 and not {"spec", "log", "gpus"} & set(fields)
