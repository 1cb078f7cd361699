"""What a tune driver pays at exit after using a running Ray cluster, without a GPU (issue 18: Ray's fixed cost per
`tracea tune` run against the local executor's, whose target is within 5%).

    python3 benchmarks/ray_exit_cpu.py --out OUT.md [--rounds 5]

Starts a one-node Ray cluster (`ray start --head --num-cpus 1`), then, alternating, three kinds of child process,
each connecting to it (address "auto"), making one actor and waiting for its answer, and exiting:
- `ray's exit`: the actor killed, then the interpreter exits and Ray disconnects in its own exit path;
- `shutdown at exit`: the same with `ray.shutdown` registered with `atexit` after connecting;
- `tracea executor`: Tracea's RayExecutor on the cpu backend (its actor starts a real worker process), closed.
Each child prints the wall-clock time just before its interpreter begins to exit; the parent takes the time at which
it sees the child gone. Figures: medians over the rounds of that exit time and of the whole child's wall time.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PLAIN = """
import sys, time, ray
ray.init(address="auto", log_to_driver=False, include_dashboard=False)
if sys.argv[1] == "atexit":
    import atexit
    atexit.register(ray.shutdown)
@ray.remote(num_cpus=1)
class A:
    def ping(self):
        return 1
a = A.remote()
ray.get(a.ping.remote())
ray.kill(a)
print("EXIT", time.time(), flush=True)
"""

EXECUTOR = """
import sys, time
sys.path.insert(0, sys.argv[2])
from tracea_cli.backends.op_backend import OpBackend
from tracea_cli.tune.ray_executor import RayExecutor
import functools
with RayExecutor(functools.partial(OpBackend, "gemm", "cpu"), backend="cpu", device_class="cpu", timeout_s=60.0,
                 address="auto") as ex:
    ex._check_device_classes()
print("EXIT", time.time(), flush=True)
"""

KINDS = {"ray's exit": (PLAIN, "plain"), "shutdown at exit": (PLAIN, "atexit"), "tracea executor": (EXECUTOR, "x")}


def run_child(kind: str) -> tuple[float, float]:
    """(seconds from the child's last line to its exit as the parent sees it, the child's whole wall time)."""
    code, arg = KINDS[kind]
    began = time.time()
    done = subprocess.run([sys.executable, "-c", code, arg, str(ROOT)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    ended = time.time()
    lines = [line for line in done.stdout.splitlines() if line.startswith("EXIT ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{kind}: the child failed (exit {done.returncode}): {done.stderr.strip()[-600:]}")
    return ended - float(lines[-1].split()[1]), ended - began


def ray_cli() -> list[str]:
    return [sys.executable, "-m", "ray.scripts.scripts"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    import ray

    subprocess.run([*ray_cli(), "stop"], capture_output=True)
    started = subprocess.run([*ray_cli(), "start", "--head", "--num-cpus", "1", "--include-dashboard=false",
                              "--disable-usage-stats"], capture_output=True, text=True)
    if started.returncode != 0:
        raise SystemExit(f"ray start failed: {started.stderr.strip()[-400:]}")
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    results: dict[str, list[tuple[float, float]]] = {k: [] for k in KINDS}
    try:
        for _ in range(args.rounds):
            for kind in KINDS:
                results[kind].append(run_child(kind))
    finally:
        subprocess.run([*ray_cli(), "stop"], capture_output=True)
    lines = [
        "# Exit after using a running Ray cluster: Ray's own disconnect against one made at exit (no GPU)",
        "",
        f"- Date: {when}. Machine: {platform.processor() or platform.machine()}, Python {platform.python_version()}, "
        f"Ray {ray.__version__}; the shared 2-core development machine (other work ran beside it).",
        f"- Command: `python3 benchmarks/ray_exit_cpu.py --out OUT.md --rounds {args.rounds}` (the three kinds "
        "alternate, one child process each; see the script's docstring).",
        "",
        "| child | exit s (median) | exit s (each round) | child wall s (median) |",
        "| --- | ---: | --- | ---: |",
    ]
    for kind, rows in results.items():
        exits = [e for e, _ in rows]
        lines.append(f"| {kind} | {statistics.median(exits):.2f} | {', '.join(f'{e:.2f}' for e in exits)} | "
                     f"{statistics.median(w for _, w in rows):.2f} |")
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
