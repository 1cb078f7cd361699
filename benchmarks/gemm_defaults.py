"""Maintainer script for an op's shipped default configurations (profiles/defaults/OP.json, read by
`tracea export OP --config default`): GEMM's (the default), lowrank-mlp's and attention's (`--op lowrank-mlp`,
`--op attention`).

    python benchmarks/gemm_defaults.py generate [--op OP] [--write] [--keep-records]
                                       rebuild the lists (compiles every entry; no GPU)
    python benchmarks/gemm_defaults.py verify [--op OP] [--write]     check this GPU's family's entries on this GPU

`generate` writes every entry `compiled-only` (with when and for which architectures it was compiled). With
`--keep-records` it adds only kernel families: where the current file's list for a dtype and architecture family
holds entries of a kernel family (wgmma, mma, simt), those entries stay as they are, records included; a kernel
family it lacks gets the ops module's entries, compiled, `compiled-only`, in the ops module's order. So a new family
joins without losing what a GPU checked (valid while no kernel source changed since; after a kernel change run
plain `generate` and `verify`). `verify`
checks each entry of the present GPU's family against the float64 reference at the op's check shapes and records
`verified` with the device class, the architecture, the largest relative error and the date; its last line counts
the entries ok and failed, and it exits 1 where one failed. What each op's lists
hold is its defaults module (DTYPES, FAMILIES, COMPILE_FOR, ABOUT, big_problems, candidates, verify_problems).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Mapping, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import importlib  # noqa: E402

from tracea_cli.backends.op_backend import OpBackend  # noqa: E402
from tracea_cli.export.defaults import SCHEMA_VERSION, defaults_path, load_defaults  # noqa: E402
from tracea_cli.space import config_key  # noqa: E402
from tracea_cli.target import arch_target, base_arch  # noqa: E402

MODULES = {"gemm": "tracea_cli.ops.gemm.defaults", "lowrank-mlp": "tracea_cli.ops.lowrank_mlp.defaults",
           "attention": "tracea_cli.ops.attention.defaults"}


def _merged(dtype: str, family: str, listed: list[dict[str, Any]], keep: Mapping[str, Any]) -> list[Any]:
    """One dtype's list on one architecture family: per kernel family in the order `listed` has them, the entries
    `keep` holds of it (dicts, records included) where it holds any, else `listed`'s configurations."""
    held = [e for e in keep["defaults"] if e["dtype"] == dtype and e["family"] == family]
    out: list[Any] = []
    for kernel in dict.fromkeys(c["family"] for c in listed):
        mine = [e for e in held if e["config"]["family"] == kernel]
        out += mine or [c for c in listed if c["family"] == kernel]
    return out


