"""Maintainer script for GEMM's shipped default configurations (profiles/defaults/gemm.json, read by
`tracea export --config default`).

    python benchmarks/gemm_defaults.py generate [--write]     rebuild the lists (compiles every entry; no GPU)
    python benchmarks/gemm_defaults.py verify [--write]       check this GPU's family's entries on this GPU

`generate` writes every entry `compiled-only` (with when and for which architectures it was compiled); `verify`
checks each entry of the present GPU's family against the float64 reference at several shapes (both layouts) and
records `verified` with the device class, the architecture, the largest relative error and the date.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tracea_cli.backends.op_backend import OpBackend  # noqa: E402
from tracea_cli.export.defaults import SCHEMA_VERSION, defaults_path, load_defaults  # noqa: E402
from tracea_cli.ops.gemm import defaults as gd  # noqa: E402
from tracea_cli.ops.gemm.problem import GemmProblem  # noqa: E402
from tracea_cli.space import config_key  # noqa: E402
from tracea_cli.target import arch_target, base_arch  # noqa: E402

BACKEND = OpBackend("gemm", "cuda")


def generate(*, date: str | None = None, compile_entries: bool = True) -> dict[str, Any]:
    """The whole profile, every entry `compiled-only`; with `compile_entries`, each is compiled for its family first."""
    from tracea_cli.backends import nvrtc

    date = date or time.strftime("%Y-%m-%d", time.gmtime())
    entries = []
    for dtype in gd.DTYPES:
        for family, archs in gd.COMPILE_FOR.items():
            for config in gd.candidates(dtype, archs[0]):
                if compile_entries:
                    for problem in gd.big_problems(dtype):
                        for arch in archs:
                            BACKEND.compile(problem, config, arch_target(arch))
                how = (f"compiled for {' and '.join(archs)} with NVRTC {nvrtc.version()} on {date}"
                       + ("" if compile_entries else " (not compiled)") + "; never run on a GPU of this family")
                entries.append({"dtype": dtype, "family": family, "config": config,
                                "verification": {"status": "compiled-only", "date": date, "how": how}})
    return {"schema_version": SCHEMA_VERSION, "op": "gemm", "about": gd.ABOUT,
            "families": {f: list(m) for f, m in gd.FAMILIES.items()}, "defaults": entries}


def verify(profile: Mapping[str, Any], *, device_index: int = 0, log=print) -> dict[str, Any]:
    """Check every entry of this GPU's family on this GPU, both layouts, at VERIFY_SHAPES where the entry is valid."""
    from tracea_cli.backends.cuda import device_target

    target = device_target(device_index)
    arch = base_arch(target.arch or "")
    family = next((f for f, members in profile["families"].items() if arch in members), None)
    if family is None:
        raise SystemExit(f"no default family holds this GPU's architecture {arch}")
    date = time.strftime("%Y-%m-%d", time.gmtime())
    out = json.loads(json.dumps(profile))
    for entry in out["defaults"]:
        if entry["family"] != family:
            continue
        worst, failure, checked = 0.0, "", 0
        for layout in ("nn", "nt"):
            for m, n, k in gd.VERIFY_SHAPES:
                problem = GemmProblem(m, n, k, entry["dtype"], layout)
                if BACKEND.why_invalid(problem, target, entry["config"]):
                    continue
                ev = BACKEND.check(BACKEND.compile(problem, entry["config"], target), problem, target, seed=checked)
                checked += 1
                if not ev.ok:
                    failure = failure or f"{problem.label}: {ev.status.value}: {ev.reason}"
                else:
                    worst = max(worst, float(ev.rel_error or 0.0))
        label = f"{entry['dtype']} {config_key(entry['config'])}"
        if failure or not checked:
            log(f"FAIL {label}: {failure or 'valid at none of the check shapes'}")
            entry["verification"] = {"status": "compiled-only", "date": date,
                                     "how": f"failed its check on {target.device_class}: {failure or 'not checked'}"}
        else:
            log(f"ok   {label}: {checked} checks, largest relative error {worst:.3g}")
            entry["verification"] = {
                "status": "verified", "device": target.device_class, "arch": arch, "rel_error": worst, "date": date,
                "how": (f"{checked} checks against the float64 reference (both layouts, shapes "
                        f"{', '.join('x'.join(map(str, s)) for s in gd.VERIFY_SHAPES)} where valid) by "
                        "`python benchmarks/gemm_defaults.py verify`"),
            }
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/gemm_defaults.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("generate", "verify"))
    parser.add_argument("--write", action="store_true", help="write profiles/defaults/gemm.json (else print it)")
    parser.add_argument("--device", type=int, default=0, help="CUDA device for verify")
    args = parser.parse_args(argv)
    if args.action == "generate":
        profile = generate()
    else:
        profile = verify(load_defaults("gemm"), device_index=args.device, log=lambda s: print(s, file=sys.stderr))
    text = json.dumps(profile, indent=1) + "\n"
    if args.write:
        defaults_path("gemm").write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
