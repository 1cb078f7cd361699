"""The HTML report: one self-contained file (inline CSS and SVG, no script, no external URL) that works offline.

Sections: summary, environment, results, speed-up chart, roofline, tuning convergence per problem, comparison (with
`--compare`), failures. Everything is rendered from `BenchResults`; charts come from `charts`.
"""

from __future__ import annotations

from html import escape

from tracea_cli.bench.results import TUNED, BenchResults, overview
from tracea_cli.report import charts, units
from tracea_cli.text import config_text

CSS = """
:root { --ink:#1f2937; --muted:#6b7280; --line:#e5e7eb; --soft:#f8fafc; --accent:#2563eb; --good:#15803d; --bad:#b91c1c; --warn:#b45309; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: var(--ink); background: #fff; }
main { max-width: 1240px; margin: 0 auto; padding: 28px 32px 48px; }
header h1 { font-size: 24px; margin: 0 0 4px; letter-spacing: -0.01em; }
header .meta { color: var(--muted); margin: 0; }
header code, td code { font: 12.5px/1.4 ui-monospace, "DejaVu Sans Mono", monospace; background: var(--soft); padding: 1px 5px; border-radius: 4px; }
h2 { font-size: 17px; margin: 34px 0 10px; padding-bottom: 6px; border-bottom: 1px solid var(--line); }
p.note { color: var(--muted); margin: 6px 0 10px; max-width: 980px; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(160px, 1fr)); gap: 12px; margin-top: 22px; }
.card { border: 1px solid var(--line); border-radius: 10px; padding: 12px 14px; background: var(--soft); }
.card .label { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: 0.04em; }
.card .value { font-size: 22px; font-weight: 650; margin-top: 2px; font-variant-numeric: tabular-nums; }
.card .sub { color: var(--muted); font-size: 12.5px; }
.card.good .value { color: var(--good); } .card.bad .value { color: var(--bad); } .card.warn .value { color: var(--warn); }
table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
th, td { padding: 5px 9px; border-bottom: 1px solid var(--line); text-align: left; vertical-align: top; }
th { font-size: 12px; color: var(--muted); font-weight: 600; text-transform: uppercase; letter-spacing: 0.03em; background: #fff; position: sticky; top: 0; }
td.num, th.num { text-align: right; white-space: nowrap; }
td.problem { white-space: nowrap; font-weight: 550; }
tbody tr.first td { border-top: 1.5px solid #cbd5e1; }
tbody tr.tuned td.provider { font-weight: 650; color: var(--accent); }
tr.failed td { color: var(--bad); }
table.env { width: auto; min-width: 50%; } table.env td:first-child { color: var(--muted); white-space: nowrap; }
.badge { display: inline-block; padding: 0 7px; border-radius: 9px; font-size: 12px; font-weight: 600; }
.badge.good { background: #dcfce7; color: var(--good); } .badge.bad { background: #fee2e2; color: var(--bad); }
.badge.warn { background: #fef3c7; color: var(--warn); } .badge.same { background: #f1f5f9; color: var(--muted); }
svg.chart { width: 100%; height: auto; display: block; }
.chart-box { border: 1px solid var(--line); border-radius: 10px; padding: 10px; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(360px, 1fr)); gap: 12px; }
.config { color: var(--muted); font-size: 12px; }
tr.config-row td { border-top: none; padding-top: 0; }
tbody tr.has-config td { border-bottom: none; }
footer { margin-top: 40px; color: var(--muted); font-size: 12.5px; border-top: 1px solid var(--line); padding-top: 12px; }
"""


def _num_cell(text: str) -> str:
    return f'<td class="num">{escape(text)}</td>'


def _card(label: str, value: str, sub: str = "", tone: str = "") -> str:
    return (f'<div class="card {tone}"><div class="label">{escape(label)}</div><div class="value">{escape(value)}</div>'
            f'<div class="sub">{escape(sub)}</div></div>')


