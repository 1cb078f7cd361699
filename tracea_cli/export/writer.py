"""The whole export: check the request, resolve each configuration, compile it for each architecture with NVRTC, and
write the folder.

Everything is checked before anything is compiled (architectures NVRTC knows, a writable --out, configurations
inside their search space), and the folder is written into a temporary folder beside --out and moved into place
only when every file is there and the manifest is valid: a failure at any point leaves nothing half-written.

Configurations of the Hopper wgmma family are built for sm_90a only (families.place_wgmma): a requested sm_90 that
gets one is built as sm_90a, and no PTX is made from them (their instructions exist on compute capability 9.0 only).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence

from tracea_cli import __version__
from tracea_cli.backends import nvrtc
from tracea_cli.backends.base import Artifact, CompileFailed
from tracea_cli.errors import TraceaError, UsageError
from tracea_cli.export import c_header, cpp_header, example, resolve
from tracea_cli.export.dispatch import valid_for
from tracea_cli.export.elf import function_symbols
from tracea_cli.export.families import ServedBy, is_wgmma, place_wgmma
from tracea_cli.export.manifest import (
    COMPILED_ONLY,
    Kernel,
    Manifest,
    PtxImage,
    Variant,
    shape_label,
    validate,
)
from tracea_cli.ops.gemm.problem import GemmProblem
from tracea_cli.space import SearchSpace, Value, config_key
from tracea_cli.target import ARCH_LIMITS, Target, base_arch, limits_for

EXPORT_DEVICE_CLASS = "export"  # the Target of an export names no device: it builds for an architecture
MANIFEST = "manifest.json"
KERNELS_DIR = "kernels"


class Builder(Protocol):
    """What the export needs of a backend (backends.base.Backend has it): the space and a compile-only build."""

    def space(self, problem: Any, target: Target) -> SearchSpace: ...

    def compile(self, problem: Any, config: Mapping[str, Value], target: Target) -> Artifact: ...


@dataclass(frozen=True)
class ExportRequest:
    problems: tuple[GemmProblem, ...]  # one per tuned shape; same op, dtype, layout and epilogue
    archs: tuple[str, ...]  # "sm_80", "sm_90", "sm_90a"
    out: Path
    config: str | None = None  # None: the tuning cache's winners; "default": the shipped ones; else a JSON file
    backend: str = "cuda"


@dataclass(frozen=True)
class ExportResult:
    out: Path
    manifest: Mapping[str, Any]
    files: tuple[str, ...]  # relative to `out`
    warnings: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        return {"out": str(self.out), "files": list(self.files), "warnings": list(self.warnings),
                "manifest": dict(self.manifest)}


def export_target(arch: str) -> Target:
    return Target(backend="cuda", device_class=EXPORT_DEVICE_CLASS, arch=arch, limits=limits_for(arch))


def prefix_of(problem: GemmProblem) -> str:
    tail = "" if problem.epilogue == "none" else f"_{problem.epilogue}"
    return f"tracea_{problem.op}_{problem.dtype}_{problem.layout}{tail}"


# ---- checks before any work ---------------------------------------------------------------------------------------

def arch_order(arch: str) -> tuple[int, str]:
    return (int(base_arch(arch)[3:]), arch)


def check_archs(archs: Sequence[str]) -> tuple[str, ...]:
    """The requested architectures, deduplicated and ordered; each one NVRTC can build for and whose limits we know."""
    if not archs:
        raise UsageError("no architecture was given.", "Pass --arch, e.g. --arch sm_80,sm_90.")
    known = nvrtc.supported_archs()
    out: list[str] = []
    for arch in archs:
        arch = arch.strip().lower()
        if not re.fullmatch(r"sm_\d+a?", arch):
            raise UsageError(f"{arch!r} is not a CUDA architecture name.", "Write architectures as sm_80, sm_90 or sm_90a.")
        if base_arch(arch) not in known:
            raise UsageError(f"NVRTC {nvrtc.version()} cannot build for {arch}.", f"Use one of {', '.join(known)}.")
        if arch not in ARCH_LIMITS:
            raise UsageError(f"tracea knows no limits for {arch} to check configurations against.",
                             f"Use one of {', '.join(a for a in ARCH_LIMITS if base_arch(a) in known)}.")
        if arch not in out:
            out.append(arch)
    return tuple(sorted(out, key=arch_order))


def check_problems(problems: Sequence[GemmProblem]) -> tuple[GemmProblem, ...]:
    if not problems:
        raise UsageError("no shape was given.", "Pass --m (and --n, --k) or --shapes MxNxK,...")
    first = problems[0]
    out: list[GemmProblem] = []
    for p in problems:
        if (p.op, p.dtype, p.layout, p.epilogue) != (first.op, first.dtype, first.layout, first.epilogue):
            raise UsageError("the shapes of one export must share op, dtype, layout and epilogue.", "Export them separately.")
        if p not in out:
            out.append(p)
    return tuple(out)


def check_out(out: Path) -> Path:
    """--out as an absolute path that can be replaced: absent, empty, or an earlier export, in a writable folder.

    Creates nothing: the folders above --out are made only when the export is written.
    """
    out = Path(out).expanduser().absolute()
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file, not a folder.", "Give a folder for the export.")
    if out.is_dir() and any(out.iterdir()) and not (out / MANIFEST).is_file():
        raise UsageError(f"--out {out} holds files that are not a tracea export; they are left alone.",
                         "Give a new or empty folder, or an earlier export's folder to replace it.")
    existing = out.parent
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError(f"cannot create the folder {out}: {existing} is a file.", "Choose another --out.")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write the export to {out}: {existing} is not writable.", "Choose a writable folder.")
    return out


# ---- building -------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Built:
    choice: resolve.Choice
    artifact: Artifact
    kernels: tuple[Kernel, ...]
    name: str  # file stem: prefix_MxNxK_arch


def _resources(artifact: Artifact, kernel: str) -> Mapping[str, Any]:
    """The ptxas figures of one kernel: per-kernel entries when the backend keeps them, else the flat ones of its
    main kernel."""
    res = artifact.resources or {}
    entry = res.get(kernel)
    if entry is not None:
        return entry if isinstance(entry, Mapping) else dict(entry.__dict__)
    per_kernel = res.get("kernels")
    if isinstance(per_kernel, Mapping) and kernel in per_kernel:
        entry = per_kernel[kernel]
        return entry if isinstance(entry, Mapping) else dict(entry.__dict__)
    return res if kernel == artifact.kernel_name else {}


def _kernels(artifact: Artifact) -> tuple[Kernel, ...]:
    kernels: dict[str, Kernel] = {}
    for step in artifact.launch.get("steps", ()):
        if step.get("kind") != "kernel" or step["name"] in kernels:
            continue
        res = _resources(artifact, step["name"])
        block = tuple(int(b) for b in step["block"]) + (1, 1)
        cluster = tuple(int(c) for c in step.get("cluster") or (1, 1, 1)) + (1, 1)
        kernels[step["name"]] = Kernel(
            name=step["name"], grid=dict(step["grid"]), block=block[:3],  # type: ignore[arg-type]
            cluster=cluster[:3],  # type: ignore[arg-type]
            dynamic_smem_bytes=int(step.get("dynamic_smem_bytes", 0)),
            static_smem_bytes=int(res.get("shared_bytes", 0)), registers=int(res.get("registers", 0)),
            spill_bytes=int(res.get("spill_store_bytes", 0)) + int(res.get("spill_load_bytes", 0)))
    return tuple(kernels.values())


def _build(builder: Builder, choice: resolve.Choice, prefix: str) -> Built:
    problem, arch = choice.problem, choice.arch
    try:
        artifact = builder.compile(problem, choice.config, export_target(arch))
    except CompileFailed as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else "no log"
        raise TraceaError(f"{problem.label} with {config_key(choice.config)} did not compile for {arch}: {first}.",
                          "Run with --debug for the whole log, and report it: the configuration passed the space's rules.") from e
    binary = artifact.binary or b""
    if binary[:4] != b"\x7fELF" or nvrtc.cubin_arch(binary) != base_arch(arch):
        raise TraceaError(f"the CUDA backend returned no {arch} cubin for {problem.label}.", "Report this as a bug.")
    # The ELF header does not tell sm_90 from sm_90a; the PTX's .target line, where the backend reports it, does.
    ptx_target = (artifact.resources or {}).get("ptx_target")
    if ptx_target and ptx_target != arch:
        raise TraceaError(f"the CUDA backend built {problem.label} for {ptx_target}, not {arch}.", "Report this as a bug.")
    kernels = _kernels(artifact)
    missing = {k.name for k in kernels} - function_symbols(binary)
    if missing:
        raise TraceaError(f"the {arch} cubin of {problem.label} lacks the kernels {sorted(missing)} its launch names.",
                          "Report this as a bug in the CUDA backend.")
    return Built(choice, artifact, kernels, f"{prefix}_{shape_label(problem.shape)}_{arch}")


def _ptx(built: Built) -> nvrtc.CompiledProgram:
    """The exact source of a built variant compiled again with the backends' options, for the PTX of its architecture."""
    return nvrtc.compile_source(built.artifact.source, nvrtc.CompileOptions(arch=built.choice.arch), name=f"{built.name}.cu")


