"""The report a reviewer reads in a minute: one self-contained ``index.html`` (plots embedded as PNG, no network)
and a short ``summary.md`` for a pull request, from any parity or benchmark JSON (parity.results).

Every number a test checks is also in a ``data-*`` attribute next to the text it is shown as, and every plot is an
``<img data-plot="...">``, so that the HTML can be checked against the JSON it came from.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import textwrap
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from parity.errors import ParityError
from parity.results import HOST_PHASES, TITLES, Case, Result

GOOD, MID, BAD, OVER = "#1a9850", "#fee08b", "#f46d43", "#a50026"
"""Colours of err/bound: far under the bound, near it, at it, over it (the matrix and the plots share them)."""

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1280px;padding:0 20px 60px;color:#222}
h1{margin:18px 0 4px}h2{border-bottom:2px solid #ddd;padding-bottom:3px;margin-top:36px}h3{margin:22px 0 6px}
table{border-collapse:collapse;margin:6px 0 12px;font-size:13px}
th,td{border:1px solid #ccc;padding:2px 7px;text-align:left;vertical-align:top}
th{background:#f3f3f3;font-weight:600}
td.num{text-align:right;font-variant-numeric:tabular-nums}
table.matrix td{text-align:center;min-width:44px;font-variant-numeric:tabular-nums}
td.fail,span.fail{color:#fff;background:#a50026;font-weight:700}
span.pass{color:#fff;background:#1a9850;font-weight:700}
span.fail,span.pass,span.info{padding:1px 7px;border-radius:3px}span.info{background:#ddd}
code{font-size:12px;background:#f6f6f6;padding:1px 3px;word-break:break-all}
img{max-width:100%;border:1px solid #eee;margin:4px 0}
.muted{color:#777}nav a{margin-right:12px}
details>summary{cursor:pointer;color:#045}
"""


def require() -> None:
    """Fail before a long run, not after it, when the report cannot be drawn (matplotlib missing)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ParityError("--report needs matplotlib: pip install matplotlib") from None


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _ratio_colour(ratio: float) -> str:
    """Background of a matrix cell: green far under the bound, yellow at a tenth of it, red at it, dark over it."""
    if ratio > 1:
        return OVER
    from matplotlib.colors import LinearSegmentedColormap, LogNorm, to_hex

    cmap = LinearSegmentedColormap.from_list("ratio", [GOOD, MID, BAD])
    return to_hex(cmap(LogNorm(1e-3, 1, clip=True)(max(ratio, 1e-12))))


def _fmt(value: float | None, spec: str = ".3g") -> str:
    if value is None:
        return "–"
    return "inf" if math.isinf(value) else format(value, spec)


def _png(fig: Any) -> str:
    """A matplotlib figure as a data: URI (the page carries its plots; nothing is fetched)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _img(plot: str, fig: Any, alt: str) -> str:
    return f'<img data-plot="{_esc(plot)}" alt="{_esc(alt)}" src="{_png(fig)}">'