def _summary(results: BenchResults) -> str:
    ov = overview(results)
    cards = []
    if ov.speedup_geomean is not None:
        tone = "good" if ov.faster and not ov.slower else "bad" if ov.slower and not ov.faster else ""
        cards.append(_card(f"speed-up over {ov.baseline}", f"{ov.speedup_geomean:.2f}×",
                           f"geometric mean; range {ov.speedup_min:.2f}–{ov.speedup_max:.2f}×", tone))
        cards.append(_card("faster / slower", f"{ov.faster} / {ov.slower}", f"of {ov.problems} problems, by the 95% interval"))
    if ov.best_pct_of_ceiling is not None:
        cards.append(_card("best % of ceiling", f"{ov.best_pct_of_ceiling:.1f}%", ov.best_pct_problem or ""))
    cards.append(_card("measurements", str(ov.measured_rows), f"{ov.problems} problems"))
    tuning_failures = sum(len(p.tuning.failures) for p in results.problems if p.tuning is not None)
    cards.append(_card("failures", str(ov.failures), f"failed or skipped rows; {tuning_failures} configurations failed in tuning",
                       "bad" if ov.failures else "good"))
    env = results.environment
    if env.load is not None:
        cards.append(_card("host load", f"{max(env.load.start, env.load.end):.1f}",
                           f"load average on {env.load.cpu_threads} CPU threads" + (": busy, times less reliable" if env.busy else ""),
                           "warn" if env.busy else ""))
    if ov.throttled_rows:
        cards.append(_card("throttled", str(ov.throttled_rows), "rows overlapping clock throttling", "warn"))
    if results.comparison is not None:
        cards.append(_card("regressions", str(ov.regressions), f"against {results.comparison.against}", "bad" if ov.regressions else "good"))
    busy = units.busy_warning(results.environment)
    warning = f'<p class="note"><span class="badge warn">warning</span> {escape(busy)}</p>' if busy else ""
    return '<section id="summary"><div class="cards">' + "".join(cards) + f"</div>{warning}</section>"


def _environment(results: BenchResults) -> str:
    env = results.environment
    rows = [("device", env.device), ("backend", env.backend + (f" ({env.arch})" if env.arch else "")), ("device class", env.device_class),
            ("suite", env.suite), ("command", env.command or "tracea bench"), ("measured", env.created), ("tracea", env.tracea_version),
            ("machine id", env.machine_id or "-"), ("host load", units.load_text(env)),
            ("capability profile", f"schema {env.profile_schema_version}, made {env.profile_created}" if env.profile_created else "-")]
    for k, v in env.host.items():
        if isinstance(v, dict):
            v = ", ".join(f"{a} {b}" for a, b in v.items())
        elif isinstance(v, list):
            v = ", ".join(map(str, v))
        rows.append((str(k), str(v)))
    body = "".join(f"<tr><td>{escape(k)}</td><td>{escape(str(v))}</td></tr>" for k, v in rows)
    return f'<section id="environment"><h2>Environment</h2><table class="env"><tbody>{body}</tbody></table></section>'


