"""The seed's snippet runs as written: a script without an `if __name__ == "__main__":` guard, in a fresh process
(the tuning workers are spawned processes, which must not run the caller's script again)."""

from __future__ import annotations

import os
import subprocess
import sys

SNIPPET = """
import tracea
ctx = tracea.Context(mode="default")
graph = tracea.Graph()
graph.add_gemm(m=48, n=40, k=24)
config = ctx.optimize_graph(graph)
print(config)
print("RAN", __name__)
"""


def test_the_seed_snippet_runs_as_a_script_without_a_main_guard(tmp_path):
    script = tmp_path / "seed.py"
    script.write_text(SNIPPET)
    env = {**os.environ, "TRACEA_CACHE_DIR": str(tmp_path / "cache"), "TRACEA_DATA_DIR": str(tmp_path / "data"),
           "NO_COLOR": "1"}
    run = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.count("RAN") == 1 and "gemm 48x40x24" in run.stdout and "default" in run.stdout
    again = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "cached" in again.stdout