def _figure(width: float, height: float, **margins: float) -> Any:
    """A figure with fixed margins in inches (matplotlib's automatic layouts cost most of a report's time)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    inches = {"left": 0.8, "right": 0.2, "bottom": 0.55, "top": 0.35, **margins}
    fig.subplots_adjust(
        left=inches["left"] / width,
        right=1 - inches["right"] / width,
        bottom=inches["bottom"] / height,
        top=1 - inches["top"] / height,
        wspace=0.08,
        hspace=0.45,
    )
    return fig


def _table(header: Sequence[str], rows: Iterable[Sequence[str]], attrs: str = "") -> str:
    """An HTML table; cells are already HTML (a cell starting with ``<td`` is used as is)."""
    head = "".join(f"<th>{_esc(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(c if c.startswith("<td") else f"<td>{c}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table{attrs}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _verdict(passed: bool | None) -> str:
    if passed is None:
        return '<span class="info">measurement</span>'
    return '<span class="pass">pass</span>' if passed else '<span class="fail">FAIL</span>'


def _ordered(values: Iterable[str]) -> list[str]:
    """Distinct values in order of first appearance."""
    return list(dict.fromkeys(values))


# --- cases: the verdict matrix, the trends and the worst cases ---------------------------------------------------


def cells(cases: Iterable[Case]) -> dict[tuple[str, str, str, str], tuple[float, Case]]:
    """The worst err/bound of each (op, impl, dtype, quantity), with the case it came from."""
    worst: dict[tuple[str, str, str, str], tuple[float, Case]] = {}
    for case in cases:
        for q in case.quantities:
            key = (case.op, case.impl, case.dtype, q.name)
            if key not in worst or q.ratio > worst[key][0]:
                worst[key] = (q.ratio, case)
    return worst


def _matrix(op: str, cases: list[Case]) -> str:
    """(dtype, implementation) x output/gradient, each cell coloured by its worst err/bound; its tooltip names
    that worst case and its reproducer."""
    worst = cells(cases)
    impls = _ordered(c.impl for c in cases)
    dtypes = _ordered(c.dtype for c in cases)
    names = _ordered(q.name for c in cases for q in c.quantities)
    head = "<th>dtype</th><th>implementation</th>" + "".join(f"<th>{_esc(n)}</th>" for n in names)
    rows = []
    for dtype in dtypes:
        mine = [i for i in impls if any(c.impl == i and c.dtype == dtype for c in cases)]
        for number, impl in enumerate(mine):
            raised = any(c.impl == impl and c.dtype == dtype and c.errors for c in cases)
            tds = [f'<th rowspan="{len(mine)}">{_esc(dtype)}</th>'] if number == 0 else []
            tds.append(f"<th>{_esc(impl)}</th>")
            for name in names:
                key = (op, impl, dtype, name)
                if key not in worst:
                    tds.append('<td class="fail">error</td>' if raised else '<td class="muted">–</td>')
                    continue
                ratio, case = worst[key]
                tip = f"worst err/bound {_fmt(ratio)}, seed {case.seed}, {json.dumps(case.problem)}\n{case.reproducer}"
                over = ";color:#fff;font-weight:700" if ratio > 1 else ""
                tds.append(
                    f'<td data-op="{_esc(op)}" data-impl="{_esc(impl)}" data-dtype="{_esc(dtype)}" '
                    f'data-quantity="{_esc(name)}" data-ratio="{ratio!r}" title="{_esc(tip)}" '
                    f'style="background:{_ratio_colour(ratio)}{over}">{_fmt(ratio, ".2g")}</td>'
                )
            rows.append(f"<tr>{''.join(tds)}</tr>")
    return (
        f'<table class="matrix" data-matrix="{_esc(op)}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _axes(cases: list[Case]) -> list[tuple[str, Callable[[Case], float | None]]]:
    """What to plot err/bound against: seqlen and the chunk count first, then integer problem fields that vary
    (most distinct values first), at most four in all; the seed only when nothing else varies. An axis gives
    None for a case whose problem lacks its fields."""
    fields = _ordered(k for c in cases for k, v in c.problem.items() if type(v) is int)

    def field_of(name: str) -> Callable[[Case], float | None]:
        return lambda c: c.problem.get(name)

    def chunks(c: Case) -> float | None:
        seqlen, size = c.problem.get("seqlen"), c.problem.get("chunk_size")
        return -(-seqlen // size) if type(seqlen) is int and type(size) is int and size > 0 else None

    found: dict[str, Callable[[Case], float | None]] = {}
    if "seqlen" in fields:
        found["seqlen"] = field_of("seqlen")
        if "chunk_size" in fields:
            found["chunks (seqlen / chunk_size, rounded up)"] = chunks
    spread = {f: len({c.problem.get(f) for c in cases}) for f in fields if f not in found}
    for name in sorted(spread, key=lambda f: -spread[f]):
        if spread[name] >= 3 and len(found) < 4:
            found[name] = field_of(name)
    axes = [(n, fn) for n, fn in found.items() if len({fn(c) for c in cases} - {None}) > 1]
    if not axes and len({c.seed for c in cases}) > 1:
        axes = [("seed", lambda c: c.seed)]
    return axes


def _ragged(problem: dict[str, Any]) -> bool | None:
    """Whether the last chunk is partial (None for ops without chunks)."""
    if type(problem.get("seqlen")) is int and type(problem.get("chunk_size")) is int and problem["chunk_size"] > 0:
        return problem["seqlen"] % problem["chunk_size"] != 0
    return None


def _trend(label: str, op: str, cases: list[Case]) -> str:
    """err/bound of every case against each axis (columns), one row of panels per dtype, one colour per
    implementation, x for a ragged last chunk; the dashed line is the bound."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    usable = [c for c in cases if c.quantities and not c.errors]
    axes = _axes(usable)
    if not axes:
        return '<p class="muted">one problem shape: no trend to plot.</p>'
    dtypes = _ordered(c.dtype for c in usable)
    impls = _ordered(c.impl for c in usable)
    colours = {impl: f"C{i % 10}" for i, impl in enumerate(impls)}
    floor = min((c.ratio for c in usable if c.ratio > 0), default=1e-3) / 2
    fig = _figure(max(2.6 * len(axes) + 2.6, 7.5), 1.9 * len(dtypes) + 0.9, left=1.0, right=2.3, top=0.45)
    grid = fig.subplots(len(dtypes), len(axes), sharey=True, squeeze=False)
    for number, (row, dtype) in enumerate(zip(grid, dtypes, strict=True)):
        for column, (ax, (name, fn)) in enumerate(zip(row, axes, strict=True)):
            for impl in impls:
                for ragged, marker in ((False, "o"), (True, "x"), (None, "o")):
                    mine = [
                        c
                        for c in usable
                        if c.dtype == dtype and c.impl == impl and _ragged(c.problem) is ragged and fn(c) is not None
                    ]
                    if mine:
                        ax.scatter(
                            [fn(c) for c in mine],
                            [min(max(c.ratio, floor), 1e3) for c in mine],
                            s=16,
                            marker=marker,
                            color=colours[impl],
                            alpha=0.75,
                            linewidths=1.2,
                        )
            ax.axhline(1.0, color=OVER, lw=1.2, ls="--")
            ax.set_yscale("log")
            values = [v for v in map(fn, usable) if v is not None]
            if min(values) > 0 and max(values) / min(values) > 30:
                ax.set_xscale("log")
            else:
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.grid(alpha=0.3)
            ax.tick_params(labelsize=8)
            if column == 0:
                ax.set_ylabel(f"{dtype}\nerr / bound", fontsize=9)
            if number == len(dtypes) - 1:
                ax.set_xlabel(name, fontsize=9)
    handles = [Line2D([], [], ls="", marker="o", color=colours[i], label=i) for i in impls]
    if any(_ragged(c.problem) for c in usable):
        handles += [
            Line2D([], [], ls="", marker="o", color="#555", label="whole chunks"),
            Line2D([], [], ls="", marker="x", color="#555", label="ragged last chunk"),
        ]
    handles.append(Line2D([], [], color=OVER, ls="--", label="bound"))
    fig.legend(handles=handles, loc="center right", fontsize=8, frameon=False)
    fig.suptitle(f"{op}: worst err / bound of each case across the generated shapes", fontsize=10)
    return _img(f"trend:{label}:{op}", fig, f"{op} err/bound against problem size")


def _worst_rows(op: str, cases: list[Case]) -> str:
    """For each implementation and dtype: cases, failures, and the worst case with its reproducer."""
    groups: dict[tuple[str, str], list[Case]] = defaultdict(list)
    for case in cases:
        groups[(case.impl, case.dtype)].append(case)
    rows = []
    for (impl, dtype), mine in groups.items():
        case = max(mine, key=lambda c: c.ratio)
        failed = sum(not c.passed for c in mine)
        where = max(case.quantities, key=lambda q: q.ratio).name if case.quantities and not case.errors else "raised"
        rows.append(
            [
                _esc(impl),
                _esc(dtype),
                f'<td class="num">{len(mine)}</td>',
                f'<td class="num{" fail" if failed else ""}">{failed}</td>',
                f'<td class="num" data-worst="{_esc(op)}|{_esc(impl)}|{_esc(dtype)}" data-ratio="{case.ratio!r}">'
                f"{_fmt(case.ratio)}</td>",
                _esc(where),
                f"<code>{_esc(case.reproducer)}</code>",
            ]
        )
    table = _table(
        ("implementation", "dtype", "cases", "failed", "worst err/bound", "at", "worst case: reproduce"), rows
    )
    opened = " open" if any(not c.passed for c in cases) else ""
    return (
        f"<details{opened}><summary>the worst case of each implementation and dtype, with its reproducer"
        f"</summary>{table}</details>"
    )