def _results_table(results: BenchResults) -> str:
    rate, rate_div = units.rate_unit(results)
    bw, bw_div = units.bandwidth_unit(results)
    head = ["problem", "provider", "median ms", "IQR ms", "cv", "n", rate, bw, "% ceiling", "speed-up [95% CI]", "notes"]
    numeric = set(range(2, 10))
    thead = "".join(f'<th class="num">{escape(h)}</th>' if i in numeric else f"<th>{escape(h)}</th>" for i, h in enumerate(head))
    body = []
    for p in results.problems:
        rows = results.rows_for(p.problem)
        for i, r in enumerate(rows):
            classes = " ".join(c for c in ("first" if i == 0 else "", "tuned" if r.kind == TUNED else "", "" if r.ok else "failed",
                                           "has-config" if r.config or not r.ok else "") if c)
            speed = units.speedup(r.speedup)
            if r.speedup is not None:
                tone = "good" if r.speedup.low > 1 else "bad" if r.speedup.high < 1 else "same"
                speed_html = f'<td class="num"><span class="badge {tone}">{escape(speed)}</span></td>'
            else:
                speed_html = _num_cell(speed)
            notes = escape(r.status if not r.ok else units.notes(r))
            if r.throttled:
                notes = f'<span class="badge warn">{notes}</span>'
            body.append(
                f'<tr class="{classes}"><td class="problem">{escape(p.problem) if i == 0 else ""}</td><td class="provider">{escape(r.provider)}</td>'
                + _num_cell(units.ms(r.median_ms)) + _num_cell(units.iqr(r)) + _num_cell(units.cv(r.cv)) + _num_cell(str(r.n or "-"))
                + _num_cell(units.scaled(r.flops_per_s, rate_div)) + _num_cell(units.scaled(r.bytes_per_s, bw_div))
                + (f'<td class="num"><span class="badge warn">{escape(units.pct(r.pct_of_ceiling))}</span></td>' if units.above_ceiling(r)
                   else _num_cell(units.pct(r.pct_of_ceiling))) + speed_html + f"<td>{notes}</td></tr>"
            )
            if r.config:
                body.append(f'<tr class="config-row"><td></td><td colspan="{len(head) - 1}" class="config">configuration: '
                            f"<code>{escape(config_text(r.config))}</code></td></tr>")
            elif not r.ok:
                body.append(f'<tr class="config-row failed"><td></td><td colspan="{len(head) - 1}">{escape(r.reason)}</td></tr>')
    note = ("Times are medians of raw samples (IQR: first to third quartile; cv: standard deviation over mean). "
            "Speed-up: the baseline's median time over the tuned kernel's, with a 95% bootstrap interval. "
            "% ceiling: achieved FLOP/s over the roofline of the measured ceilings at the problem's arithmetic intensity. "
            "Every kernel and baseline was checked against a float64 reference before it was timed.")
    footnote = f'<p class="note">{escape(units.ABOVE_CEILING_NOTE)}</p>' if any(units.above_ceiling(r) for r in results.results) else ""
    return (f'<section id="results"><h2>Results</h2><p class="note">{escape(note)}</p>'
            f"<table><thead><tr>{thead}</tr></thead><tbody>{''.join(body)}</tbody></table>{footnote}</section>")


def _chart_section(section_id: str, title: str, chart, note: str, empty: str) -> str:
    inner = f'<div class="chart-box">{chart.svg}</div>' if chart is not None else f'<p class="note">{escape(empty)}</p>'
    return f'<section id="{section_id}"><h2>{escape(title)}</h2><p class="note">{escape(note)}</p>{inner}</section>'


def _roofline_note(results: BenchResults) -> str:
    head = "Filled markers: tracea's tuned kernels; open markers: baselines."
    if units.no_ceilings(results):
        return f"{head} {units.NO_CEILINGS_NOTE}"
    sources = []
    for p in results.problems:
        text = f"{p.spec.get('dtype')}: compute {p.ceiling.flops_source}; bandwidth {p.ceiling.bytes_source}"
        if text not in sources:
            sources.append(text)
    return head + " Lines: the ceilings measured on this machine (" + "; ".join(sources) + ")."


def _convergence(results: BenchResults) -> str:
    boxes = []
    for i, p in enumerate(results.problems):
        chart = charts.convergence_chart(p, i)
        if chart is None:
            continue
        t = p.tuning
        how = "cache hit" if t.cache_hit else f"{t.evaluations} evaluations this run"
        boxes.append(f'<div class="chart-box">{chart.svg}<p class="note">{escape(how)}; {t.trials_total} trials stored; key <code>{escape(t.key)}</code>'
                     f"{'; stopped: ' + escape(t.stopped_because) if t.stopped_because else ''}</p></div>")
    note = "Each dot is one configuration's median time, in the order the search tried it; the line is the best found so far; crosses are failed trials."
    if not boxes:
        return '<section id="convergence"><h2>Tuning convergence</h2><p class="note">No tuning trials are recorded for these problems.</p></section>'
    return f'<section id="convergence"><h2>Tuning convergence</h2><p class="note">{escape(note)}</p><div class="grid">{"".join(boxes)}</div></section>'


