"""A tune stopped from outside: SIGTERM unwinds like Ctrl-C (exit 143, one sentence, trials kept); after SIGKILL of the
parent its workers finish quietly (no traceback from a broken pipe) and the trials written stay.
Real `tracea tune` processes on the CPU backend; nothing patched."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(600)


def _start(tmp_path: Path, stderr: Path) -> subprocess.Popen:
    """A CPU tune that outlasts the test's signal: a budget of 400 (patience 133 evaluations without improvement)
    over M = 128. With budget 60 at M = 64 (patience 20) a CI run once saw the tune finish, exit 0, between the
    poll that counted its second trial and the signal."""
    env = {**os.environ, "TRACEA_CACHE_DIR": str(tmp_path / "cache"), "TRACEA_DATA_DIR": str(tmp_path / "data"),
           "NO_COLOR": "1"}
    return subprocess.Popen([sys.executable, "-m", "tracea_cli", "tune", "gemm", "--m", "128", "--backend", "cpu",
                             "--budget", "400", "--json"], env=env, stdout=subprocess.DEVNULL, stderr=stderr.open("w"),
                            start_new_session=True)


def _trials(tmp_path: Path) -> int:
    path = tmp_path / "cache" / "tuning.sqlite3"
    if not path.exists():
        return 0
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            return con.execute("SELECT COUNT(*) FROM trials").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return 0


def _wait_for_trials(tmp_path: Path, proc: subprocess.Popen, n: int = 2, limit_s: float = 300) -> None:
    end = time.monotonic() + limit_s
    while _trials(tmp_path) < n:
        assert proc.poll() is None, "the tune ended before it was stopped"
        assert time.monotonic() < end, f"no {n} trials within {limit_s} s"
        time.sleep(0.5)


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc to find the workers")
def test_sigterm_unwinds_like_ctrl_c_and_keeps_the_trials(tmp_path):
    stderr = tmp_path / "stderr.txt"
    proc = _start(tmp_path, stderr)
    _wait_for_trials(tmp_path, proc)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    said = stderr.read_text()
    assert "terminated: finished work was saved." in said and "Traceback" not in said
    assert _trials(tmp_path) >= 2
    end = time.monotonic() + 30
    while _processes_with(str(tmp_path / "cache")) and time.monotonic() < end:
        time.sleep(0.5)
    assert not _processes_with(str(tmp_path / "cache")), "workers outlived the terminated tune"


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc to find the workers")
def test_workers_of_a_killed_parent_end_quietly_and_its_trials_are_kept(tmp_path):
    stderr = tmp_path / "stderr.txt"
    proc = _start(tmp_path, stderr)
    _wait_for_trials(tmp_path, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    kept = _trials(tmp_path)
    end = time.monotonic() + 180  # a worker finishes the job it holds, finds the parent gone and leaves
    while _processes_with(str(tmp_path / "cache")) and time.monotonic() < end:
        time.sleep(0.5)
    assert not _processes_with(str(tmp_path / "cache")), "orphaned workers kept running"
    assert "Traceback" not in stderr.read_text() and "BrokenPipe" not in stderr.read_text()
    assert kept >= 2
