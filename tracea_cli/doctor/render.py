"""The terminal view of a capability profile (rich): inventory, a ✓/!/✗ list of checks with fixes, and the measured
ceilings against the datasheet. Everything shown comes from the profile, so a saved profile renders the same."""

from __future__ import annotations

from typing import Iterable

from rich.console import Console
from rich.table import Table
from rich.text import Text

from tracea_cli.doctor.checks import CheckSpec
from tracea_cli.doctor.profile import FAIL, OK, SKIPPED, WARN, CapabilityProfile, Check, GpuInfo, Measurement

MARKS = {OK: ("✓", "green"), WARN: ("!", "yellow"), FAIL: ("✗", "red"), SKIPPED: ("–", "dim")}
GIB = 1024**3


def format_value(value: float | None, unit: str) -> str:
    """1.2e12 B/s -> "1.20 TB/s"; 3.1e11 FLOP/s -> "310 GFLOP/s"; microseconds stay as they are."""
    if value is None:
        return "–"
    if unit == "us":
        return f"{value:.2f} µs"
    base = unit.split("/")[0]
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            scaled = value / factor
            digits = 0 if scaled >= 100 else 1 if scaled >= 10 else 2
            return f"{scaled:.{digits}f} {prefix}{base}/s" if "/" in unit else f"{scaled:.{digits}f} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def _gib(n: int | None) -> str:
    return f"{n / GIB:.1f} GiB" if n else "?"


def _gpu_line(g: GpuInfo) -> str:
    d = g.details
    parts = [f"{g.label} {g.name}"]
    if g.compute_capability:
        parts.append(f"sm_{g.compute_capability[0]}{g.compute_capability[1]}")
    if g.sm_count:
        parts.append(f"{g.sm_count} {'SMs' if g.vendor == 'nvidia' else 'CUs' if g.vendor == 'amd' else 'cores'}")
    parts.append(_gib(g.memory_bytes))
    clocks = d.get("clocks_mhz") or {}
    if clocks.get("sm_max"):
        parts.append(f"SM {clocks.get('sm')}/{clocks.get('sm_max')} MHz")
    power = d.get("power_w") or {}
    if power.get("limit"):
        parts.append(f"{power.get('draw')}/{power.get('limit')} W")
    temp = (d.get("temperature_c") or {}).get("gpu")
    if temp is not None:
        parts.append(f"{temp} °C")
    pcie = d.get("pcie") or {}
    if pcie.get("generation"):
        parts.append(f"PCIe gen {pcie['generation']}/{pcie.get('generation_max')} x{pcie.get('width')}/{pcie.get('width_max')}")
    if g.pci_bus_id:
        parts.append(f"PCI {g.pci_bus_id}" + (f" = NVML {g.nvml_index}" if g.nvml_index is not None else ""))
    if g.index_source == "inferred":
        parts.append("CUDA index inferred (no CuPy)")
    if g.datasheet:
        parts.append(f"datasheet: {g.datasheet}")
    return " · ".join(parts)


def render_inventory(console: Console, p: CapabilityProfile) -> None:
    h, c, t = p.host, p.cpu, p.toolchain
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()

    def row(label: str, text: str) -> None:  # Text, so "[cuda]" in a hint is not read as markup
        grid.add_row(label, Text(text))

    row("Host", f"{h.os_release} ({h.machine}), {h.python}" + (", in a container" if h.container else ""))
    simd = ", ".join(c.simd) or "none reported"
    caches = ", ".join(f"{k} {_gib(v) if v >= GIB else f'{v // 1024} KiB' if v < 1024**2 else f'{v // 1024**2} MiB'}"
                       for k, v in c.caches.items())
    row("CPU", f"{c.model} · {c.cores} cores / {c.threads} threads ({c.usable_threads} usable) · {_gib(c.memory_bytes)}")
    row("", f"SIMD: {simd}")
    if caches:
        row("", f"caches: {caches}")
    gpus = [_gpu_line(g) for g in p.gpus] or ["none found"]
    for i, line in enumerate(gpus):
        row("GPUs" if i == 0 else "", line)
    tool = [f"NVRTC {t.nvrtc_version}" if t.nvrtc_version else "NVRTC absent"]
    tool.append(f"{t.cupy_distribution} {t.cupy_version}" if t.cupy_distribution else "CuPy absent")
    if t.driver_version:
        tool.append(f"driver {t.driver_version} (CUDA {t.cuda_driver_version // 1000}.{t.cuda_driver_version % 1000 // 10})"
                    if t.cuda_driver_version else f"driver {t.driver_version}")
    row("Toolchain", " · ".join(tool))
    packages = ", ".join(f"{k} {v}" for k, v in h.packages.items() if v and k in ("numpy", "numba", "scikit-optimize", "torch"))
    if packages:
        row("Packages", packages)
    for i, a in enumerate(p.absent):
        hint = f" ({a.hint})" if a.hint else ""
        row("Absent" if i == 0 else "", f"{a.component}: {a.reason}{hint}")
    console.print(grid)