def _comparison(results: BenchResults) -> str:
    c = results.comparison
    if c is None:
        return ""
    rows = []
    for ch in c.changes:
        verdict = '<span class="badge bad">regression</span>' if ch.regression else '<span class="badge good">improved</span>' if ch.improvement else '<span class="badge same">no significant change</span>'
        rows.append(f"<tr><td>{escape(ch.problem)}</td><td>{escape(ch.provider)}</td>" + _num_cell(units.ms(ch.old_median_ms)) + _num_cell(units.ms(ch.new_median_ms))
                    + _num_cell(units.ratio_change(ch.ratio)) + f"<td>{verdict}</td></tr>")
    warnings = "".join(f'<p class="note"><span class="badge warn">note</span> {escape(w)}</p>' for w in c.warnings)
    unmatched = f'<p class="note">Not in both: {escape(", ".join(c.unmatched))}</p>' if c.unmatched else ""
    note = (f"Against {c.against} (measured {c.against_created}). A change is significant when the whole 95% interval of new/old time "
            f"lies beyond ±{100 * c.threshold:.0f}%.")
    return (f'<section id="comparison"><h2>Comparison</h2><p class="note">{escape(note)}</p>{warnings}<table><thead><tr><th>problem</th><th>provider</th>'
            f'<th class="num">old ms</th><th class="num">new ms</th><th class="num">time change [95% CI]</th><th>verdict</th></tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>{unmatched}</section>")


def _code(text: str) -> str:
    return f"<code>{escape(text)}</code>" if text else ""


def _failures(results: BenchResults) -> str:
    failures = results.failures
    if not failures:
        return '<section id="failures"><h2>Failures</h2><p class="note">None: every measurement ran and passed its correctness check.</p></section>'
    rows = "".join(
        f"<tr><td>{escape(f['problem'])}</td><td>{escape(f['provider'])}</td><td>{escape(f['stage'])}</td><td><span class=\"badge bad\">{escape(str(f['status']))}</span></td>"
        f"<td>{_code(config_text(f.get('config')))}</td><td>{escape(str(f['reason']))}</td></tr>"
        for f in failures
    )
    return ('<section id="failures"><h2>Failures</h2><p class="note">Configurations that failed while tuning were never timed or ranked; '
            "rows that failed or were skipped in this run have no figures.</p><table><thead><tr><th>problem</th><th>provider</th><th>stage</th>"
            f"<th>status</th><th>configuration</th><th>reason</th></tr></thead><tbody>{rows}</tbody></table></section>")


def render_html(results: BenchResults, *, json_file: str | None = None) -> str:
    env = results.environment
    speed = charts.speedup_chart(results)
    roof = charts.roofline_chart(results)
    title = f"tracea bench · {env.suite} on {env.device}"
    over = speed.data["over"] if speed else "the baseline"
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body><main>",
        f'<header><h1>{escape(title)}</h1><p class="meta">{escape(env.created)} · {escape(env.backend)}{" · " + escape(env.arch) if env.arch else ""}'
        f" · tracea {escape(env.tracea_version)} · <code>{escape(env.command or 'tracea bench')}</code></p></header>",
        _summary(results),
        _results_table(results),
        _chart_section("speedup", "Speed-up", speed,
                       f"The tuned kernel's speed-up over {over} per problem: bars at the ratio of median times, whiskers at its 95% interval; "
                       "green: faster by the whole interval, red: slower, grey: not distinguishable.",
                       "No speed-up to show: no problem has both a tuned kernel and a baseline measurement."),
        _chart_section("roofline", "Roofline", roof, _roofline_note(results), "No measurement to place on a roofline."),
        _convergence(results),
        _comparison(results),
        _failures(results),
        _environment(results),
        f"<footer>Written by tracea {escape(env.tracea_version)}. Every figure was measured in the run above; "
        + (f"the raw samples are in the JSON report {escape(json_file)}." if json_file else
           "add <code>--report json</code> to keep the raw samples.") + "</footer>",
        "</main></body></html>",
    ]
    return "\n".join(p for p in parts if p) + "\n"
