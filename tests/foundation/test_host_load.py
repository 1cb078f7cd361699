"""host_load: other processes' CPU time is seen as competition, ours (our children's included) is not."""

from __future__ import annotations

import multiprocessing as mp
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tracea_cli.host_load import HostBusy, LoadMeter, between, competed, sample

pytestmark = pytest.mark.skipif(not Path("/proc/stat").exists(), reason="needs Linux /proc")

SPIN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass\n"  # CPU seconds, not wall


def _spin(cpu_seconds: float) -> None:
    exec(SPIN.format(s=cpu_seconds))


def test_our_childrens_cpu_time_is_ours():
    a = sample()
    child = mp.get_context("spawn").Process(target=_spin, args=(0.8,))
    child.start()
    child.join()
    _spin(0.3)
    b = sample()
    assert b.ours_s - a.ours_s >= 1.0  # the child's 0.8 s (reaped) and our own 0.3 s


def test_a_process_that_is_not_ours_is_competition(tmp_path):
    done = tmp_path / "done"
    # started through a shell that exits at once: the spinner is re-parented away from us
    subprocess.run(["sh", "-c", f"({sys.executable} -c '{SPIN.format(s=1.5)}'; touch {done}) >/dev/null 2>&1 &"],
                   check=True)
    meter = LoadMeter()
    deadline = time.monotonic() + 60
    while not done.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    during = meter.stop()
    assert during is not None and during.others_threads * during.seconds >= 1.0  # its 1.5 CPU seconds, less slack


def test_verdicts_and_text():
    quiet = HostBusy(10.0, 2, 0.1, 0.0, 0.5, 0.6)
    loud = HostBusy(10.0, 2, 1.4, 0.0, 3.0, 3.5)
    stolen = HostBusy(10.0, 2, 0.0, 0.2)
    assert not quiet.busy and loud.busy and stolen.busy
    assert "1.4 of 2 CPU threads" in loud.text and "load average 3.0 -> 3.5" in loud.text
    assert competed(0.3, 0.0, 2) is False and competed(0.5, 0.0, 2) is True
    assert loud.as_dict()["busy"] is True
    assert between(sample(), sample()).seconds > 0