def _failures(cases: list[Case], limit: int = 20) -> str:
    failed = [c for c in cases if not c.passed]
    if not failed:
        return ""
    items = []
    for case in failed[:limit]:
        what = "; ".join(case.errors) or ", ".join(
            f"{q.name} err {q.err:.3e} > bound {q.bound:.3e}" for q in case.quantities if not q.passed
        )
        items.append(
            f"<li>{_esc(case.impl)} {_esc(case.dtype)} seed {case.seed}: {_esc(what)}<br>"
            f"<code>{_esc(case.reproducer)}</code></li>"
        )
    more = f"<li>… and {len(failed) - limit} more</li>" if len(failed) > limit else ""
    return f"<details open><summary>{len(failed)} failing cases</summary><ul>{''.join(items)}{more}</ul></details>"


def _cases_section(result: Result, label: str) -> str:
    parts = []
    by_op: dict[str, list[Case]] = defaultdict(list)
    for case in result.cases:
        by_op[case.op].append(case)
    for op in sorted(by_op):
        cases = by_op[op]
        failed = sum(not c.passed for c in cases)
        parts.append(
            f'<h3 id="{_esc(label)}-{_esc(op)}">{_esc(op)} {_verdict(failed == 0)} '
            f'<span class="muted">{len(cases)} cases, {failed} failed</span></h3>'
        )
        parts.append(_matrix(op, cases))
        parts.append(_trend(label, op, cases))
        parts.append(_worst_rows(op, cases))
        parts.append(_failures(cases))
    return "".join(parts)


# --- gates, benchmarks, tuning -------------------------------------------------------------------------------------


def _kv(pairs: Iterable[tuple[str, str]]) -> str:
    return "<table>" + "".join(f"<tr><th>{_esc(k)}</th><td>{v}</td></tr>" for k, v in pairs) + "</table>"


def _determinism(rows: list[dict[str, Any]]) -> str:
    return _table(
        ("problem", "dtype", "reruns", "bitwise identical", "max spread", "ok"),
        (
            [
                f"<code>{_esc(json.dumps(d['problem']))}</code>",
                _esc(d["dtype"]),
                str(d["reruns"]),
                str(d["bitwise_identical"]),
                _fmt(d["max_spread"]),
                _verdict(d["ok"]),
            ]
            for d in rows
        ),
    )


def _timing(rows: list[dict[str, Any]]) -> str:
    out = []
    for t in rows:
        cand, base = t.get("candidate_ms"), t.get("baseline_ms")
        speedup = base / cand if cand and base else None
        out.append(
            [
                f"<code>{_esc(json.dumps(t['problem']))}</code>",
                _esc(t["dtype"]),
                f"<td>FAILED: {_esc(t['error'])}</td>" if "error" in t else f'<td class="num">{_fmt(cand, ".4f")}</td>',
                f'<td class="num">{_fmt(base, ".4f")}</td>',
                f'<td class="num" data-speedup="{speedup!r}">{_fmt(speedup, ".2f")}x</td>',
            ]
        )
    headers = ("training problem", "dtype", "candidate fwd+bwd ms", "baseline ms (as the gate runs it)", "ratio")
    return _table(headers, out)


def _versions(meta: dict[str, Any]) -> str:
    found = [f"{k} {meta[k]}" for k in ("torch", "triton", "helion", "mamba_ssm", "python") if meta.get(k)]
    return _esc(", ".join(found)) if found else '<span class="muted">not recorded</span>'


def _gate_section(result: Result, label: str) -> str:
    data, meta = result.data, result.meta
    ev = data["evidence"]
    problems = ev.get("problems", [])
    pairs = [
        ("verdict", _verdict(result.passed)),
        ("op / implementation", _esc(f"{data.get('op', '?')} / {data.get('impl', '?')}")),
        ("config", f"<code>{_esc(json.dumps(data.get('config')))}</code>"),
        ("device", _esc(meta.get("gpu") or meta.get("device") or data.get("device", "?"))),
        ("versions", _versions(meta)),
        ("cases", f'<span data-cases="{ev.get("cases")}">{ev.get("cases")}</span>'),
        ("distinct shapes", str(len(problems))),
        ("seeds", _esc(", ".join(map(str, ev.get("seeds", []))))),
        ("dtypes", _esc(", ".join(ev.get("dtypes", [])))),
        ("date", _esc(ev.get("date", "?"))),
        ("command", f"<code>{_esc(meta.get('command', '?'))}</code>"),
    ]
    parts = [_kv(pairs), "<h3>Determinism reruns</h3>", _determinism(ev.get("determinism", []))]
    if ev.get("timing"):
        parts += ["<h3>Timing at the training shape</h3>", _timing(ev["timing"])]
    if ev.get("skipped"):
        parts.append("<p>not run: " + "; ".join(_esc(s) for s in ev["skipped"]) + "</p>")
    shapes = "".join(f"<li><code>{_esc(p)}</code></li>" for p in problems)
    parts.append(f"<details><summary>the {len(problems)} shapes</summary><ul>{shapes}</ul></details>")
    return "".join(parts) + _cases_section(result, label)


def _gate_speed_section(result: Result, label: str) -> str:
    parts = []
    for run in result.data["results"]:
        pairs = [
            ("verdict", _verdict(run["passed"])),
            ("op / implementation / dtype", _esc(f"{run['op']} / {run['impl']} / {run['dtype']}")),
            ("device", _esc(run.get("gpu", "?"))),
            ("versions", _versions(run)),
            ("cases", f'<span data-cases="{run["cases"]}">{run["cases"]}</span>'),
            ("distinct shapes", _esc(run.get("distinct_shapes", "?"))),
            ("compile groups", _esc(run.get("compile_groups", "?"))),
            ("wall time", _esc(f"{run.get('seconds', '?')} s with {run.get('workers', '?')} workers")),
            ("Triton compilations (this process)", _esc(run.get("triton_compilations", "?"))),
            ("command", f"<code>{_esc(run.get('command', '?'))}</code>"),
        ]
        parts += [f"<h3>{_esc(run['op'])}</h3>", _kv(pairs), "<h4>Determinism reruns</h4>"]
        parts.append(_determinism(run["determinism"]))
        if run.get("timing"):
            parts += ["<h4>Timing at the training shape</h4>", _timing(run["timing"])]
        if run.get("failures"):
            parts.append("<ul>" + "".join(f"<li><pre>{_esc(f)}</pre></li>" for f in run["failures"]) + "</ul>")
    return "".join(parts)


Panel = tuple[str, dict[str, list[float | None]], list[float | None] | None]
"""One bar chart: its title, the times of each series per group, and the floor per group (or None)."""