def render_checks(console: Console, findings: Iterable[Check]) -> None:
    findings = list(findings)
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(no_wrap=True)
    grid.add_column()
    for c in findings:
        mark, style = MARKS[c.status]
        name = c.id + (f" {c.device}" if c.device else "")
        if c.status == SKIPPED:
            body = Text(f"skipped: {c.reason}", style="dim")
        else:
            body = Text(c.evidence)
            if c.fix and c.status in (WARN, FAIL):
                body.append(f"\nfix: {c.fix}", style=style)
        grid.add_row(Text(f" {mark}", style=f"bold {style}"), Text(name, style="dim" if c.status == SKIPPED else "bold"), body)
    console.print(grid)
    counts = {s: sum(1 for c in findings if c.status == s) for s in (OK, WARN, FAIL, SKIPPED)}
    console.print(Text(f" {counts[OK]} ok, {counts[WARN]} warnings, {counts[FAIL]} failed, {counts[SKIPPED]} skipped",
                       style="bold"))


def _what(m: Measurement) -> str:
    name = {"memory_bandwidth": "memory bandwidth", "gemm_flops": "GEMM", "launch_latency": "launch latency",
            "h2d_bandwidth": "host→device", "d2h_bandwidth": "device→host"}.get(m.metric, m.metric)
    if m.dtype:
        name += f" {m.dtype}"
    if m.threads is not None:
        name += f", {m.threads} thread{'s' if m.threads != 1 else ''}"
    return name


def render_measured(console: Console, p: CapabilityProfile) -> None:
    if not p.measured and not p.not_measured:
        console.print(Text("No measurements yet: run `tracea doctor` without --quick.", style="dim"))
        return
    table = Table(title="Measured ceilings" + (f" ({p.measured_created})" if p.measured_created else ""),
                  title_justify="left", show_edge=False, pad_edge=False)
    for col, justify in (("device", "left"), ("what", "left"), ("median", "right"), ("noise (cv)", "right"),
                         ("n", "right"), ("datasheet", "right"), ("% of datasheet", "right")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for m in p.measured:
        pct = m.percent_of_datasheet
        flag = (" (throttled)" if m.throttled_fraction > 0.2 else "") + (" (busy)" if m.busy else "")
        table.add_row(m.device, _what(m), format_value(m.median, m.unit), f"{100 * m.cv:.1f}%", str(m.n),
                      format_value(m.datasheet, m.unit) if m.datasheet else "–",
                      (f"{pct:.0f}%" if pct is not None else "–") + flag)
    console.print(table)
    busy = [m for m in p.measured if m.busy]
    if busy:
        console.print(Text(f" ! {len(busy)} measured while the machine was busy ({busy[0].busy}): those figures are the "
                           "machine's, not the hardware's; run `tracea doctor` again when it is quiet", style="yellow"))
    for n in p.not_measured:
        what = n.metric + (f" {n.dtype}" if n.dtype else "")
        console.print(Text(f" – {n.device} {what}: not measured: {n.reason}", style="dim"))


def render_profile(console: Console, p: CapabilityProfile) -> None:
    console.print(Text(f"tracea doctor · {p.kind} run · {p.created} · machine {p.machine_id}", style="bold"))
    render_inventory(console, p)
    console.print()
    console.print(Text("Checks", style="bold underline"))
    render_checks(console, p.checks)
    console.print()
    render_measured(console, p)


def render_check_list(console: Console, specs: Iterable[CheckSpec]) -> None:
    table = Table(show_edge=False, pad_edge=False, box=None)
    table.add_column("check", style="bold")
    table.add_column("what it checks")
    for s in specs:
        table.add_row(s.id, s.title)
    console.print(table)


def render_ray_cluster(console: Console, cluster) -> None:
    """The Ray cluster `tracea doctor --ray-address` sees (doctor/cluster.RayCluster): one row per live node."""
    table = Table(title=f"Ray cluster at {cluster.address} (Ray {cluster.ray_version})")
    table.add_column("node")
    table.add_column("CPUs", justify="right")
    table.add_column("GPUs", justify="right")
    table.add_column("GPU kinds (as Ray names them)")
    for n in cluster.nodes:
        table.add_row(n.address, f"{n.cpus:g}", f"{n.gpus:g}", ", ".join(n.gpu_kinds) or "–")
    console.print(table)
    kinds = cluster.device_classes
    summary = f"{len(cluster.nodes)} node(s), {cluster.gpus:g} GPU(s)"
    if len(kinds) > 1:
        summary += f"; {len(kinds)} GPU kinds ({', '.join(kinds)}): tune each kind from a driver on a node of that kind"
    elif kinds:
        summary += f", all {kinds[0]}"
    console.print(summary, markup=False)
