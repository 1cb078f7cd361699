"""The Markdown report: headline, environment, results table, comparison and failures, for docs and pull requests."""

from __future__ import annotations

from tracea_cli.bench.results import BenchResults, overview
from tracea_cli.report import units
from tracea_cli.text import config_text


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: list[list[str]], right: set[int] = frozenset()) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---:" if i in right else "---" for i in range(len(header))) + " |"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def render_markdown(results: BenchResults) -> str:
    env = results.environment
    ov = overview(results)
    rate, rate_div = units.rate_unit(results)
    bw, bw_div = units.bandwidth_unit(results)
    out = [f"# tracea bench: {env.suite} on {env.device}", ""]
    out.append(f"Measured {env.created} with `{env.command or 'tracea bench'}` (tracea {env.tracea_version}).")
    out.append("")
    if ov.speedup_geomean is not None:
        out.append(f"- Speed-up of the tuned kernel over {ov.baseline}: geometric mean **{ov.speedup_geomean:.2f}×** "
                   f"(range {ov.speedup_min:.2f}–{ov.speedup_max:.2f}); significantly faster on {ov.faster}, slower on {ov.slower} of {ov.problems} problems.")
    if ov.best_pct_of_ceiling is not None:
        out.append(f"- Best: {ov.best_pct_of_ceiling:.1f}% of the measured ceiling ({ov.best_pct_problem}).")
    out.append(f"- {ov.measured_rows} measurements, {ov.failures} failed or skipped, {ov.throttled_rows} overlapped throttling.")
    busy = units.busy_warning(env)
    if busy:
        out.append(f"- **Warning:** {busy}")
    if results.comparison is not None:
        out.append(f"- Compared with `{results.comparison.against}`: **{ov.regressions} regression(s)**.")
    out += ["", "## Environment", ""]
    env_rows = [["device", env.device], ["backend", env.backend + (f" ({env.arch})" if env.arch else "")], ["device class", env.device_class],
                ["machine id", env.machine_id or "-"], ["host load", units.load_text(env)], ["profile", f"schema {env.profile_schema_version}, made {env.profile_created}" if env.profile_created else "-"]]
    env_rows += [[str(k), str(v)] for k, v in env.host.items() if not isinstance(v, (dict, list))]
    packages = env.host.get("packages")
    if isinstance(packages, dict):
        env_rows.append(["packages", ", ".join(f"{k} {v}" for k, v in packages.items())])
    out += _table(["", ""], env_rows)
    out += ["", "## Results", "", "Times are medians of the raw samples; speed-ups are ratios of medians with a 95% bootstrap interval.", ""]
    rows = []
    for r in results.results:
        rows.append([r.problem, r.provider, units.ms(r.median_ms), units.iqr(r), units.cv(r.cv), str(r.n or "-"),
                     units.scaled(r.flops_per_s, rate_div), units.scaled(r.bytes_per_s, bw_div), units.pct(r.pct_of_ceiling),
                     units.speedup(r.speedup), units.notes(r)])
    out += _table(["problem", "provider", "median ms", "IQR ms", "cv", "n", rate, bw, "% ceiling", "speed-up [95% CI]", "notes"], rows, right=set(range(2, 10)))
    if any(units.above_ceiling(r) for r in results.results):
        out += ["", units.ABOVE_CEILING_NOTE]
    if units.no_ceilings(results):
        out += ["", units.NO_CEILINGS_NOTE]
    tuned = [(r.problem, r.config) for r in results.results if r.kind == "tuned" and r.config]
    if tuned:
        out += ["", "Tuned configurations:", ""]
        out += [f"- {p}: `{config_text(c)}`" for p, c in tuned]
    c = results.comparison
    if c is not None:
        out += ["", f"## Compared with {c.against}", "", f"Old results measured {c.against_created}. Significant: the whole 95% interval of the change lies beyond ±{100 * c.threshold:.0f}%.", ""]
        out += [f"> note: {w}" for w in c.warnings]
        out += _table(["problem", "provider", "old ms", "new ms", "time change [95% CI]", "verdict"],
                      [[ch.problem, ch.provider, units.ms(ch.old_median_ms), units.ms(ch.new_median_ms), units.ratio_change(ch.ratio),
                        "**REGRESSION**" if ch.regression else "improved" if ch.improvement else "no significant change"] for ch in c.changes],
                      right={2, 3, 4})
    failures = results.failures
    if failures:
        out += ["", "## Failures", ""]
        out += _table(["problem", "provider", "stage", "status", "configuration", "reason"],
                      [[f["problem"], f["provider"], f["stage"], f["status"], config_text(f.get("config")), f["reason"]] for f in failures])
    return "\n".join(out) + "\n"