def _bars(plot: str, title: str, groups: list[str], panels: list[Panel]) -> str:
    """Panels side by side sharing the groups: horizontal bars per group, one per series, the floor drawn as a
    black tick, and beside each group the speedup of the last series over the first."""
    width = 4.6 * len(panels) + 1.9
    height = 0.26 * len(groups) * max(len(p[1]) for p in panels) + 1.5
    fig = _figure(width, height, left=1.7, right=0.2, top=0.6)
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    for ax, (name, series, floors) in zip(axes, panels, strict=True):
        names = list(series)
        height = 0.8 / len(names)
        for i, which in enumerate(names):
            ys = [g + (i - (len(names) - 1) / 2) * height for g in range(len(groups))]
            values = series[which]
            kept = [(y, v) for y, v in zip(ys, values, strict=True) if v]
            ax.barh([y for y, _ in kept], [v for _, v in kept], height=height * 0.92, color=f"C{i}", label=which)
        for g, floor in enumerate(floors or []):
            if floor:
                ax.plot([floor, floor], [g - 0.45, g + 0.45], color="black", lw=2)
        if floors and any(floors):
            ax.plot([], [], color="black", lw=2, label="floor (bandwidth / FLOPs)")
        first, last = series[names[0]], series[names[-1]]
        for g in range(len(groups)):
            numerator, denominator = first[g], last[g]
            if numerator and denominator:
                top = max(s[g] or 0 for s in series.values())
                ax.annotate(
                    f"{numerator / denominator:.2f}x",
                    (top, g),
                    xytext=(3, 0),
                    textcoords="offset points",
                    va="center",
                    fontsize=8,
                )
        ax.set_yticks(range(len(groups)), groups)
        ax.set_xscale("log")
        ax.set_xlabel("median ms (log)", fontsize=9)
        ax.margins(x=0.18)
        ax.grid(axis="x", alpha=0.3)
        ax.tick_params(labelsize=8)
        ax.set_title(name, fontsize=9)
    axes[0].invert_yaxis()
    axes[-1].legend(fontsize=7, loc="lower right")
    fig.suptitle(title, fontsize=10)
    return _img(plot, fig, title)


def _bench_section(result: Result, label: str) -> str:
    rows = result.data["rows"]
    parts = []
    ceilings = result.meta.get("ceilings") or {}
    if ceilings:
        parts.append(
            f"<p>measured ceilings: copy {_fmt(ceilings.get('copy_bytes_per_s', 0) / 1e12)} TB/s, bf16 matmul "
            f"{_fmt(ceilings.get('bf16_flops_per_s', 0) / 1e12)} TFLOP/s; the floor of a kernel is the larger of "
            "its bytes over the copy rate and its FLOPs over the matmul rate.</p>"
        )
    for shape in _ordered(r["shape"] for r in rows):
        mine = [r for r in rows if r["shape"] == shape]
        impls = _ordered(i for r in mine for i in r["impls"])
        groups = [r["op"] for r in mine]
        floors = [max((t.get("floor_ms") or 0 for t in r["impls"].values()), default=0) or None for r in mine]
        panels: list[Panel] = [
            (
                what,
                {i: [r["impls"].get(i, {}).get(key) for r in mine] for i in impls},
                floors if key == "fwd_ms" else None,
            )
            for key, what in (("fwd_ms", "forward"), ("fwd_bwd_ms", "forward + backward"))
        ]
        panels = [p for p in panels if any(v for values in p[1].values() for v in values)]
        if panels:
            parts.append(
                _bars(
                    f"bench:{label}:{shape}",
                    f"{shape} shape: {' vs '.join(impls)}, speedup = {impls[0]} / {impls[-1]}",
                    groups,
                    panels,
                )
            )
        table = []
        for r in mine:
            base = r["impls"].get(impls[0], {})
            for impl, t in r["impls"].items():
                fb = t.get("fwd_bwd_ms")
                fb_speedup = base.get("fwd_bwd_ms") / fb if fb and base.get("fwd_bwd_ms") else None
                table.append(
                    [
                        _esc(r["op"]),
                        _esc(impl),
                        f'<td class="num" data-bench="{_esc(r["op"])}|{_esc(shape)}|{_esc(impl)}" '
                        f'data-ms="{t.get("fwd_ms")!r}">{_fmt(t.get("fwd_ms"), ".4f")}</td>',
                        f'<td class="num">{_fmt(fb, ".4f")}</td>',
                        f'<td class="num">{_fmt(t.get("floor_ms"), ".4f")}</td>',
                        f'<td class="num">{_fmt(t.get("fraction_of_floor"), ".2f")}</td>',
                        f'<td class="num">{_fmt(t.get("speedup_vs_triton"), ".2f")}</td>',
                        f'<td class="num">{_fmt(fb_speedup, ".2f")}</td>',
                        _esc(t.get("error") or t.get("fwd_bwd_error") or ""),
                    ]
                )
        parts.append(
            _table(
                (
                    "op",
                    "impl",
                    "fwd ms",
                    "fwd+bwd ms",
                    "fwd floor ms",
                    "of floor",
                    "fwd speedup",
                    "fwd+bwd speedup",
                    "",
                ),
                table,
            )
        )
    return "".join(parts)


def _mixer_section(result: Result, label: str) -> str:
    data = result.data
    mixer, norm = data["mixer"], data["norm_bwd"]
    names = _ordered([*mixer["backends"], *norm["backends"]])
    series = {
        n: [
            mixer["backends"].get(n, {}).get("fwd_ms"),
            mixer["backends"].get(n, {}).get("fwd_bwd_ms"),
            norm["backends"].get(n, {}).get("bwd_ms"),
        ]
        for n in names
    }
    parts = [
        _bars(
            f"mixer:{label}",
            f"Mamba-2 mixer, {mixer['problem'].get('dtype', '?')}: {' vs '.join(names)}, "
            f"speedup = {names[0]} / {names[-1]}",
            ["mixer fwd", "mixer fwd+bwd", "gated RMSNorm bwd"],
            [("", series, [None, None, norm.get("floor_ms")])],
        )
    ]
    targets = data.get("targets", {})
    parts.append(
        _table(
            ("target", "value", "target", "verdict"),
            (
                [
                    _esc(name),
                    f'<td class="num" data-target="{_esc(name)}" data-value="{t["value"]!r}">{_fmt(t["value"])}</td>',
                    f'<td class="num">{_fmt(t["target"])}</td>',
                    f'<span class="{"pass" if t["verdict"] == "met" else "fail"}">{_esc(t["verdict"])}</span>',
                ]
                for name, t in targets.items()
            ),
        )
    )
    rows = []
    for n in names:
        m, b = mixer["backends"].get(n, {}), norm["backends"].get(n, {})
        peak = m.get("peak_mem_bytes")
        rows.append(
            [
                _esc(n),
                f'<td class="num">{_fmt(m.get("fwd_ms"), ".4f")}</td>',
                f'<td class="num">{_fmt(m.get("fwd_bwd_ms"), ".4f")}</td>',
                f'<td class="num">{_fmt(peak / 2**30 if peak else None, ".3f")}</td>',
                f'<td class="num">{_fmt(b.get("bwd_ms"), ".4f")}</td>',
                f'<td class="num">{_fmt(b.get("fraction_of_floor"), ".2f")}</td>',
            ]
        )
    parts.append(
        _table(("backend", "mixer fwd ms", "mixer fwd+bwd ms", "peak GiB", "norm bwd ms", "norm of floor"), rows)
    )
    parts.append(f"<p>problem: <code>{_esc(json.dumps(mixer.get('problem')))}</code></p>")
    return "".join(parts)


