"""Report charts: matplotlib (no pyplot, no global state) drawn to inline SVG for the offline HTML report.

Every chart carries what it plots twice: a `<title>` on each mark (the browser shows it on hover) and the exact values
as JSON in a `<metadata class="tracea-chart-data">` block, so tests can check the chart against the JSON report.
Ids inside each SVG are prefixed with the chart's name, so several charts live in one HTML document.
"""

from __future__ import annotations

import html
import io
import json
import math
import re
from dataclasses import dataclass
from typing import Any

from tracea_cli.bench.results import TUNED, BenchResults, ProblemInfo
from tracea_cli.report import units

INK = "#1f2937"
MUTED = "#6b7280"
GRID = "#e5e7eb"
FASTER = "#15803d"
SLOWER = "#b91c1c"
SAME = "#64748b"
TRACEA = "#2563eb"
DTYPE_COLORS = {"fp32": "#2563eb", "tf32": "#7c3aed", "fp16": "#ea580c", "bf16": "#db2777", "fp64": "#0d9488"}
PROVIDER_MARKERS = {"tracea": "o", "cublas": "s", "numpy": "s", "torch": "D"}
WIDTH_IN = 10.5


@dataclass(frozen=True)
class Chart:
    name: str  # unique within a report; prefixes the SVG's ids
    svg: str  # inline SVG: no XML prolog, no DOCTYPE, no namespace URLs
    data: dict[str, Any]  # the plotted values, also embedded in the SVG


def _style() -> dict[str, Any]:
    return {
        "svg.fonttype": "none",  # text stays text: crisp, searchable, styled by the page's fonts
        "svg.hashsalt": "tracea",  # stable ids: the same data gives the same SVG
        "font.family": ["DejaVu Sans"],
        "font.size": 9.5,
        "axes.edgecolor": "#9ca3af",
        "axes.labelcolor": INK,
        "axes.titlesize": 10.5,
        "axes.titleweight": "bold",
        "axes.spines.top": False,
        "axes.spines.right": False,
        "xtick.color": MUTED,
        "ytick.color": MUTED,
        "legend.frameon": False,
    }


def _styled(draw):
    """Run a chart function inside the report's matplotlib style (also while saving: fonts are chosen then)."""
    import functools

    @functools.wraps(draw)
    def wrapper(*args, **kwargs):
        import matplotlib

        with matplotlib.rc_context(_style()):
            return draw(*args, **kwargs)

    return wrapper


def _figure(width_in: float, height_in: float):
    from matplotlib.backends.backend_svg import FigureCanvasSVG
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), layout="constrained")
    FigureCanvasSVG(fig)
    return fig


def _to_svg(fig, name: str, titles: dict[str, str], data: dict[str, Any]) -> Chart:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]  # drop the XML prolog and the DOCTYPE (which names a URL)
    svg = re.sub(r"<metadata>.*?</metadata>\s*", "", svg, count=1, flags=re.S)  # matplotlib's RDF block (URLs)
    svg = re.sub(r'\s+xmlns(:xlink)?="[^"]*"', "", svg)  # implied for SVG inside HTML
    for gid, title in titles.items():
        svg = svg.replace(f'<g id="{gid}">', f'<g id="{gid}" class="mark"><title>{html.escape(title)}</title>', 1)
    svg = re.sub(r'\bid="([^"]+)"', lambda m: f'id="{name}-{m.group(1)}"', svg)
    svg = re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{name}-{m.group(1)})", svg)
    svg = re.sub(r'href="#([^"]+)"', lambda m: f'href="#{name}-{m.group(1)}"', svg)
    svg = re.sub(r'<svg\s+width="[^"]*"\s+height="[^"]*"', f'<svg class="chart" role="img" aria-label="{html.escape(data.get("title", name))}"', svg, count=1)
    block = f'<metadata class="tracea-chart-data" data-chart="{name}">{html.escape(json.dumps(data, allow_nan=False))}</metadata>'
    svg = svg.replace(">", ">" + block, 1)  # right after the opening <svg ...> tag
    return Chart(name=name, svg=svg.strip(), data=data)


# ---------------------------------------------------------------------------------------------------------------


