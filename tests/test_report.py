"""``parity report``: the HTML of the committed CPU run and H200 results parses, carries every plot, and shows the
numbers of the JSON it came from; two files give a diff; bad input is one line, exit 2, nothing written; the run
commands and the pytest plugin write the report themselves."""

from __future__ import annotations

import base64
import contextlib
import copy
import io
import json
import subprocess
import time
from collections import defaultdict
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch

from parity import results
from parity.cli import main
from tests import bench_scripts

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]
README_INPUTS = [
    "bench/results/cpu-parity-check.json",
    "bench/results/h200-run8/gate-ssd.json",
    "bench/results/h200-run1/bench.json",
    "bench/results/h200-run3/mixer.json",
    "bench/results/h200-run8/ssd-bwd-bf16.json",
]
VOID = {"meta", "img", "br", "hr", "input", "link"}


class Page(HTMLParser):
    """Every element with its attributes and text, checking that tags nest and close."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.elements: list[dict] = []
        self.open: list[dict] = []
        self.feed(text)
        self.close()
        assert not self.stack, f"unclosed tags: {self.stack}"

    def handle_starttag(self, tag: str, attrs: list) -> None:
        element = {"tag": tag, **{k: v for k, v in attrs}, "text": ""}
        self.elements.append(element)
        if tag not in VOID:
            self.stack.append(tag)
            self.open.append(element)

    def handle_endtag(self, tag: str) -> None:
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes {self.stack[-1:]}"
        self.stack.pop()
        self.open.pop()

    def handle_data(self, data: str) -> None:
        if self.open:
            self.open[-1]["text"] += data

    def having(self, attr: str) -> list[dict]:
        return [e for e in self.elements if attr in e]


def run(*args: str) -> subprocess.CompletedProcess:
    """``parity ARGS`` in this process."""
    stderr, stdout = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(stdout):
        code = main(list(args))
    return subprocess.CompletedProcess(args, code, stdout.getvalue(), stderr.getvalue())


@pytest.fixture(scope="module")
def readme_report(tmp_path_factory) -> tuple[Path, Page, str]:
    """The README's report command, once for the module."""
    out = tmp_path_factory.mktemp("report")
    proc = run("report", *(str(ROOT / p) for p in README_INPUTS), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    text = (out / "index.html").read_text()
    return out, Page(text), text


def _raw(path: str):
    return json.loads((ROOT / path).read_text())


def test_each_committed_file_is_recognized_by_its_structure():
    kinds = [results.load(ROOT / p).kind for p in README_INPUTS]
    assert kinds == ["check", "gate-speed", "bench", "mixer", "precision"]


@pytest.mark.parametrize("path", README_INPUTS[1:])
def test_a_file_with_the_format_marker_the_writers_now_add_reads_as_its_older_twin(path):
    old = results.load(ROOT / path)
    body = {"results": old.data["results"]} if old.kind == "gate-speed" else old.data
    new = results.parse(json.loads(json.dumps(results.stamped(old.kind, body))), "new.json")
    assert (new.kind, new.passed, new.meta, len(new.cases)) == (old.kind, old.passed, old.meta, len(old.cases))


def test_the_page_is_self_contained_and_carries_every_plot(readme_report):
    _, page, text = readme_report
    assert "http://" not in text and "https://" not in text
    plots = {e["data-plot"]: e for e in page.having("data-plot")}
    ops = {c["op"] for c in _raw(README_INPUTS[0])["cases"]}
    expected = {f"trend:r0:{op}" for op in ops} | {"bench:r2:nemotron", "mixer:r3", "trend:r4:ssd_combined"}
    assert set(plots) == expected
    for element in plots.values():
        assert element["tag"] == "img"
        head, data = element["src"].split(",", 1)
        assert head == "data:image/png;base64"
        assert base64.b64decode(data)[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_matrix_shows_the_worst_err_over_bound_of_each_cell_of_the_json(readme_report):
    _, page, _ = readme_report
    worst: dict[tuple, float] = defaultdict(float)
    for case in _raw(README_INPUTS[0])["cases"]:
        for q in case["quantities"]:
            key = (case["op"], case["impl"], case["dtype"], q["name"])
            worst[key] = max(worst[key], q["candidate"]["max_abs"] / q["bound"])
    shown = {}
    for cell in page.having("data-quantity"):
        key = (cell["data-op"], cell["data-impl"], cell["data-dtype"], cell["data-quantity"])
        if key in worst:  # the precision sweep's ssd_combined cells are its own implementations
            shown[key] = cell
    assert set(shown) == set(worst)
    for key, cell in shown.items():
        assert float(cell["data-ratio"]) == pytest.approx(worst[key], rel=1e-12)
        assert cell["text"] == format(worst[key], ".2g")


def test_the_benchmark_gate_and_mixer_numbers_are_the_json_numbers(readme_report):
    _, page, _ = readme_report
    bench = {e["data-bench"]: float(e["data-ms"]) for e in page.having("data-bench")}
    rows = _raw(README_INPUTS[2])["rows"]
    assert bench == {f"{r['op']}|{r['shape']}|{i}": t["fwd_ms"] for r in rows for i, t in r["impls"].items()}
    targets = {e["data-target"]: float(e["data-value"]) for e in page.having("data-target")}
    assert targets == {k: v["value"] for k, v in _raw(README_INPUTS[3])["targets"].items()}
    gate = _raw(README_INPUTS[1])[0]
    assert [int(e["data-cases"]) for e in page.having("data-cases")] == [gate["cases"]]
    timing = gate["timing"][0]
    speedups = [float(e["data-speedup"]) for e in page.having("data-speedup")]
    assert speedups == [pytest.approx(timing["baseline_ms"] / timing["candidate_ms"])]


def test_the_summary_is_short_and_names_every_input(readme_report):
    out, _, _ = readme_report
    summary = (out / "summary.md").read_text()
    assert len(summary.splitlines()) < 60
    for path in README_INPUTS:
        assert f"`{ROOT / path}`" in summary
    cases = _raw(README_INPUTS[0])["cases"]
    failed = sum(not c["passed"] for c in cases)
    assert f"{len(cases)} cases over {len({c['op'] for c in cases})} ops, {failed} failed" in summary


def _check(cases: list[dict]) -> dict:
    return results.stamped("check", {"meta": {"device": "cpu"}, "cases": cases})


def test_two_files_give_a_diff_with_the_cell_that_grew_first(tmp_path):
    cases = [c for c in _raw(README_INPUTS[0])["cases"] if c["op"] == "chunk_cumsum"]
    after = copy.deepcopy(cases)
    grown = next(c for c in after if c["impl"] == "helion" and c["dtype"] == "float32")
    grown["quantities"][0]["candidate"]["max_abs"] = 3 * grown["quantities"][0]["bound"]
    grown["quantities"][0]["passed"] = grown["passed"] = False
    (tmp_path / "before.json").write_text(json.dumps(_check(cases)))
    (tmp_path / "after.json").write_text(json.dumps(_check(after)))
    proc = run("report", str(tmp_path / "before.json"), str(tmp_path / "after.json"), "--out", str(tmp_path / "r"))
    assert proc.returncode == 1  # the after file fails
    page = Page((tmp_path / "r" / "index.html").read_text())
    rows = page.having("data-diff")
    name = grown["quantities"][0]["name"]
    assert rows[0]["data-diff"] == f"chunk_cumsum|helion|float32|{name}"
    assert float(rows[0]["data-after"]) == pytest.approx(3.0)
    assert "diff:r1" in {e["data-plot"] for e in page.having("data-plot")}
    summary = (tmp_path / "r" / "summary.md").read_text()
    assert f"chunk_cumsum helion float32 {name}:" in summary and "FAIL `parity check --op chunk_cumsum" in summary


def test_a_gate_shows_its_evidence_and_its_cases(tmp_path):
    cases = [c for c in _raw(README_INPUTS[0])["cases"] if c["op"] == "state_passing" and c["impl"] == "helion"]
    determinism = {"problem": cases[0]["problem"], "dtype": "float32", "reruns": 2, "bitwise_identical": True}
    evidence = {
        "cases": len(cases),
        "problems": sorted({json.dumps(c["problem"], sort_keys=True) for c in cases}),
        "seeds": sorted({c["seed"] for c in cases}),
        "dtypes": ["float16", "float32"],
        "determinism": [{**determinism, "max_spread": 0.0, "ok": True}],
        "timing": [
            {"problem": {"seqlen": 64}, "dtype": "float32", "candidate_ms": 2.0, "baseline_ms": 3.0},
            {"problem": {"seqlen": 64}, "dtype": "float16", "error": "RuntimeError: no allocator was set"},
        ],
    }
    meta = {"device": "cuda", "gpu": "NVIDIA H200", "torch": "2.11", "triton": "3.6.0", "helion": "1.5.0"}
    gate = {"meta": meta, "op": "state_passing", "impl": "helion@cfg.json", "config": {}, "passed": True}
    (tmp_path / "gate.json").write_text(
        json.dumps(results.stamped("gate", {**gate, "evidence": evidence, "cases": cases}))
    )
    assert run("report", str(tmp_path / "gate.json"), "--out", str(tmp_path / "r")).returncode == 0
    text = (tmp_path / "r" / "index.html").read_text()
    page = Page(text)
    assert [int(e["data-cases"]) for e in page.having("data-cases")] == [len(cases)]
    assert [e["data-speedup"] for e in page.having("data-speedup")] == ["1.5", "None"]
    assert "FAILED: RuntimeError: no allocator was set" in text  # a timing that raised shows what it raised
    assert "torch 2.11, triton 3.6.0, helion 1.5.0" in text and "NVIDIA H200" in text
    assert {e["data-plot"] for e in page.having("data-plot")} == {"trend:r0:state_passing"}
    assert {e["data-impl"] for e in page.having("data-quantity")} == {"helion"}


def test_a_tuning_run_plots_time_per_config_with_its_verdicts(tmp_path):
    trials = [
        {"config": {"block_sizes": [b]}, "ms": ms, "error": None, "passed": ok, "failure": None if ok else "FAIL x"}
        for b, ms, ok in ((16, 0.5, True), (32, 0.3, False), (64, 0.9, None))
    ]
    trials.append({"config": {"block_sizes": [128]}, "ms": None, "error": "OutOfResources", "passed": None})
    (tmp_path / "tune.json").write_text(json.dumps(results.stamped("tune", {"meta": {}, "trials": trials})))
    assert run("report", str(tmp_path / "tune.json"), "--out", str(tmp_path / "r")).returncode == 0
    page = Page((tmp_path / "r" / "index.html").read_text())
    assert [e["data-plot"] for e in page.having("data-plot")] == ["tune:r0"]
    assert [e["data-trial-ms"] for e in page.having("data-trial-ms")] == ["0.3", "0.5", "0.9", "None"]


class Event:
    """A profiler event as bench/kernel_times.py reads it: name, device type, device interval."""

    def __init__(self, name: str, us: float, cuda: bool = True) -> None:
        self.name, self.us = name, us
        self.device_type = torch.autograd.DeviceType.CUDA if cuda else torch.autograd.DeviceType.CPU
        self.time_range = self

    def elapsed_us(self) -> float:
        return self.us


def test_kernel_times_sums_per_kernel_and_iteration_and_its_report_shows_the_numbers(tmp_path):
    """Two iterations of a forward (scan, norm) and of a forward+backward (the same, a recomputed scan and a
    backward kernel); CPU-side events are not kernels. The backward is the difference, name by name."""
    kt = bench_scripts.load("kernel_times")
    fwd = kt.kernel_table([Event("scan", 10), Event("norm", 4), Event("scan", 12), Event("norm", 6)], 2)
    assert fwd == {"scan": {"calls": 1.0, "us": 11.0}, "norm": {"calls": 1.0, "us": 5.0}}
    both = kt.kernel_table(
        [Event(n, us) for n, us in (("scan", 11), ("norm", 5), ("scan", 13), ("dx", 30))] * 2
        + [Event("aten::mm", 99, cuda=False)],
        2,
    )
    bwd = kt.difference(both, fwd)
    assert bwd == {"scan": {"calls": 1.0, "us": 13.0}, "dx": {"calls": 1.0, "us": 30.0}}  # norm: no launch left
    backends = {"helion": {"fwd": fwd, "bwd": bwd, "fwd_us": kt.total_us(fwd), "bwd_us": kt.total_us(bwd)}}
    backends["helion"]["fwd+bwd_host"] = {"host_us": 70.0, "wall_us": 75.0}
    path = tmp_path / "kernels.json"
    path.write_text(json.dumps(results.stamped("kernel-times", {"meta": {"gpu": "NVIDIA H200"}, "backends": backends})))
    assert run("report", str(path), "--out", str(tmp_path / "r")).returncode == 0
    html = (tmp_path / "r" / "index.html").read_text()
    page = Page(html)
    assert [float(e["data-kernel-us"]) for e in page.having("data-kernel-us")] == [11.0, 5.0, 30.0, 13.0]
    assert "helion: fwd 16.0 us, bwd 43.0 us" in (tmp_path / "r" / "summary.md").read_text()
    assert "fwd+bwd host 70.0 us to issue, wall 75.0 us" in html


def test_kernel_times_splits_a_step_into_the_host_time_to_issue_it_and_the_wall_time_to_finish_it():
    """A step whose host part takes 20 ms and whose queued work 30 ms more (the stand-in sync waits for it): host
    about 20 ms, wall about 50 ms; each timed call starts from a synchronized, idle queue."""
    kt = bench_scripts.load("kernel_times")
    calls: list[str] = []

    def step() -> None:
        calls.append("step")
        time.sleep(0.02)

    def sync() -> None:
        if calls and calls[-1] == "step":
            time.sleep(0.03)
        calls.append("sync")

    timed = kt.host_and_wall(step, 3, sync)
    assert 20e3 <= timed["host_us"] < 45e3 and 50e3 <= timed["wall_us"] < 90e3
    assert calls[:2] == ["step", "step"] and calls[2:] == ["sync", "step", "sync"] * 3


def test_kernel_times_pairs_each_part_with_its_mamba_counterpart_and_the_report_marks_the_slower(tmp_path, capsys):
    """dB/dC/dCB is one part whatever each port launches for it; what no part names is the rest; a part that only
    one backend launches has no ratio. The report shows every ratio and names the parts below 1."""
    kt = bench_scripts.load("kernel_times")
    row = {"calls": 1.0, "us": 0.0}
    mamba = {
        "_chunk_scan_chunk_state_bwd_dx_kernel": {**row, "us": 60.0},
        "_chunk_scan_bwd_dcb_kernel": {**row, "us": 20.0},
        "_bmm_chunk_bwd_kernel": {"calls": 2.0, "us": 30.0},
        "_chunk_scan_bwd_ddAcs_stable_kernel": {**row, "us": 10.0},
        "_chunk_cumsum_bwd_kernel": {**row, "us": 5.0},
        "_chunk_scan_bwd_dz_kernel": {**row, "us": 7.0},
    }
    helion = {
        "_helion_dx_kernel": {**row, "us": 40.0},
        "_helion_dcb_kernel": {**row, "us": 50.0},
        "_helion_db_kernel": {**row, "us": 30.0},
        "_helion_ddt_kernel": {**row, "us": 4.0},
        "vectorized_elementwise_kernel": {**row, "us": 4.0},
    }
    pairs = kt.counterpart_ratios(mamba, helion)
    assert pairs["bwd_dx"] == {"mamba_us": 60.0, "helion_us": 40.0, "ratio": 1.5}
    assert pairs["bwd_dB_dC_dCB"] == {"mamba_us": 60.0, "helion_us": 80.0, "ratio": 0.75}
    assert pairs["bwd_ddt"] == {"mamba_us": 5.0, "helion_us": 4.0, "ratio": 1.25}
    assert pairs["rest"] == {"mamba_us": 7.0, "helion_us": 4.0, "ratio": 1.75}
    assert "bwd_states" not in pairs  # neither backend launched it
    kt.print_counterparts("bwd", pairs)
    printed = capsys.readouterr().out
    assert "bwd bwd_dB_dC_dCB: mamba-ssm 60.0 us, Helion 80.0 us, 0.75x (target >= 1.0x: MISSED)" in printed
    assert "bwd bwd_dx: mamba-ssm 60.0 us, Helion 40.0 us, 1.50x (target >= 1.0x: met)" in printed
    only_mamba = kt.counterpart_ratios({"_chunk_scan_bwd_dstates_kernel": row}, {})
    assert only_mamba["bwd_states"]["ratio"] is None

    backends = {
        name: {"fwd": {}, "bwd": table, "fwd_us": 0.0, "bwd_us": kt.total_us(table)}
        for name, table in (("mamba", mamba), ("helion", helion))
    }
    path = tmp_path / "kernels.json"
    payload = {"meta": {"gpu": "NVIDIA H200"}, "backends": backends, "counterparts": {"bwd": pairs}}
    path.write_text(json.dumps(results.stamped("kernel-times", payload)))
    assert run("report", str(path), "--out", str(tmp_path / "r")).returncode == 0
    cells = {
        e["data-part-ratio"]: e for e in Page((tmp_path / "r" / "index.html").read_text()).having("data-part-ratio")
    }
    assert cells["bwd|bwd_dB_dC_dCB"]["text"] == "0.75" and "fail" in cells["bwd|bwd_dB_dC_dCB"]["class"]
    assert cells["bwd|bwd_dx"]["text"] == "1.5" and "fail" not in cells["bwd|bwd_dx"]["class"]
    assert "Helion slower than mamba-ssm: bwd bwd_dB_dC_dCB 0.75x" in (tmp_path / "r" / "summary.md").read_text()


def test_kernel_times_counts_the_decay_gradient_sums_to_bwd_ddt_on_both_sides_and_recounts_a_saved_result(
    tmp_path, capsys, monkeypatch
):
    """mamba-ssm's flip-cumsum-flip and cumsum of the per-step decay gradient (PyTorch kernels) are part of bwd_ddt,
    whose Helion kernel does those sums; its generic adds stay in the rest. A saved result is recounted without a
    GPU, and a file that is not one gets one error line."""
    kt = bench_scripts.load("kernel_times")
    flip = "void at::native::index_elementwise_kernel<128, 4, at::native::flip_kernel_impl<at::native::OpaqueType<4> >"
    scan = "void at::native::tensor_kernel_scan_innermost_dim<float, std::plus<float> >(float*, float const*)"
    add = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>"
    mamba = {
        "_chunk_cumsum_bwd_kernel": {"calls": 1.0, "us": 10.0},
        flip: {"calls": 2.0, "us": 8.0},
        scan: {"calls": 2.0, "us": 14.0},
        add: {"calls": 2.0, "us": 6.0},
    }
    helion = {"_helion_ddt_kernel": {"calls": 1.0, "us": 16.0}, scan: {"calls": 1.0, "us": 4.0}}
    pairs = kt.counterpart_ratios(mamba, helion)
    assert pairs["bwd_ddt"] == {"mamba_us": 32.0, "helion_us": 20.0, "ratio": 1.6}
    assert pairs["rest"] == {"mamba_us": 6.0, "helion_us": 0.0, "ratio": None}
    assert kt.part_of(add) is None and kt.part_of("_chunk_scan_fwd_kernel") == "chunk_scan"

    saved = tmp_path / "kernels.json"
    backends = {name: {"fwd": {}, "bwd": table} for name, table in (("mamba", mamba), ("helion", helion))}
    old = {"bwd": {"bwd_ddt": {"mamba_us": 10.0, "helion_us": 16.0, "ratio": 0.625}}}
    saved.write_text(json.dumps({"meta": {"gpu": "NVIDIA H200"}, "backends": backends, "counterparts": old}))
    again = tmp_path / "recounted.json"
    monkeypatch.setattr("sys.argv", ["kernel_times.py", "--recount", str(saved), "--json", str(again)])
    assert kt.main() == 0
    assert "bwd bwd_ddt: mamba-ssm 32.0 us, Helion 20.0 us, 1.60x (target >= 1.0x: met)" in capsys.readouterr().out
    recounted = json.loads(again.read_text())
    assert recounted["counterparts"]["bwd"]["bwd_ddt"]["ratio"] == 1.6 and recounted["backends"] == backends
    assert "--recount" in recounted["meta"]["recounted"]

    saved.write_text('{"meta": {}}')
    monkeypatch.setattr("sys.argv", ["kernel_times.py", "--recount", str(saved)])
    assert kt.main() == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"kernel_times: {saved} is not a kernel-times result") and "\n" not in err


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("{oops", "not a parity result (not JSON"),
        ('{"block_sizes": [32, 1]}', "not a parity result (expected the JSON of parity check"),
        ('{"format": "parity-check", "version": 99, "cases": []}', "newer format (parity-check version 99"),
        ('{"format": "something-else", "version": 1}', 'unknown format "something-else"'),
        ('{"format": "parity-check", "version": 1, "cases": [{"op": "x"}]}', "malformed parity-check result"),
        ('{"meta": {}, "rows": [{"op": "x"}]}', "malformed parity-bench result: missing field 'shape'"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(tmp_path, content, needle):
    good, bad = ROOT / README_INPUTS[3], tmp_path / "bad.json"
    bad.write_text(content)
    proc = run("report", str(good), str(bad), "--out", str(tmp_path / "r"))
    assert proc.returncode == 2 and not (tmp_path / "r").exists()
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0] and needle in lines[0], proc.stderr


@pytest.mark.cpu
def test_check_writes_its_json_with_the_format_marker_and_its_report(tmp_path):
    proc = run(
        "check",
        *("--op", "chunk_cumsum", "--impl", "triton", "--dtype", "float32", "--examples", "0", "--forward-only"),
        *("--json", str(tmp_path / "out.json"), "--report", str(tmp_path / "r")),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((tmp_path / "out.json").read_text())
    assert (data["format"], data["version"]) == ("parity-check", results.FORMATS["check"])
    page = Page((tmp_path / "r" / "index.html").read_text())
    cells = page.having("data-ratio")
    assert cells and {c["data-op"] for c in cells if "data-op" in c} == {"chunk_cumsum"}


@pytest.mark.cpu
def test_the_pytest_plugin_writes_the_report_of_the_recorded_cases(pytester, tmp_path):
    case = next(c for c in _raw(README_INPUTS[0])["cases"] if c["op"] == "bmm_chunk")
    pytester.makepyfile(
        f"""
        import json
        from types import SimpleNamespace

        def test_one(parity_record):
            parity_record(SimpleNamespace(to_dict=lambda: json.loads({json.dumps(case)!r})))
        """
    )
    out = tmp_path / "r"
    result = pytester.runpytest_inprocess("-p", "parity.pytest_plugin", "-p", "no:cacheprovider", "--report", str(out))
    result.assert_outcomes(passed=1)
    recorded = json.loads((out / "results.json").read_text())
    assert recorded["format"] == "parity-check" and recorded["cases"] == [case]
    assert "bmm_chunk" in (out / "summary.md").read_text()


# --- convergence.json (bench/convergence.py) -----------------------------------------------------------------------

CONVERGENCE_STEPS = 20


@pytest.fixture(scope="module")
def convergence_json(tmp_path_factory) -> Path:
    """A convergence.json written by bench/convergence.py itself (its judging, its payload, its JSON) with
    training replaced by made-up curves: mamba, its bitwise rerun, the reference 1e-4 away, Helion within the
    band, and a broken Helion far off that raises at step 15 (infinite deviations after it); at mamba's weights
    errors against the reference of 1e-5 (mamba), 1.5e-5 (Helion) and 1e-2 (broken)."""
    conv = bench_scripts.load("convergence")
    rerun = conv.rerun_names(1)[0]
    offsets = {conv.BASELINE: 0.0, rerun: 0.0, conv.REFERENCE: 1e-4, conv.CANDIDATE: 5e-5, "broken": 0.05}
    step_ms = {conv.BASELINE: 40.0, rerun: 41.0, conv.REFERENCE: 90.0, conv.CANDIDATE: 36.0, "broken": 35.0}
    same_error = {conv.BASELINE: 1e-5, conv.CANDIDATE: 1.5e-5, "broken": 1e-2}

    def train(name, backend, cfg, tc, init, batches, dev, shadows=None):
        steps = 15 if name == "broken" else tc.steps
        run = conv.Run(name, error="step 15: RuntimeError: boom" if name == "broken" else None)
        if shadows:
            run.same_weights = {
                n: {"loss": [same_error[n]] * tc.steps, "grad": [same_error[n]] * tc.steps}
                for n in [name, *shadows]
                if n != conv.REFERENCE
            }
        run.losses = [5.0 / (1 + t) + 1 + offsets[name] * (t + 1) for t in range(steps)]
        run.grad_norms = [2.0 / (1 + t) + 0.1 + offsets[name] * t for t in range(steps)]
        run.step_ms = [step_ms[name] + t % 3 for t in range(steps)]
        run.params = {n: v.float() + 0.1 + offsets[name] for n, v in init.items()}
        return run

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(conv, "train", train)
        patch.setattr(conv, "helion_configs", lambda cfg, dev: {"ssd_combined": None, "layernorm_gated": None})
        patch.setattr(conv, "redraw", lambda payload, out: None)  # the bench's own plots are not under test
        preset = conv.PRESETS["cpu"]
        tc = conv.TrainConfig(**{**preset["train"], "steps": CONVERGENCE_STEPS})
        backends = dict.fromkeys([conv.BASELINE, rerun, conv.CANDIDATE, conv.REFERENCE, "broken"])
        tasks = {
            task: conv.run_task(
                task, preset["model"], tc, backends, [conv.CANDIDATE, "broken"], conv.torch.device("cpu")
            )
            for task in ("text", "recall")
        }
        payload = conv.make_payload(
            "python bench/convergence.py --device cpu",
            preset["model"],
            tc,
            tasks,
            conv.torch.device("cpu"),
            list(tasks),
        )
        out = tmp_path_factory.mktemp("convergence")
        conv.write_outputs(payload, out)
    return out / "convergence.json"


def test_the_convergence_json_carries_its_marker_and_reads_as_its_kind(convergence_json):
    data = json.loads(convergence_json.read_text())
    assert (data["format"], data["version"]) == ("parity-convergence", results.FORMATS["convergence"])
    loaded = results.load(convergence_json)
    assert (loaded.kind, loaded.passed, loaded.meta["device"]) == ("convergence", False, "cpu")
    text = data["tasks"]["text"]
    assert text["verdicts"]["helion"]["passed"] and not text["verdicts"]["broken"]["passed"]  # the made-up curves


def test_the_convergence_report_shows_the_numbers_of_the_json(convergence_json, tmp_path):
    proc = run("report", str(convergence_json), "--out", str(tmp_path / "r"))
    assert proc.returncode == 1, proc.stderr  # the broken candidate fails
    data = json.loads(convergence_json.read_text())
    page = Page((tmp_path / "r" / "index.html").read_text())
    assert [e["data-kind"] for e in page.having("data-kind")] == ["convergence"]
    plots = {e["data-plot"]: e for e in page.having("data-plot")}
    assert set(plots) == {"convergence:r0:text", "convergence:r0:recall"}
    for element in plots.values():
        assert base64.b64decode(element["src"].split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    shown = {e["data-convergence"]: e for e in page.having("data-convergence")}
    expected = {}
    for task, result in data["tasks"].items():
        for name, verdict in result["verdicts"].items():
            for check in (
                "loss_curve",
                "grad_norm_curve",
                "final_loss",
                "params",
                "same_weights_loss",
                "same_weights_grad",
            ):
                expected[f"{task}|{name}|{check}"] = verdict[check]["max_ratio" if check.endswith("curve") else "ratio"]
    assert set(shown) == set(expected)
    for key, ratio in expected.items():
        assert float(shown[key]["data-ratio"]) == ratio
        assert shown[key]["text"].startswith("inf" if ratio == float("inf") else format(ratio, ".3g"))
    assert (
        shown["text|broken|loss_curve"]["text"] == "inf (step 15)"
        and "fail" in shown["text|broken|loss_curve"]["class"]
    )
    # At mamba's weights: Helion's RMS error 1.5e-5 against a bound of 2 x 1e-5 (+ the floor), broken's 1e-2.
    grad_bound = 2 * 1e-5 + 1e-6  # the gradient's error is relative: its floor is ATOL_REL itself
    assert float(shown["text|helion|same_weights_grad"]["data-ratio"]) == pytest.approx(1.5e-5 / grad_bound)
    assert "fail" in shown["text|broken|same_weights_loss"]["class"]
    step_ms = {e["data-step-ms"]: float(e["data-ms"]) for e in page.having("data-step-ms")}
    medians = {
        f"{task}|{name}": r["step_ms_median"] for task, t in data["tasks"].items() for name, r in t["runs"].items()
    }
    assert step_ms == medians
    summary = (tmp_path / "r" / "summary.md").read_text()
    verdict = data["tasks"]["recall"]["verdicts"]["helion"]
    loss = verdict["loss_curve"]
    row = f"| recall | helion | {format(loss['max_ratio'], '.3g')} ({loss['worst_step']}) |"
    assert (
        row in summary
        and "| text | broken | inf (15) |" in summary
        and "**FAIL**: step 15: RuntimeError: boom |" in summary
    )


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda d: d["tasks"]["text"]["runs"]["mamba"].pop("losses"), "missing field 'losses'"),
        (lambda d: d["tasks"]["recall"]["runs"]["helion"].update(grad_norms="1, 2"), "expected a list of numbers"),
        (lambda d: d["tasks"]["text"]["band"]["bound"].pop("grad_norm"), "missing field 'grad_norm'"),
        (lambda d: d["tasks"]["text"]["verdicts"]["helion"]["params"].update(ratio=None), "expected a list of num"),
        (lambda d: d["tasks"]["text"]["verdicts"]["helion"]["final_loss"].update(judged="no"), "'judged' is not"),
        (lambda d: d.update(tasks=[1, 2]), "malformed parity-convergence result: TypeError"),
        (lambda d: d.update(version=2), "newer format (parity-convergence version 2"),
    ],
)
def test_a_malformed_convergence_file_is_one_line_exit_2_and_nothing_written(convergence_json, tmp_path, edit, needle):
    data = json.loads(convergence_json.read_text())
    edit(data)
    bad = tmp_path / "convergence.json"
    bad.write_text(json.dumps(data))
    proc = run("report", str(convergence_json), str(bad), "--out", str(tmp_path / "r"))
    assert proc.returncode == 2 and not (tmp_path / "r").exists()
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0] and needle in lines[0], proc.stderr


def test_a_check_not_judged_shows_its_ratio_and_fails_nothing(convergence_json, tmp_path):
    # Where mamba-ssm's own runs left each other's band, the check is shown with its ratio, marked, not failed.
    data = json.loads(convergence_json.read_text())
    loss = data["tasks"]["recall"]["verdicts"]["helion"]["loss_curve"]
    loss.update(max_ratio=3.5, passed=False, judged=False)
    edited = tmp_path / "convergence.json"
    edited.write_text(json.dumps(data))
    proc = run("report", str(edited), "--out", str(tmp_path / "r"))
    assert proc.returncode == 1, proc.stderr  # the broken candidate still fails the file
    cell = {
        e["data-convergence"]: e for e in Page((tmp_path / "r" / "index.html").read_text()).having("data-convergence")
    }
    shown = cell["recall|helion|loss_curve"]
    assert shown["text"] == f"3.5 (step {loss['worst_step']}), not judged" and "fail" not in shown["class"]
    summary = (tmp_path / "r" / "summary.md").read_text()
    assert f"| recall | helion | 3.5 ({loss['worst_step']}), not judged |" in summary
    assert f"helion pass (loss curve 3.5 (step {loss['worst_step']}), not judged)" in summary  # the one-line overview