def _tune_section(result: Result, label: str) -> str:
    trials = result.data["trials"]
    timed = sorted((t for t in trials if t["ms"] is not None), key=lambda t: t["ms"])
    parts = []
    if timed:
        fig = _figure(8.5, 3.2)
        ax = fig.subplots()
        for passed, colour, marker, name in (
            (True, GOOD, "o", "passes parity"),
            (False, OVER, "X", "fails parity"),
            (None, "#999", "o", "not judged"),
        ):
            xs = [i for i, t in enumerate(timed) if t["passed"] is passed]
            if xs:
                ax.scatter(xs, [timed[i]["ms"] for i in xs], color=colour, marker=marker, s=40, label=name, zorder=3)
        ax.plot(range(len(timed)), [t["ms"] for t in timed], color="#ccc", zorder=1)
        ax.set_xlabel("config (fastest first; numbers as in the table)")
        ax.set_ylabel("fwd+bwd median ms")
        ax.set_xticks(range(len(timed)))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        ax.set_title("tuning: time of each config, and its parity verdict", fontsize=10)
        parts.append(_img(f"tune:{label}", fig, "time per config"))
    rows = []
    for i, t in enumerate([*timed, *(t for t in trials if t["ms"] is None)]):
        verdict = {True: _verdict(True), False: _verdict(False), None: '<span class="muted">not judged</span>'}
        rows.append(
            [
                str(i) if t["ms"] is not None else "–",
                f'<td class="num" data-trial-ms="{t["ms"]!r}">{_fmt(t["ms"], ".4f")}</td>',
                verdict[t["passed"]],
                f"<code>{_esc(json.dumps(t['config']))}</code>",
                _esc(t.get("error") or (t.get("failure") or "").split("\n")[0]),
            ]
        )
    parts.append(_table(("#", "ms", "parity", "config", "error / first failure"), rows))
    return "".join(parts)


def _counterparts(result: Result) -> list[tuple[str, str, dict[str, Any]]]:
    """(phase, part, row) of a kernel-times result's parts against their mamba-ssm counterparts (older files: none)."""
    phases = result.data.get("counterparts", {})
    return [(phase, part, row) for phase, table in phases.items() for part, row in table.items()]


def _slower(row: dict[str, Any]) -> bool:
    """Whether a part's Helion kernels took longer than mamba-ssm's (the tuning issue's per-kernel target is 1.0x)."""
    return row["ratio"] is not None and row["ratio"] < 1


def _kernel_times_section(result: Result, label: str) -> str:
    """Per backend and phase, the total and each kernel's time per iteration, the largest first."""
    backends = result.data["backends"]
    rows = [
        [
            _esc(name),
            phase,
            f'<td class="num" data-kernel-us="{row["us"]!r}">{_fmt(row["us"], ".1f")}</td>',
            f'<td class="num">{_fmt(row["calls"], ".0f")}</td>',
            f"<code>{_esc(kernel)}</code>",
        ]
        for name, backend in backends.items()
        for phase in ("fwd", "bwd")
        for kernel, row in sorted(backend[phase].items(), key=lambda item: -item[1]["us"])
    ]
    totals = ", ".join(
        f"{_esc(name)} fwd {_fmt(b['fwd_us'], '.1f')} us, bwd {_fmt(b['bwd_us'], '.1f')} us"
        + "".join(
            f"; {phase} host {_fmt(b[f'{phase}_host']['host_us'], '.1f')} us to issue, "
            f"wall {_fmt(b[f'{phase}_host']['wall_us'], '.1f')} us"
            for phase in HOST_PHASES
            if f"{phase}_host" in b  # older files lack it
        )
        for name, b in backends.items()
    )
    pairs = [
        [
            phase,
            _esc(part),
            f'<td class="num">{_fmt(row["mamba_us"], ".1f")}</td>',
            f'<td class="num">{_fmt(row["helion_us"], ".1f")}</td>',
            f'<td class="num{" fail" if _slower(row) else ""}" '
            f'data-part-ratio="{phase}|{_esc(part)}">{"n/a" if row["ratio"] is None else _fmt(row["ratio"])}</td>',
        ]
        for phase, part, row in _counterparts(result)
    ]
    counterparts = (
        "<p>each part against its mamba-ssm counterpart (mamba-ssm us / Helion us; target &gt;= 1)</p>"
        + _table(("phase", "part", "mamba-ssm us", "Helion us", "ratio"), pairs)
        if pairs
        else ""
    )
    return (
        f"<p>per iteration: {totals}</p>"
        + counterparts
        + _table(("backend", "phase", "us", "launches", "kernel"), rows)
    )


# --- convergence: curves with the band, the verdicts, step times --------------------------------------------------


def _baseline(task: dict[str, Any]) -> str:
    """The run a convergence task compares every other run with: the first (bench/convergence.py trains mamba-ssm
    first)."""
    return next(iter(task["runs"]))


def _deviation(run: list[float], base: list[float]) -> list[float]:
    """|run - base| per step of both, NaN where it is 0 or not finite (a log axis draws neither)."""
    return [abs(r - b) if 0 < abs(r - b) < math.inf else math.nan for r, b in zip(run, base, strict=False)]


