"""How busy this machine was while we measured: the CPU time other processes took, CPU steal (a hypervisor running
someone else on our CPUs) and the load average, between two samples of /proc.

    meter = LoadMeter()            # samples now
    ... measure ...
    busy = meter.stop()            # what happened on the CPUs since
    if busy.busy: warn(busy.text)

"Ours" is this process and its descendants (tuning workers are ours, not competition). Where /proc is missing (not
Linux) the meter reports nothing (None) rather than guessing.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROC = Path("/proc")
OTHERS_FRACTION = 0.1  # other processes using more than this share of our threads (plus a quarter thread) is busy
OTHERS_FLOOR = 0.25
STEAL_FRACTION = 0.05  # more than 5% of the CPU time stolen is busy


def _threads() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _tick() -> float:
    try:
        return float(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError, AttributeError):
        return 100.0


def competed(others_threads: float, steal_fraction: float, threads: int) -> bool:
    """Whether other work took enough of our CPUs to make timings unreliable."""
    return others_threads > OTHERS_FLOOR + OTHERS_FRACTION * threads or steal_fraction > STEAL_FRACTION


@dataclass(frozen=True)
class CpuSample:
    at: float  # time.monotonic()
    busy_s: float  # CPU seconds all CPUs spent working (user, nice, system, irq, softirq) since boot
    steal_s: float
    ours_s: float  # CPU seconds of this process and its descendants (live ones, and reaped children)
    load1: float | None


def _stat_cpu(proc: Path) -> tuple[float, float] | None:
    try:
        first = (proc / "stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    if not first or first[0] != "cpu":
        return None
    values = [float(v) for v in first[1:]] + [0.0] * 8
    user, nice, system, _idle, _iowait, irq, softirq, steal = values[:8]
    tick = _tick()
    return (user + nice + system + irq + softirq) / tick, steal / tick


def _ours(proc: Path, me: int) -> float:
    """CPU seconds of `me` and every live descendant, plus what reaped children left in `me`'s counters."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    tick = _tick()
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        fields = text[text.rfind(")") + 2:].split()  # after "pid (comm) "
        pid = int(entry.name)
        parents[pid] = int(fields[1])
        utime, stime, cutime, cstime = (float(v) for v in fields[11:15])
        cpu[pid] = (utime + stime + (cutime + cstime if pid == me else 0.0)) / tick
    total = 0.0
    for pid, seconds in cpu.items():
        p, hops = pid, 0
        while p and p != me and hops < 64:
            p, hops = parents.get(p, 0), hops + 1
        if p == me:
            total += seconds
    return total


def sample(proc: Path = PROC) -> CpuSample | None:
    stat = _stat_cpu(proc)
    if stat is None:
        return None
    try:
        load1: float | None = os.getloadavg()[0]
    except (AttributeError, OSError):
        load1 = None
    return CpuSample(time.monotonic(), stat[0], stat[1], _ours(proc, os.getpid()), load1)


@dataclass(frozen=True)
class HostBusy:
    """What the CPUs did between two samples: `others_threads` is how many of our `threads` other processes kept
    busy on average, `steal_fraction` the share of CPU time the hypervisor gave to others."""

    seconds: float
    threads: int
    others_threads: float
    steal_fraction: float
    load_start: float | None = None
    load_end: float | None = None

    @property
    def busy(self) -> bool:
        return competed(self.others_threads, self.steal_fraction, self.threads)

    @property
    def text(self) -> str:
        load = ""
        if self.load_start is not None and self.load_end is not None:
            load = f", load average {self.load_start:.1f} -> {self.load_end:.1f}"
        return (f"other processes kept {self.others_threads:.1f} of {self.threads} CPU threads busy over "
                f"{self.seconds:.0f} s, CPU steal {100 * self.steal_fraction:.0f}%{load}")

    def as_dict(self) -> dict[str, Any]:
        return {"seconds": self.seconds, "threads": self.threads, "others_threads": self.others_threads,
                "steal_fraction": self.steal_fraction, "load_start": self.load_start, "load_end": self.load_end,
                "busy": self.busy}


def between(a: CpuSample, b: CpuSample, threads: int | None = None) -> HostBusy:
    threads = threads or _threads()
    wall = max(b.at - a.at, 1e-6)
    others = max(0.0, (b.busy_s - a.busy_s) - (b.ours_s - a.ours_s)) / wall
    steal = max(0.0, b.steal_s - a.steal_s) / (wall * threads)
    return HostBusy(wall, threads, min(others, float(os.cpu_count() or threads)), min(steal, 1.0), a.load1, b.load1)


class LoadMeter:
    """Samples at creation; `stop()` says what happened since (None where the platform cannot tell)."""

    def __init__(self, proc: Path = PROC) -> None:
        self._proc = proc
        self._start = sample(proc)

    def stop(self) -> HostBusy | None:
        end = sample(self._proc)
        if self._start is None or end is None:
            return None
        return between(self._start, end)
