"""Maintainer script for conv2d's shipped default configurations (profiles/defaults/conv2d.json, read by
`tracea export conv2d --config default`).

    python benchmarks/conv2d_defaults.py generate [--write] [--no-compile]

Every entry (ops/conv2d/defaults.py) is compiled with NVRTC for its family's architectures, on the first ResNet-50
layer it is valid for (no GPU needed), and written `compiled-only` with when and for which architectures: none has
been checked on a GPU of its family yet, so an export of one says so (`verification: compiled-only`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tracea_cli.backends.op_backend import OpBackend  # noqa: E402
from tracea_cli.export.defaults import SCHEMA_VERSION, defaults_path  # noqa: E402
from tracea_cli.ops.conv2d import defaults as cd  # noqa: E402
from tracea_cli.ops.conv2d.suites import RESNET50  # noqa: E402
from tracea_cli.target import arch_target  # noqa: E402

BACKEND = OpBackend("conv2d", "cuda")


def generate(*, compile_entries: bool = True, log=print) -> dict[str, Any]:
    from tracea_cli.backends import nvrtc

    date = time.strftime("%Y-%m-%d", time.gmtime())
    entries = []
    for dtype in cd.DTYPES:
        for family, archs in cd.COMPILE_FOR.items():
            target = cd.family_target(family)
            for entry in cd.candidates(dtype, family):
                config = entry["config"]
                if compile_entries:
                    problem = next(p for n in (32, 1) for spec in RESNET50
                                   if BACKEND.why_invalid(p := cd.layer(spec, n, dtype), target, config) is None)
                    for arch in archs:
                        BACKEND.compile(problem, config, arch_target(arch))
                    log(f"compiled {dtype} {family} {config}")
                how = (f"compiled for {' and '.join(archs)} with NVRTC {nvrtc.version()} on {date}"
                       + ("" if compile_entries else " (not compiled)") + "; never run on a GPU of this family")
                entries.append({"dtype": dtype, "family": family, **entry,
                                "verification": {"status": "compiled-only", "date": date, "how": how}})
    return {"schema_version": SCHEMA_VERSION, "op": "conv2d", "about": cd.ABOUT,
            "families": {f: list(m) for f, m in cd.FAMILIES.items()}, "defaults": entries}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/conv2d_defaults.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("generate",))
    parser.add_argument("--write", action="store_true", help="write profiles/defaults/conv2d.json (else print it)")
    parser.add_argument("--no-compile", action="store_true", help="skip compiling the entries")
    args = parser.parse_args(argv)
    profile = generate(compile_entries=not args.no_compile, log=lambda s: print(s, file=sys.stderr))
    text = json.dumps(profile, indent=1) + "\n"
    if args.write:
        defaults_path("conv2d").write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