def _convergence_plot(plot: str, task_name: str, task: dict[str, Any]) -> str:
    """Loss and gradient norm (columns): every run's curve with the band a candidate must stay in (the run the
    band is measured from, +- the bound) shaded (top), and each run's |difference from it| against the bound, log
    scale (bottom)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    runs, band = task["runs"], task["band"]
    base_name = (band or {}).get("center") or _baseline(task)  # the run the band is measured from
    colours = {name: f"C{i % 10}" for i, name in enumerate(runs)}
    fig = _figure(11.5, 6.4, left=0.75, right=1.9, top=0.7, bottom=0.5)
    grid = fig.subplots(2, 2, sharex=True, squeeze=False)
    columns = (("losses", "loss", "loss"), ("grad_norms", "grad_norm", "gradient norm (before clipping)"))
    for column, (key, quantity, title) in enumerate(columns):
        top, bottom = grid[0][column], grid[1][column]
        base = runs[base_name][key]
        drawn: list[float] = []
        for name, run in runs.items():
            baseline = name == base_name
            top.plot(run[key], color=colours[name], lw=1.6 if baseline else 1.0, ls="-" if baseline else "--")
            if not baseline:
                deviation = _deviation(run[key], base)
                bottom.plot(deviation, color=colours[name], lw=1.0, marker=".", ms=3)
                drawn += deviation
        if band is not None:
            bound = band["bound"][quantity]
            steps = range(min(len(base), len(bound)))
            top.fill_between(
                steps,
                [b - d for b, d in zip(base, bound, strict=False)],
                [b + d for b, d in zip(base, bound, strict=False)],
                color=colours[base_name],
                alpha=0.25,
                lw=0,
            )
            bottom.plot(bound, color="black", lw=1.5)
            drawn += bound
        if any(0 < v < math.inf for v in drawn):
            bottom.set_yscale("log")
        if key == "losses":
            for level_name, level in (task["data"].get("levels") or {}).items():
                top.axhline(level, color="grey", lw=0.8, ls=":")
                top.annotate(level_name, (0, level), color="grey", fontsize=7, va="bottom")
        top.set_title(f"{task_name}: {title}", fontsize=9)
        bottom.set_title(f"|{quantity} - {base_name}'s| (0 not drawn)", fontsize=9)
        bottom.set_xlabel("step", fontsize=9)
        for ax in (top, bottom):
            ax.grid(alpha=0.3)
            ax.tick_params(labelsize=8)
    handles: list[Any] = [Line2D([], [], color=colours[n], ls="-" if n == base_name else "--", label=n) for n in runs]
    if band is not None:
        handles += [
            Patch(color=colours[base_name], alpha=0.25, label=f"{base_name} +- bound"),
            Line2D([], [], color="black", lw=1.5, label="bound"),
        ]
    fig.legend(handles=handles, loc="center right", fontsize=8, frameon=False)
    fig.suptitle(textwrap.fill(task["note"], 150), fontsize=9)  # a note on checks not judged runs long
    return _img(plot, fig, f"{task_name}: loss and gradient norm per step of each backend, with the band")


RATIOS = (
    ("loss_curve", "max_ratio"),
    ("grad_norm_curve", "max_ratio"),
    ("final_loss", "ratio"),
    ("params", "ratio"),
    ("same_weights_loss", "ratio"),
    ("same_weights_grad", "ratio"),
)
"""The checks of a convergence candidate's verdict and where each keeps its deviation / bound (the two
same-weights checks only in files that have them)."""


def _convergence_cell(verdict: dict[str, Any], check: str, key: str, step: str = "step ") -> tuple[str, bool]:
    """A check's ratio as text (with its worst step, and "not judged" where the band runs decorrelated) and
    whether it fails; "–" for a check the file lacks."""
    if check not in verdict:
        return "–", False
    found = verdict[check]
    judged = found.get("judged", True)
    text = _fmt(found[key]) + (f" ({step}{found['worst_step']})" if key == "max_ratio" else "")
    return text + ("" if judged else ", not judged"), judged and found[key] > 1


def _convergence_verdicts(task_name: str, task: dict[str, Any]) -> str:
    """Each candidate: its worst loss and gradient-norm step, final loss and parameters, as deviation from the
    baseline over the bound (pass <= 1), and its verdict."""
    rows = []
    for name, verdict in task["verdicts"].items():
        if "loss_curve" not in verdict:
            rows.append([_esc(name), f'<td colspan="7">{_esc(verdict["error"])}</td>', _verdict(verdict["passed"])])
            continue
        cells = []
        for check, key in RATIOS:
            text, failed = _convergence_cell(verdict, check, key)
            ratio = verdict[check][key] if check in verdict else None
            cells.append(
                f'<td class="num{" fail" if failed else ""}" data-convergence="{_esc(task_name)}|{_esc(name)}|'
                f'{check}" data-ratio="{ratio!r}">{_esc(text)}</td>'
            )
        final = f'<td class="num">{_fmt(verdict["final_loss"]["value"], ".5f")}</td>'
        error = f"<br>{_esc(verdict['error'])}" if verdict.get("error") else ""
        rows.append([_esc(name), *cells[:2], final, *cells[2:], _verdict(verdict["passed"]) + error])
    header = (
        "backend",
        "loss: worst deviation / bound (step)",
        "grad norm: worst deviation / bound (step)",
        "final loss",
        "final loss / bound",
        "params / bound",
        "loss at mamba's weights: RMS error / bound",
        "gradient at mamba's weights: RMS error / bound",
        "verdict",
    )
    return _table(header, rows)


def _convergence_times(task_name: str, task: dict[str, Any]) -> str:
    """Each run: steps done, last loss, median step time and the baseline's time over it, its error."""
    runs = task["runs"]
    base_ms = runs[_baseline(task)]["step_ms_median"]
    rows = []
    for name, run in runs.items():
        ms = run["step_ms_median"]
        rows.append(
            [
                _esc(name),
                f'<td class="num">{len(run["losses"])}</td>',
                f'<td class="num">{_fmt(run["losses"][-1] if run["losses"] else None, ".5f")}</td>',
                f'<td class="num" data-step-ms="{_esc(task_name)}|{_esc(name)}" data-ms="{ms!r}">'
                f"{_fmt(ms, '.2f')}</td>",
                f'<td class="num">{f"{base_ms / ms:.2f}x" if ms and base_ms else "–"}</td>',
                _esc(run["error"] or ""),
            ]
        )
    header = ("run", "steps", "last loss", "median step ms", f"{_baseline(task)} ms / run ms", "error")
    return _table(header, rows) + (
        f'<p class="muted">median over the steps after the first {task["timing_skips_steps"]} '
        "(compilation, autotuning).</p>"
    )