def _plain_log_ticks(axis) -> None:
    """1, 2, 5, 10, 20, ... written as plain numbers, not powers of ten."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


@_styled
def speedup_chart(results: BenchResults) -> Chart | None:
    """Speed-up of the tuned kernel over the baseline per problem: bars at the estimate, whiskers at the 95% interval."""
    rows = [r for r in results.results if r.kind == TUNED and r.speedup is not None]
    if not rows:
        return None
    over = ", ".join(dict.fromkeys(str(r.speedup_over) for r in rows))
    marks = [{"problem": r.problem, "over": r.speedup_over, "estimate": r.speedup.estimate, "low": r.speedup.low, "high": r.speedup.high}  # type: ignore[union-attr]
             for r in rows]
    fig = _figure(WIDTH_IN, 0.9 + 0.42 * len(rows))
    ax = fig.add_subplot()
    titles = {}
    ys = list(range(len(rows)))[::-1]
    hi = max(max(m["high"] for m in marks), 1.0)
    for y, m in zip(ys, marks):
        color = FASTER if m["low"] > 1 else SLOWER if m["high"] < 1 else SAME
        bar = ax.barh(y, m["estimate"], height=0.62, color=color, alpha=0.85)[0]
        gid = f"bar-{len(titles)}"
        bar.set_gid(gid)
        ax.plot([m["low"], m["high"]], [y, y], color=INK, lw=1.2, solid_capstyle="butt")
        for x in (m["low"], m["high"]):
            ax.plot([x, x], [y - 0.14, y + 0.14], color=INK, lw=1.2)
        ax.text(m["high"] + 0.012 * hi, y, f"{m['estimate']:.2f}×", va="center", ha="left", color=INK, fontsize=9)
        titles[gid] = f"{m['problem']}: {m['estimate']:.3f}× over {m['over']} (95% interval {m['low']:.3f}–{m['high']:.3f})"
    ax.axvline(1.0, color=INK, lw=1, ls="--")
    ax.set_yticks(ys, [m["problem"] for m in marks])
    ax.set_xlim(0, hi * 1.14)
    ax.set_xlabel(f"speed-up over {over} (median time ratio; whiskers: 95% interval)")
    ax.grid(axis="x", color=GRID, lw=0.8)
    ax.set_axisbelow(True)
    ax.tick_params(axis="y", length=0, labelcolor=INK)
    data = {"chart": "speedup", "title": f"Speed-up over {over}", "over": over, "marks": marks}
    return _to_svg(fig, "speedup", titles, data)


def _short(spec) -> str:
    """A compact name for a point on a chart: '1024³ fp32', '4096×7168×2048 bf16'."""
    m, n, k = spec.get("m"), spec.get("n"), spec.get("k")
    shape = f"{m}³" if m == n == k else f"{m}×{n}×{k}"
    return f"{shape} {spec.get('dtype', '')}".strip()


@_styled
def roofline_chart(results: BenchResults) -> Chart | None:
    """Each measured kernel at (FLOP per byte, FLOP/s) under the measured ceilings of its dtype."""
    probs = {p.problem: p for p in results.problems}
    rows = [r for r in results.results if r.ok and r.flops_per_s and r.bytes]
    if not rows:
        return None
    rate, div = units.rate_unit(results)
    ceilings: dict[str, dict[str, Any]] = {}
    for p in results.problems:
        dt = str(p.spec.get("dtype", "?"))
        if dt not in ceilings and (p.ceiling.flops_per_s or p.ceiling.bytes_per_s):
            ceilings[dt] = {"dtype": dt, "flops_per_s": p.ceiling.flops_per_s, "bytes_per_s": p.ceiling.bytes_per_s}
    marks = [{"problem": r.problem, "provider": r.provider, "dtype": str(probs[r.problem].spec.get("dtype", "?")),
              "intensity": r.flops / r.bytes, "flops_per_s": r.flops_per_s} for r in rows]
    xs = [m["intensity"] for m in marks]
    ys = [m["flops_per_s"] for m in marks]
    ridge = [c["flops_per_s"] / c["bytes_per_s"] for c in ceilings.values() if c["flops_per_s"] and c["bytes_per_s"]]
    peaks = [c["flops_per_s"] for c in ceilings.values() if c["flops_per_s"]]
    x_lo = min(xs + ridge) / 3
    x_hi = max(xs + ridge) * 3
    y_hi = max(ys + peaks) * 2.2
    y_lo = min(ys) / 4
    fig = _figure(WIDTH_IN, 4.6)
    titles = {}
    ax = fig.add_subplot()
    ax.set_xscale("log")
    ax.set_yscale("log")
    bw = next((c["bytes_per_s"] for c in ceilings.values() if c["bytes_per_s"]), None)
    if bw:
        top = max(peaks) if peaks else y_hi
        x_end = min(x_hi, top / bw)
        ax.plot([x_lo, x_end], [bw * x_lo / div, bw * x_end / div], color=INK, lw=1.6)
        x_mid = (x_lo * x_end) ** 0.5
        ax.text(x_mid * 1.15, bw * x_mid / 1.25 / div, f"memory {bw / 1e9:.3g} GB/s", color=INK, fontsize=8.5, ha="left", va="top")
    peaks_by_value: dict[float, list[str]] = {}
    for dt, c in ceilings.items():
        if c["flops_per_s"]:
            peaks_by_value.setdefault(c["flops_per_s"], []).append(dt)
    for rank, (peak, dts) in enumerate(sorted(peaks_by_value.items(), reverse=True)):  # one line per distinct peak
        color = DTYPE_COLORS.get(dts[0], INK) if len(dts) == 1 else INK
        x_start = peak / bw if bw else x_lo
        ax.plot([x_start, x_hi], [peak / div] * 2, color=color, lw=1.6)
        # Labels by the ridge (kernels of high intensity sit at the right end): the top one above its line, the
        # others below theirs, so that close peaks do not stack their labels.
        above = rank == 0
        ax.text(max(x_start, x_lo) * 1.12, peak * (1.08 if above else 1 / 1.08) / div, f"{', '.join(dts)} peak {units.scaled(peak, div)} {rate}",
                ha="left", va="bottom" if above else "top", color=color, fontsize=8.5)
    labelled: list[tuple[float, float]] = []
    for i, m in enumerate(marks):
        gid = f"point-{i}"
        marker = PROVIDER_MARKERS.get(m["provider"], "^")
        filled = m["provider"] == "tracea"
        color = DTYPE_COLORS.get(m["dtype"], INK)
        # tracea's filled markers above the baselines' hollow ones, so a baseline at the same point never hides it
        ax.plot([m["intensity"]], [m["flops_per_s"] / div], marker=marker, ms=7.5, ls="none", gid=gid,
                mfc=color if filled else "none", mec=color, mew=1.6, zorder=4 if filled else 3)
        titles[gid] = f"{m['problem']} · {m['provider']}: {units.scaled(m['flops_per_s'], div)} {rate} at {m['intensity']:.3g} FLOP/byte"
        if filled:  # label tracea's points; a label that would sit on an earlier one goes below its point instead
            here = (math.log10(m["intensity"]), math.log10(m["flops_per_s"]))
            crowded = sum(1 for x, y in labelled if abs(x - here[0]) < 0.2 and abs(y - here[1]) < 0.08)
            labelled.append(here)
            ax.annotate(_short(probs[m["problem"]].spec), (m["intensity"], m["flops_per_s"] / div), xytext=(6, 5 - 13 * crowded),
                        textcoords="offset points", fontsize=7.5, color=color)
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(y_lo / div, y_hi / div)
    _plain_log_ticks(ax.xaxis)
    _plain_log_ticks(ax.yaxis)
    ax.set_xlabel("arithmetic intensity (FLOP per byte moved, fewest bytes)")
    ax.set_ylabel(rate)
    ax.grid(True, which="major", color=GRID, lw=0.8)
    ax.set_axisbelow(True)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], marker=PROVIDER_MARKERS.get(p, "^"), ls="none", mfc=INK if p == "tracea" else "none", mec=INK, mew=1.4, ms=7, label=p)
               for p in dict.fromkeys(m["provider"] for m in marks)]
    handles += [Line2D([], [], color=DTYPE_COLORS.get(d, INK), lw=3, label=d) for d in dict.fromkeys(m["dtype"] for m in marks)]
    ax.legend(handles=handles, loc="lower right", ncols=2, fontsize=8.5)
    data = {"chart": "roofline", "title": "Roofline against the measured ceilings", "rate_unit": rate, "ceilings": list(ceilings.values()), "marks": marks}
    return _to_svg(fig, "roofline", titles, data)


@_styled
def convergence_chart(problem: ProblemInfo, index: int) -> Chart | None:
    """The tuning trials of one problem in the order they ran, and the best time found so far."""
    t = problem.tuning
    if t is None or not t.trials:
        return None
    ok = [(p.index, p.median_ms) for p in t.trials if p.median_ms is not None]
    failed = [p.index for p in t.trials if p.median_ms is None]
    best: list[float | None] = []
    current = math.inf
    for p in t.trials:
        if p.median_ms is not None:
            current = min(current, p.median_ms)
        best.append(None if math.isinf(current) else current)
    fig = _figure(4.0, 2.45)
    titles = {}
    ax = fig.add_subplot()
    for i, p in enumerate(t.trials):
        gid = f"trial-{i}"
        if p.median_ms is not None:
            ax.plot([p.index], [p.median_ms], "o", ms=4.5, color=MUTED, alpha=0.75, gid=gid)
            titles[gid] = f"trial {p.index}: {units.ms(p.median_ms)} ms"
    steps = [(p.index, b) for p, b in zip(t.trials, best) if b is not None]
    if steps:
        ax.step([s[0] for s in steps], [s[1] for s in steps], where="post", color=TRACEA, lw=2)
    if failed:
        top = max((v for _, v in ok), default=1.0)
        for j, idx in enumerate(failed):
            gid = f"failed-{j}"
            ax.plot([idx], [top * 1.12], "x", ms=5, color=SLOWER, mew=1.5, gid=gid)
            status = next(p.status for p in t.trials if p.index == idx)
            titles[gid] = f"trial {idx}: {status}"
    if ok and max(v for _, v in ok) / min(v for _, v in ok) > 8:
        ax.set_yscale("log")
        _plain_log_ticks(ax.yaxis)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(problem.problem, loc="left", fontsize=10)
    ax.set_xlabel("trial")
    ax.set_ylabel("median ms")
    ax.grid(True, color=GRID, lw=0.7)
    ax.set_axisbelow(True)
    data = {
        "chart": "convergence",
        "title": f"Tuning convergence: {problem.problem}",
        "problem": problem.problem,
        "trials": [{"index": p.index, "status": p.status, "median_ms": p.median_ms} for p in t.trials],
        "best_so_far_ms": best,
    }
    return _to_svg(fig, f"convergence-{index}", titles, data)