# ---- the export -------------------------------------------------------------------------------------------------------

def export(request: ExportRequest, *, settings: Any, builder: Builder | None = None) -> ExportResult:
    """Export `request`: returns what was written, or raises UsageError (bad input) / TraceaError with nothing written."""
    if request.backend != "cuda":
        raise UsageError(f"export makes CUDA binaries; the {request.backend} backend has no export.",
                         "Use --backend cuda (numba cannot build a library usable without Python, so CPU export is not offered).")
    problems = check_problems(request.problems)
    if problems[0].op != "gemm":
        raise UsageError(f"export knows gemm only, not {problems[0].op}.", "Export a gemm.")
    archs = check_archs(request.archs)
    out = check_out(request.out)
    if builder is None:
        from tracea_cli.export.families import ExportBuilder

        builder = ExportBuilder()
    spaces: dict[tuple[GemmProblem, str], SearchSpace] = {}

    def space_of(problem: GemmProblem, arch: str) -> SearchSpace:
        if (problem, arch) not in spaces:
            spaces[(problem, arch)] = builder.space(problem, export_target(arch))
        return spaces[(problem, arch)]

    warnings: list[str] = []
    if request.config is None:
        choices = resolve.from_cache(problems, archs, space_of, settings.cache_path, warnings)
    elif request.config == "default":
        choices = resolve.from_defaults(problems, archs, space_of)
    else:
        choices = resolve.from_file(Path(request.config), problems, archs, space_of)
    choices = place_wgmma(choices, warnings)
    archs = tuple(sorted({c.arch for c in choices}, key=arch_order))

    prefix = prefix_of(problems[0])
    built = [_build(builder, c, prefix) for c in choices]
    files: dict[str, bytes] = {}
    variants = []
    for b in built:
        c = b.choice
        cubin = f"{KERNELS_DIR}/{b.name}.cubin"
        source = f"{KERNELS_DIR}/{b.name}.cu"
        files[cubin] = b.artifact.binary or b""
        files[source] = b.artifact.source.encode()
        variants.append(Variant(
            shape=c.problem.shape, arch=c.arch, config=dict(c.config), origin=c.origin, origin_detail=c.origin_detail,
            file=cubin, source_file=source, launch=dict(b.artifact.launch), kernels=b.kernels,
            alignment_bytes=int(b.artifact.launch.get("alignment_bytes", 16)),
            valid_for=valid_for(c.problem, c.config,
                                lambda p, arch=c.arch, tuned=c.problem: ServedBy(space_of(p, arch), tuned, p)),
            verification=c.verification, measurement=c.measurement))
        if c.verification.status == COMPILED_ONLY:
            warnings.append(f"{c.problem.label} on {c.arch}: this configuration was never verified on {c.arch}; "
                            f"exported as compiled-only ({c.verification.evidence}).")

    # PTX for forward compatibility: the lowest requested architecture that has no arch-specific instructions.
    portable = [a for a in archs if not a.endswith("a")]
    wgmma_archs = sorted({b.choice.arch for b in built if is_wgmma(b.choice.config)})
    wgmma_list = ", ".join(wgmma_archs)
    ptx_images: list[PtxImage] = []
    ptx_isa = ""
    if portable:
        for b in built:
            if b.choice.arch != portable[0]:
                continue
            program = _ptx(b)
            virtual = "compute_" + portable[0][3:]
            name = f"{KERNELS_DIR}/{prefix}_{shape_label(b.choice.problem.shape)}_{virtual}.ptx"
            files[name] = program.ptx.encode()
            ptx_isa = program.ptx_isa
            ptx_images.append(PtxImage(shape=b.choice.problem.shape, arch=virtual, file=name, from_arch=portable[0]))
        ptx_note = (f"PTX of the {portable[0]} configurations (ISA {ptx_isa}): the driver compiles it for newer GPUs "
                    f"that no cubin here matches.")
        if wgmma_archs:
            ptx_note += (f" No PTX of the {wgmma_list} configurations: their wgmma/TMA code is arch-specific and runs "
                         "on compute capability 9.0 only.")
    elif wgmma_archs:
        ptx_note = (f"no PTX: the {wgmma_list} configurations use wgmma/TMA, arch-specific code that runs on compute "
                    "capability 9.0 only; add a portable architecture such as sm_80 (with a configuration of another "
                    "family) to get PTX.")
        warnings.append(ptx_note)
    else:
        ptx_note = ("no PTX: every requested architecture is arch-specific (" + ", ".join(archs) +
                    "), whose instructions no other GPU runs; add a portable architecture such as sm_80 to get PTX.")
        warnings.append(ptx_note)
    if not ptx_isa:
        ptx_isa = str(next((b.artifact.resources.get("ptx_isa") for b in built if b.artifact.resources.get("ptx_isa")), ""))

    c_name = f"{prefix}.h"
    manifest = Manifest(
        op=problems[0].op, dtype=problems[0].dtype, layout=problems[0].layout, epilogue=problems[0].epilogue,
        prefix=prefix, variants=tuple(variants), ptx=tuple(ptx_images), ptx_note=ptx_note,
        toolchain={"nvrtc": nvrtc.version(), "ptx_isa": ptx_isa or "unknown", "tracea": __version__},
        min_driver=nvrtc.version(),  # a driver loads cubins and PTX of its own CUDA version and older ones
        files={"c_header": c_name, "runtime_header": c_header.RUNTIME_HEADER, "cpp_header": cpp_header.CPP_HEADER,
               "example": example.EXAMPLE, "cmake": example.CMAKE},
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        tracea_version=__version__,
        shapes=tuple(p.shape for p in problems),
    )
    doc = manifest.as_dict()
    errors = validate(doc)
    if errors:
        raise TraceaError(f"the manifest tracea built is invalid ({errors[0]}).", "Report this as a bug.")
    files[c_name] = c_header.render_export(manifest, files).encode()
    files[c_header.RUNTIME_HEADER] = c_header.render_runtime().encode()
    files[cpp_header.CPP_HEADER] = cpp_header.render_cpp().encode()
    files[example.EXAMPLE] = example.render_example(manifest, c_name).encode()
    files[example.CMAKE] = example.render_cmake(manifest).encode()
    files[MANIFEST] = (json.dumps(doc, indent=2) + "\n").encode()
    write_folder(out, files)
    return ExportResult(out=out, manifest=doc, files=tuple(sorted(files)), warnings=tuple(warnings))


def write_folder(out: Path, files: Mapping[str, bytes]) -> None:
    """Write `files` (relative path -> bytes) as the folder `out`, whole or not at all.

    They go into a temporary folder beside `out` (same file system), which then replaces `out` by renaming; an
    earlier export at `out` is moved aside first and removed only after the new one is in place.
    """
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    except OSError as e:
        raise UsageError(f"cannot write the export to {out}: {e.strerror}.", "Choose a writable folder.") from None
    old: Path | None = None
    try:
        for rel, data in files.items():
            path = tmp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        tmp.chmod(0o755)
        if out.exists():
            old = out.with_name(f".{out.name}.old-{os.getpid()}-{time.monotonic_ns()}")
            os.rename(out, old)
        os.rename(tmp, out)
    except OSError as e:
        if old is not None and not out.exists():
            os.rename(old, out)
            old = None
        shutil.rmtree(tmp, ignore_errors=True)
        raise UsageError(f"cannot write the export to {out}: {e.strerror}.", "Choose a writable folder with free space.") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