def _convergence_section(result: Result, label: str) -> str:
    """What was trained and how it was judged, then per task: the curves with the band, the verdicts, step times."""
    meta = result.meta
    pairs = [
        ("device", _esc(", ".join(str(meta[k]) for k in ("gpu", "device", "autocast") if meta.get(k)) or "?")),
        ("versions", _versions(meta)),
        ("model", f"<code>{_esc(json.dumps(meta.get('model')))}</code>"),
        ("training", f"<code>{_esc(json.dumps(meta.get('train')))}</code>"),
        ("Helion configs", f"<code>{_esc(json.dumps(meta.get('helion_configs')))}</code>"),
        ("bound", _esc(f"{meta.get('factor', '?')} x band + {meta.get('atol_rel', '?')} x |baseline value|")),
        ("timing", _esc(meta.get("timing", "?"))),
    ]
    parts = [_kv(pairs)]
    for task_name, task in result.data["tasks"].items():
        parts.append(
            f'<h3 id="{_esc(label)}-{_esc(task_name)}">{_esc(task_name)} {_verdict(task["passed"])}</h3>'
            f"<p>{_esc(task['note'])}</p>"
        )
        parts.append(_convergence_plot(f"convergence:{label}:{task_name}", task_name, task))
        parts.append(_convergence_verdicts(task_name, task))
        parts.append(_convergence_times(task_name, task))
    return "".join(parts)


# --- diffs ---------------------------------------------------------------------------------------------------------


def diff_rows(before: Result, after: Result) -> list[dict[str, Any]]:
    """Each (op, impl, dtype, quantity) in both files: worst err/bound before and after, largest growth first."""
    a, b = cells(before.cases), cells(after.cases)
    rows = []
    for key in a.keys() & b.keys():
        old, new = a[key][0], b[key][0]
        growth = new / old if old > 0 else (1.0 if new == 0 else math.inf)
        rows.append({"key": key, "before": old, "after": new, "growth": growth, "case": b[key][1]})
    return sorted(rows, key=lambda r: (-r["growth"], r["key"]))


def pairs(results: Sequence[Result]) -> list[tuple[Result, Result]]:
    """What to diff: each file with cases against the first file of its kind, where they share a cell."""
    first: dict[str, Result] = {}
    found = []
    for result in (r for r in results if r.cases):
        before = first.setdefault(result.kind, result)
        if before is not result and diff_rows(before, result):
            found.append((before, result))
    return found


def _diff_section(before: Result, after: Result, label: str, limit: int = 40) -> str:
    rows = diff_rows(before, after)
    fig = _figure(5.2, 4.4)
    ax = fig.subplots()
    xs = [max(r["before"], 1e-6) for r in rows]
    ys = [max(r["after"], 1e-6) for r in rows]
    colours = [OVER if r["growth"] > 1.05 else (GOOD if r["growth"] < 1 / 1.05 else "#888") for r in rows]
    ax.scatter(xs, ys, c=colours, s=22, alpha=0.8)
    low, high = min(xs + ys) / 2, max(max(xs + ys) * 2, 2)
    ax.plot([low, high], [low, high], color="#555", lw=1)
    ax.axhline(1, color=OVER, ls="--", lw=1)
    ax.axvline(1, color=OVER, ls="--", lw=1)
    ax.set(xscale="log", yscale="log", xlabel=f"err/bound in {before.name}", ylabel=f"err/bound in {after.name}")
    ax.set_title("each cell before and after (red: grew >5%, green: shrank)", fontsize=9)
    ax.grid(alpha=0.3)
    grew = sum(r["growth"] > 1.05 for r in rows)
    shrank = sum(r["growth"] < 1 / 1.05 for r in rows)
    table = [
        [
            _esc(" ".join(r["key"])),
            f'<td class="num">{_fmt(r["before"])}</td>',
            f'<td class="num{" fail" if r["after"] > 1 else ""}" data-diff="{_esc("|".join(r["key"]))}" '
            f'data-before="{r["before"]!r}" data-after="{r["after"]!r}">{_fmt(r["after"])}</td>',
            f'<td class="num">{_fmt(r["growth"], ".2f")}x</td>',
            f"<code>{_esc(r['case'].reproducer)}</code>",
        ]
        for r in rows[:limit]
    ]
    only = len(cells(before.cases).keys() ^ cells(after.cases).keys())
    return (
        f"<p>{len(rows)} cells in both: <b>{grew} grew</b> by more than 5%, {shrank} shrank"
        + (f"; {only} cells in only one of the files" if only else "")
        + ".</p>"
        + _img(f"diff:{label}", fig, "err/bound before and after")
        + _table(("op impl dtype quantity", "before", "after", "after / before", "worst case after: reproduce"), table)
    )


# --- the page and the summary --------------------------------------------------------------------------------------

SECTIONS: dict[str, Callable[[Result, str], str]] = {
    "check": _cases_section,
    "precision": _cases_section,
    "gate": _gate_section,
    "gate-speed": _gate_speed_section,
    "bench": _bench_section,
    "mixer": _mixer_section,
    "tune": _tune_section,
    "convergence": _convergence_section,
    "kernel-times": _kernel_times_section,
}


def _headline(result: Result) -> str:
    """One line of what the file says."""
    if result.cases:
        failed = sum(not c.passed for c in result.cases)
        ops = len({c.op for c in result.cases})
        worst = max(result.cases, key=lambda c: c.ratio)
        return (
            f"{len(result.cases)} cases over {ops} op{'s' if ops > 1 else ''}, {failed} failed; worst err/bound "
            f"{_fmt(worst.ratio)} "
            f"({worst.op} {worst.impl} {worst.dtype})"
        )
    if result.kind == "gate-speed":
        return "; ".join(
            f"{r['op']} {r['impl']} {r['dtype']}: {r['cases']} cases, {r.get('distinct_shapes', '?')} shapes in "
            f"{r.get('seconds', '?')} s"
            for r in result.data["results"]
        )
    if result.kind == "bench":
        speedups = [
            f"{r['op']} {t['speedup_vs_triton']:.2f}x"
            for r in result.data["rows"]
            for name, t in r["impls"].items()
            if name != "triton" and t.get("speedup_vs_triton")
        ]
        return "forward speedup over triton: " + ", ".join(speedups)
    if result.kind == "mixer":
        return "; ".join(
            f"{name} {t['value']:.3g} (target {t['target']:g}, {t['verdict']})"
            for name, t in result.data.get("targets", {}).items()
        )
    if result.kind == "tune":
        trials = result.data["trials"]
        return f"{len(trials)} configs, {sum(bool(t['passed']) for t in trials)} passing"
    if result.kind == "kernel-times":
        slower = [f"{phase} {part} {row['ratio']:.2f}x" for phase, part, row in _counterparts(result) if _slower(row)]
        return "; ".join(
            [
                f"{name}: fwd {b['fwd_us']:.1f} us, bwd {b['bwd_us']:.1f} us"
                for name, b in result.data["backends"].items()
            ]
            + ([f"Helion slower than mamba-ssm: {', '.join(slower)}"] if slower else [])
        )
    if result.kind == "convergence":
        return "; ".join(
            f"{task_name}: "
            + ", ".join(
                f"{name} {'pass' if v['passed'] else 'FAIL'}"
                + (f" (loss curve {_convergence_cell(v, 'loss_curve', 'max_ratio')[0]})" if "loss_curve" in v else "")
                for name, v in task["verdicts"].items()
            )
            for task_name, task in result.data["tasks"].items()
        )
    return ""