def generate(*, op: str = "gemm", date: str | None = None, compile_entries: bool = True,
             keep: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The whole profile, every entry `compiled-only`; with `compile_entries`, each is compiled for its family first.
    With `keep` (the current profile) only kernel families its lists lack are added (see the module's docstring)."""
    from tracea_cli.backends import nvrtc

    gd = importlib.import_module(MODULES[op])
    backend = OpBackend(op, "cuda")
    date = date or time.strftime("%Y-%m-%d", time.gmtime())
    everything = []  # (dtype, family, archs, a configuration to list, or an entry kept as it is)
    for dtype in gd.DTYPES:
        for family, archs in gd.COMPILE_FOR.items():
            listed = gd.candidates(dtype, archs[0])
            everything += [(dtype, family, archs, c) for c in (_merged(dtype, family, listed, keep) if keep else listed)]
    listed = [e for e in everything if "verification" not in e[3]]
    if compile_entries:  # every entry for each big problem it is valid for, on each architecture of its family
        named = [(problem, backend.config_in(problem, config), arch_target(arch)) for dtype, _, archs, config in listed
                 for problem in gd.big_problems(dtype) for arch in archs]  # as each problem's space names it
        jobs = [(problem, config, target) for problem, config, target in named
                if backend.why_invalid(problem, target, config) is None]
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:  # NVRTC releases the GIL
            list(pool.map(lambda job: backend.compile(*job), jobs))  # a compile error ends the run with its log
    entries = []
    for dtype, family, archs, config in everything:
        if "verification" in config:  # kept as it is
            entries.append(config)
            continue
        how = (f"compiled for {' and '.join(archs)} with NVRTC {nvrtc.version()} on {date}" if compile_entries
               else f"listed for {' and '.join(archs)} on {date}, not compiled") \
            + "; not yet checked by `verify` on a GPU of this family"
        entries.append({"dtype": dtype, "family": family, "config": config,
                        "verification": {"status": "compiled-only", "date": date, "how": how}})
    return {"schema_version": SCHEMA_VERSION, "op": op, "about": gd.ABOUT,
            "families": {f: list(m) for f, m in gd.FAMILIES.items()}, "defaults": entries}


def verify(profile: Mapping[str, Any], *, op: str = "gemm", device_index: int = 0,
           log=print) -> tuple[dict[str, Any], int]:
    """Check every entry of this GPU's family on this GPU at the op's check problems where the entry is valid:
    (the profile with their records rewritten, how many failed)."""
    from tracea_cli.backends.cuda import device_target

    gd = importlib.import_module(MODULES[op])
    backend = OpBackend(op, "cuda")
    target = device_target(device_index)
    arch = base_arch(target.arch or "")
    family = next((f for f, members in profile["families"].items() if arch in members), None)
    if family is None:
        raise SystemExit(f"no default family holds this GPU's architecture {arch}")
    date = time.strftime("%Y-%m-%d", time.gmtime())
    out = json.loads(json.dumps(profile))
    tally = {"ok": 0, "failed": 0}
    for entry in out["defaults"]:
        if entry["family"] != family:
            continue
        worst, failure, checked = 0.0, "", 0
        for problem in gd.verify_problems(entry["dtype"]):
            config = backend.config_in(problem, entry["config"])  # a staged entry copies only where rows need it
            if backend.why_invalid(problem, target, config):
                continue
            ev = backend.check(backend.compile(problem, config, target), problem, target, seed=checked)
            checked += 1
            if not ev.ok:
                failure = failure or f"{problem.label}: {ev.status.value}: {ev.reason}"
            else:
                worst = max(worst, float(ev.rel_error or 0.0))
        label = f"{entry['dtype']} {config_key(entry['config'])}"
        tally["failed" if failure or not checked else "ok"] += 1
        if failure or not checked:
            log(f"FAIL {label}: {failure or 'valid at none of the check shapes'}")
            entry["verification"] = {"status": "compiled-only", "date": date,
                                     "how": f"failed its check on {target.device_class}: {failure or 'not checked'}"}
        else:
            log(f"ok   {label}: {checked} checks, largest relative error {worst:.3g}")
            entry["verification"] = {
                "status": "verified", "device": target.device_class, "arch": arch, "rel_error": worst, "date": date,
                "how": (f"{checked} checks against the float64 reference (both layouts, shapes "
                        f"{', '.join(dict.fromkeys('x'.join(map(str, s)) for s in gd.VERIFY_SHAPES))} where valid) by "
                        f"`python benchmarks/gemm_defaults.py verify{'' if op == 'gemm' else ' --op ' + op}`"),
            }
    # the last line says it all, for a log that comes back without the file
    log(f"{op} defaults of family {family} on {target.device_class}: {tally['ok']} ok, {tally['failed']} failed")
    return out, tally["failed"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/gemm_defaults.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("generate", "verify"))
    parser.add_argument("--op", choices=tuple(MODULES), default="gemm", help="whose defaults (default: gemm)")
    parser.add_argument("--write", action="store_true", help="write profiles/defaults/OP.json (else print it)")
    parser.add_argument("--keep-records", action="store_true",
                        help="generate: keep the current file's entries (records included), adding only kernel families "
                             "its lists lack")
    parser.add_argument("--device", type=int, default=0, help="CUDA device for verify")
    args = parser.parse_args(argv)
    failed = 0
    if args.action == "generate":
        profile = generate(op=args.op, keep=load_defaults(args.op) if args.keep_records else None)
    else:
        profile, failed = verify(load_defaults(args.op), op=args.op, device_index=args.device,
                                 log=lambda s: print(s, file=sys.stderr))
    text = json.dumps(profile, indent=1) + "\n"
    if args.write:
        defaults_path(args.op).write_text(text)
    else:
        sys.stdout.write(text)
    return 1 if failed else 0  # a verify with a failed entry fails (its record says which)


if __name__ == "__main__":
    raise SystemExit(main())
