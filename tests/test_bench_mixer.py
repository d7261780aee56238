"""bench/mixer.py's rounds: each backend timed several times, the backends alternating, the table's values the
medians, and each round's speedup paired within its round (a host-bound step's time moves between runs)."""

from __future__ import annotations

import itertools

import pytest
import torch

from tests import bench_scripts


@pytest.mark.cpu
def test_the_rounds_alternate_the_backends_and_the_table_shows_their_medians(monkeypatch):
    mixer = bench_scripts.load("mixer")
    order: list[str] = []
    times = {"mamba": itertools.count(10.0, 1.0), "helion": itertools.count(5.0, 2.0)}  # 10, 11, ... / 5, 7, ...

    def step(backend, inputs):
        return (lambda: order.append(f"{backend} fwd"), lambda: order.append(f"{backend} fwd_bwd"))

    def timed(fn, dev):
        fn()
        return next(times[order[-1].split()[0]])

    def first_round(backend, inputs, dev):
        measured = {key: next(times[backend]) for key in ("fwd_ms", "fwd_bwd_ms")}
        return measured | {"fwd_host_ms": None, "fwd_bwd_host_ms": None, "_values": {}}  # no host time on the CPU

    monkeypatch.setattr(mixer, "mixer_inputs", lambda shape, dtype, dev: {"group_size": 8})
    monkeypatch.setattr(mixer, "mixer_backends", lambda configs: {"mamba": "mamba", "helion": "helion"})
    monkeypatch.setattr(mixer, "mixer_step", step)
    monkeypatch.setattr(mixer, "timed", timed)
    monkeypatch.setattr(mixer, "bench_mixer_backend", first_round)
    out = mixer.bench_mixer({}, torch.bfloat16, torch.device("cpu"), {"ssd": None, "norm": None}, rounds=3)
    assert order == ["mamba fwd", "mamba fwd_bwd", "helion fwd", "helion fwd_bwd"] * 2
    mamba, helion = out["backends"]["mamba"], out["backends"]["helion"]
    assert mamba["rounds"]["fwd_bwd_ms"] == [11.0, 13.0, 15.0] and helion["rounds"]["fwd_bwd_ms"] == [7.0, 11.0, 15.0]
    assert (mamba["fwd_bwd_ms"], helion["fwd_bwd_ms"]) == (13.0, 11.0)  # medians
    assert out["speedup_fwd_bwd"] == pytest.approx(13.0 / 11.0)
    assert out["speedup_fwd_bwd_rounds"] == pytest.approx([11 / 7, 13 / 11, 1.0])
    assert mamba["rounds"]["fwd_bwd_host_ms"] == [None] * 3 and mamba["fwd_bwd_host_ms"] is None