def _where(result: Result) -> str:
    meta = result.meta
    return ", ".join(str(meta[k]) for k in ("gpu", "device") if meta.get(k)) or "?"


def html_page(results: Sequence[Result]) -> str:
    """The whole report as one HTML document."""
    labels = [f"r{i}" for i in range(len(results))]
    overview = _table(
        ("input", "kind", "device", "verdict", "in one line"),
        (
            [
                f'<a href="#{label}">{_esc(r.path)}</a>',
                _esc(TITLES[r.kind]),
                _esc(_where(r)),
                _verdict(r.passed),
                _esc(_headline(r)),
            ]
            for r, label in zip(results, labels, strict=True)
        ),
    )
    files = f"{len(results)} input file{'s' if len(results) != 1 else ''}"
    body = [f"<h1>parity report</h1><p class='muted'>{files}</p>", overview]
    body.append(
        "<p class='muted'>Matrix cells: the worst max-abs error over its bound of each implementation, dtype and "
        "output/gradient, across every case (green far under the bound, red at it, dark red over it; hover a cell "
        "for its worst case and reproducer).</p>"
    )
    for result, label in zip(results, labels, strict=True):
        command = result.meta.get("command")
        body.append(
            f'<h2 id="{label}" data-input="{_esc(result.path)}" data-kind="{result.kind}">{_esc(result.path)}: '
            f"{_esc(TITLES[result.kind])} {_verdict(result.passed)}</h2>"
            + (f"<p>command: <code>{_esc(command)}</code></p>" if command else "")
            + f"<p>{_esc(_headline(result))}</p>"
        )
        body.append(SECTIONS[result.kind](result, label))
    for before, after in pairs(results):
        label = labels[results.index(after)]
        body.append(f'<h2 id="diff-{label}">diff: {_esc(before.path)} → {_esc(after.path)}</h2>')
        body.append(_diff_section(before, after, label))
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>parity report</title>'
        f"<style>{CSS}</style></head><body>{''.join(body)}</body></html>\n"
    )


def _convergence_md(result: Result) -> list[str]:
    """The verdict table of a convergence file (deviation / bound) and each run's step time."""
    lines = [
        "",
        f"## `{result.path}`: convergence, deviation / bound (pass <= 1)",
        "",
        "| task | backend | loss (worst step) | grad norm (worst step) | final loss | params "
        "| loss, same weights | gradient, same weights | verdict |",
        "|---|---|--:|--:|--:|--:|--:|--:|---|",
    ]
    times = []
    for task_name, task in result.data["tasks"].items():
        for name, v in task["verdicts"].items():
            verdict = "pass" if v["passed"] else "**FAIL**"
            if "loss_curve" not in v:
                lines.append(f"| {task_name} | {name} | | | | | | | {verdict}: {v['error']} |")
                continue
            cells = [_convergence_cell(v, check, key, step="")[0] for check, key in RATIOS]
            error = f": {v['error']}" if v.get("error") else ""
            lines.append(f"| {task_name} | {name} | {' | '.join(cells)} | {verdict}{error} |")
        steps = ", ".join(f"{name} {_fmt(run['step_ms_median'], '.2f')}" for name, run in task["runs"].items())
        times.append(f"- {task_name}, median step ms: {steps}")
    return [*lines, "", *times]


def summary_md(results: Sequence[Result], limit: int = 8) -> str:
    """A short Markdown summary for a pull request: one line per file, the per-op worst cases, failures."""
    lines = ["# parity report", "", "| input | kind | verdict | in one line |", "|---|---|---|---|"]
    for r in results:
        verdict = {True: "pass", False: "**FAIL**", None: "measurement"}[r.passed]
        lines.append(f"| `{r.path}` | {TITLES[r.kind]} | {verdict} | {_headline(r)} |")
    for r in results:
        if not r.cases:
            continue
        lines += [
            "",
            f"## `{r.path}`: worst err/bound per op",
            "",
            "| op | cases | failed | worst | at |",
            "|---|--:|--:|--:|---|",
        ]
        for op in sorted({c.op for c in r.cases}):
            mine = [c for c in r.cases if c.op == op]
            worst = max(mine, key=lambda c: c.ratio)
            lines.append(
                f"| {op} | {len(mine)} | {sum(not c.passed for c in mine)} | {_fmt(worst.ratio)} | "
                f"{worst.impl} {worst.dtype} |"
            )
        failed = [c for c in r.cases if not c.passed]
        for case in failed[:limit]:
            lines.append(f"- FAIL `{case.reproducer}`")
        if len(failed) > limit:
            lines.append(f"- … and {len(failed) - limit} more failing cases (index.html lists them)")
    for r in results:
        if r.kind == "convergence":
            lines += _convergence_md(r)
    for before, after in pairs(results):
        rows = [row for row in diff_rows(before, after) if row["growth"] > 1.05][:limit]
        lines += ["", f"## diff `{before.path}` → `{after.path}`: cells that grew", ""]
        lines += [f"- {' '.join(row['key'])}: {_fmt(row['before'])} → {_fmt(row['after'])}" for row in rows] or [
            "- none grew by more than 5%"
        ]
    return "\n".join(lines) + "\n"


def write(results: Sequence[Result], out: Path | str) -> Path:
    """Render everything first, then write ``out/index.html`` and ``out/summary.md`` atomically."""
    from parity.report import atomic_write

    require()
    page, summary = html_page(results), summary_md(results)
    out = Path(out)
    atomic_write(out / "index.html", page)
    atomic_write(out / "summary.md", summary)
    return out / "index.html"
