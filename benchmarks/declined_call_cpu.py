"""Host cost of patch_conv2d's declined path, without a GPU: a declined layer's later calls go straight to torch's
forward after one check (tracea_cli/api/torch_patch.py, `_Fast.declined_again`). On the CPU the router never sets a
declined entry by itself (CPU tensors are not routed), so this script sets one by hand, as the first decision of a
CUDA call would, and times a tiny convolution module called stock, patched with that entry, and the check alone.

    python3 benchmarks/declined_call_cpu.py --out OUT.md

Each figure: the median over 7 rounds of the mean of 20,000 calls (after 1,000 warm-up calls), one torch thread, no
autograd. The convolution itself is 4 -> 4 channels, 1x1, on a 2x2 input, so that the Python around it shows.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CALLS, ROUNDS, WARMUP = 20_000, 7, 1_000


def per_call_us(fn) -> float:
    for _ in range(WARMUP):
        fn()
    rounds = []
    for _ in range(ROUNDS):
        began = time.perf_counter()
        for _ in range(CALLS):
            fn()
        rounds.append((time.perf_counter() - began) / CALLS * 1e6)
    return statistics.median(rounds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="Markdown table to write")
    args = parser.parse_args(argv)
    import torch

    from tracea_cli.api import torch_patch

    torch.set_num_threads(1)
    conv = torch.nn.Conv2d(4, 4, 1).eval()
    x = torch.randn(1, 4, 2, 2)
    rows = []
    with torch.no_grad():
        rows.append(("stock torch module call", per_call_us(lambda: conv(x))))
        rows.append(("torch.nn.functional.conv2d alone", per_call_us(
            lambda: torch.nn.functional.conv2d(x, conv.weight, conv.bias))))
        with torch_patch.patch_conv2d() as patch:
            router = patch.router
            rows.append(("patched, full decision each call (CPU tensors are not routed)", per_call_us(lambda: conv(x))))
            router._remember_declined(conv, x, "set by hand")  # what a CUDA call's first decision leaves
            rows.append(("patched, declined entry: check, count, torch's forward", per_call_us(lambda: conv(x))))
            fast = router.fast.get(conv)
            rows.append(("  the check alone (declined_again)", per_call_us(
                lambda: fast.declined_again(x, conv._parameters))))
            rows.append(("  router.forward with a no-op forward", per_call_us(
                lambda: router.forward(lambda m, t: None, conv, x))))
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"# patch_conv2d's declined path on the CPU ({stamp})", "",
             f"Machine: {platform.processor() or platform.machine()}, Python {platform.python_version()}, torch "
             f"{torch.__version__}. Command: `python3 benchmarks/declined_call_cpu.py --out OUT.md`. Median over "
             f"{ROUNDS} rounds of the mean of {CALLS} calls.", "", "| call | µs per call |", "| --- | ---: |",
             *(f"| {name} | {us:.2f} |" for name, us in rows)]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
