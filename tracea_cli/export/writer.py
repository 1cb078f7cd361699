"""The whole export: check the request, resolve each configuration, compile it for each architecture with NVRTC, and
write the folder.

Everything is checked before anything is compiled (architectures NVRTC knows, a writable --out, configurations
inside their search space), and the folder is written into a temporary folder beside --out and moved into place
only when every file is there and the manifest is valid: a failure at any point leaves nothing half-written.

The op comes from the registry: its families (through the CUDA backend's OpBackend) build the binaries, its ABI
(`Op.export`) supplies its C header, the prefix functions and the example. A family whose launch plan names an
architecture-specific target (the Hopper wgmma family: sm_90a) is built for that target only (`place_arch_specific`):
a requested sm_90 that gets such a configuration is built as sm_90a, and no PTX is made from it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from tracea_cli import __version__
from tracea_cli.backends import nvrtc
from tracea_cli.backends.base import Artifact, CompileFailed
from tracea_cli.backends.op_backend import OpBackend
from tracea_cli.errors import TraceaError, UsageError
from tracea_cli.export import c_header, resolve
from tracea_cli.export.dispatch import valid_for
from tracea_cli.export.elf import function_symbols
from tracea_cli.export.manifest import COMPILED_ONLY, Kernel, Manifest, PtxImage, Variant, shape_label, validate
from tracea_cli.ops.launch import LaunchPlan
from tracea_cli.ops.registry import get_op
from tracea_cli.space import config_key
from tracea_cli.target import ARCH_LIMITS, Target, arch_target, base_arch

EXPORT_DEVICE_CLASS = "export"  # the Target of an export names no device: it builds for an architecture
MANIFEST = "manifest.json"
KERNELS_DIR = "kernels"
CMAKE = "CMakeLists.txt"
EXAMPLE = "example.cpp"


@dataclass(frozen=True)
class ExportRequest:
    problems: tuple[Any, ...]  # one per tuned shape; same op, dtype and other problem fields
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
    label: str = ""  # what was exported: "gemm fp16 nt"

    def as_dict(self) -> dict[str, Any]:
        return {"out": str(self.out), "files": list(self.files), "warnings": list(self.warnings),
                "manifest": dict(self.manifest)}


def export_target(arch: str) -> Target:
    return arch_target(arch, EXPORT_DEVICE_CLASS)


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


def _variant_key(problem: Any) -> tuple:
    """What the shapes of one export share: op, dtype and the problem's fields that are not sizes."""
    sizes = problem.sizes()
    return problem.op, problem.dtype, tuple((k, v) for k, v in problem.key().items() if k not in sizes)


def check_problems(problems: Sequence[Any]) -> tuple[Any, ...]:
    if not problems:
        raise UsageError("no shape was given.", "Pass the op's sizes (or --shapes).")
    out: list[Any] = []
    for p in problems:
        if _variant_key(p) != _variant_key(problems[0]):
            raise UsageError("the shapes of one export must share op, dtype and the op's other options (a layout, an "
                             "epilogue).", "Export them separately.")
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


# ---- architecture-specific families -------------------------------------------------------------------------------------

def place_arch_specific(choices: Sequence[resolve.Choice], builder: OpBackend, warnings: list[str]) -> list[resolve.Choice]:
    """The choices with every architecture whose configurations need an architecture-specific build (their family's
    plan names one: the wgmma family's sm_90a) built as that architecture.

    The runtime takes one architecture's cubins per device, so such a request moves to the specific target whole (its
    other shapes' configurations build for it as well); where the specific target was requested too, it already
    serves that compute capability and the plain one's choices (the same ones, from the same space) are dropped.
    """
    def needs(c: resolve.Choice) -> str | None:
        return builder.family_of(c.config).launch(c.problem, c.config).arch

    archs = list(dict.fromkeys(c.arch for c in choices))
    out: list[resolve.Choice] = []
    for arch in archs:
        group = [c for c in choices if c.arch == arch]
        specific = [(c, needs(c)) for c in group if needs(c) not in (None, arch)]
        if not specific:
            out += group
            continue
        first, target = specific[0]
        family = builder.family_of(first.config).name
        if base_arch(target) != base_arch(arch):  # the spaces refuse this earlier; kept as the rule's last word
            raise UsageError(f"{first.problem.label} got a {family} configuration for {arch}, which is built for "
                             f"{target} only.", f"Export {family} configurations for {target}.")
        if target in archs:
            theirs = {shape_label(c.problem.sizes()): c.config for c in choices if c.arch == target}
            differ = [c.problem.label for c in group if theirs.get(shape_label(c.problem.sizes())) != c.config]
            if differ:
                raise UsageError(f"{arch} and {target} would get different configurations for {differ[0]}, and "
                                 f"one GPU runs only one of them.", f"Pass only one of --arch {arch} and {target}.")
            warnings.append(f"{arch}: its configurations use the {family} family, which is built for {target} only; the "
                            f"{target} cubins serve its compute capability, so no {arch} cubins are built.")
            continue
        warnings.append(f"{first.problem.label}: the {family} family needs {target}; the {arch} cubins are built for "
                        f"{target}, which runs on that exact architecture only (for {target}: H100, H200), not on "
                        "later GPUs.")
        out += [replace(c, arch=target) for c in group]
    return out


# ---- building -------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Built:
    choice: resolve.Choice
    artifact: Artifact
    kernels: tuple[Kernel, ...]
    name: str  # file stem: prefix_MxNxK_arch


def _kernels(artifact: Artifact) -> tuple[Kernel, ...]:
    """Each kernel of the plan, with what launching it takes and the ptxas report's figures."""
    per_kernel = artifact.resources.get("kernels", {})
    out = []
    for step in artifact.plan.kernels:
        res = per_kernel.get(step.name, {})
        out.append(Kernel(
            name=step.name, grid=dict(zip("xyz", step.grid)), block=step.block,
            cluster=step.cluster or (1, 1, 1), dynamic_smem_bytes=step.dynamic_smem_bytes,
            static_smem_bytes=int(res.get("shared_bytes", 0)), registers=int(res.get("registers", 0)),
            spill_bytes=int(res.get("spill_store_bytes", 0)) + int(res.get("spill_load_bytes", 0))))
    return tuple(out)


def _build(builder: OpBackend, choice: resolve.Choice, prefix: str) -> Built:
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
    # The ELF header does not tell sm_90 from sm_90a; the PTX's .target line does.
    ptx_target = artifact.resources.get("ptx_target")
    if ptx_target and ptx_target != arch:
        raise TraceaError(f"the CUDA backend built {problem.label} for {ptx_target}, not {arch}.", "Report this as a bug.")
    kernels = _kernels(artifact)
    missing = {k.name for k in kernels} - function_symbols(binary)
    if missing:
        raise TraceaError(f"the {arch} cubin of {problem.label} lacks the kernels {sorted(missing)} its launch names.",
                          "Report this as a bug in the CUDA backend.")
    return Built(choice, artifact, kernels, f"{prefix}_{shape_label(problem.sizes())}_{arch}")


def _ptx(built: Built) -> nvrtc.CompiledProgram:
    """The program a variant was built from (the same source and architecture: compiled once per process), for its
    PTX."""
    from tracea_cli.backends.cuda import compile_program

    return compile_program(built.artifact.source, built.choice.arch)


def _resized(problem: Any, name: str, value: int) -> Any:
    op = get_op(problem.op)
    return op.from_key(problem.dtype, {**problem.key(), name: value})


def abi_plan(abi: Any, plan: LaunchPlan) -> LaunchPlan:
    """`plan` in the names of the op's export ABI: renamed by `abi.slot_names(plan)` where the op gives it (a family
    whose plan is another op's over a view); what manifest.json and the C header describe."""
    return plan.renamed(abi.slot_names(plan)) if abi.slot_names is not None else plan


def plan_names(plan: LaunchPlan) -> set[str]:
    """Every value a plan names: kernel parameters (tensor maps aside), the maps' tensors, sizes and strides, scratch
    buffers and their sizes, step conditions and requirements."""
    names = {n for n in plan.params if n not in plan.tensor_maps}
    for step in plan.kernels:
        names |= set(step.params or ()) | ({step.when} if step.when else set())
    for spec in plan.tensor_maps.values():
        names |= {spec.tensor, *spec.dims, *spec.strides} | ({spec.row_stride} if spec.row_stride else set())
    for s in plan.scratch:
        names |= {s.name, s.rows, s.cols, s.ld} | ({s.source} if s.source else set())
    for r in plan.requires:
        names |= {r.value, *r.of}
    return names


def _check_abi_covers(builder: OpBackend, choice: resolve.Choice, abi: Any) -> None:
    """UsageError, before anything compiles, where the choice's launch plan (in the ABI's names, `abi_plan`) names a
    value the op's export ABI has no slot for (a family whose plan is another op's over a view, say)."""
    family = builder.family_of(choice.config)
    plan = abi_plan(abi, family.launch(choice.problem, choice.config))
    missing = sorted(plan_names(plan) - set(abi.pointers) - set(abi.ints))
    if missing:
        raise UsageError(f"the {family.name} configuration of {choice.problem.label} cannot be exported yet: its "
                         f"launch reads {', '.join(missing)}, which the {builder.op_name} export has no slot for.",
                         "Export a configuration of another family (--config default, or a --config file).")


def _serves(builder: OpBackend, choice: resolve.Choice, problem: Any) -> str | None:
    """Why the variant built for `choice` cannot compute `problem` (None: it can): the configuration's space there (as
    the family names the configuration there), and what the family says about a kernel built for another problem (a
    staging pre-pass follows from the problem)."""
    reason = builder.why_invalid(problem, export_target(choice.arch), builder.config_in(problem, choice.config))
    if reason:
        return reason
    serves = getattr(builder.family_of(choice.config), "serves", None)
    return serves(choice.problem, choice.config, problem) if serves is not None else None


# ---- the export -------------------------------------------------------------------------------------------------------

def export(request: ExportRequest, *, settings: Any, builder: OpBackend | None = None) -> ExportResult:
    """Export `request`: returns what was written, or raises UsageError (bad input) / TraceaError with nothing written."""
    if request.backend != "cuda":
        raise UsageError(f"export makes CUDA binaries; the {request.backend} backend has no export.",
                         "Use --backend cuda (numba cannot build a library usable without Python, so CPU export is not offered).")
    problems = check_problems(request.problems)
    op = get_op(problems[0].op)
    if op.export is None:
        raise UsageError(f"{op.name} has no export yet.", "Tune and benchmark it; export is coming.")
    abi = op.export
    archs = check_archs(request.archs)
    out = check_out(request.out)
    builder = builder or OpBackend(op.name, "cuda")

    def space_of(problem: Any, arch: str):
        return lambda config: builder.why_invalid(problem, export_target(arch), config)

    warnings: list[str] = []
    if request.config is None:
        choices = resolve.from_cache(problems, archs, space_of, settings.cache_path, warnings)
    elif request.config == "default":
        choices = resolve.from_defaults(problems, archs, space_of, name_in=builder.config_in)
    else:
        choices = resolve.from_file(Path(request.config), problems, archs, space_of)
    choices = place_arch_specific(choices, builder, warnings)
    archs = tuple(sorted({c.arch for c in choices}, key=arch_order))

    for c in choices:
        _check_abi_covers(builder, c, abi)
    prefix = abi.prefix(problems[0])
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
            shape=c.problem.sizes(), arch=c.arch, config=dict(c.config), origin=c.origin, origin_detail=c.origin_detail,
            file=cubin, source_file=source, launch=abi_plan(abi, b.artifact.plan), kernels=b.kernels,
            alignment_bytes=b.artifact.plan.alignment_bytes,
            valid_for=valid_for(c.problem, c.config, _resized, lambda p, c=c: _serves(builder, c, p)),
            verification=c.verification, measurement=c.measurement))
        if c.verification.status == COMPILED_ONLY:
            warnings.append(f"{c.problem.label} on {c.arch}: this configuration was never verified on {c.arch}; "
                            f"exported as compiled-only ({c.verification.evidence}).")

    ptx_images, ptx_isa, ptx_note = _ptx_images(built, archs, prefix, files, warnings)
    if not ptx_isa:
        ptx_isa = str(next((b.artifact.resources.get("ptx_isa") for b in built if b.artifact.resources.get("ptx_isa")), ""))

    c_name = f"{prefix}.h"
    fields = {k: v for k, v in problems[0].key().items() if k not in problems[0].sizes()}
    manifest = Manifest(
        op=op.name, dtype=problems[0].dtype, fields=fields, prefix=prefix, variants=tuple(variants),
        ptx=tuple(ptx_images), ptx_note=ptx_note,
        toolchain={"nvrtc": nvrtc.version(), "ptx_isa": ptx_isa or "unknown", "tracea": __version__},
        min_driver=nvrtc.version(),  # a driver loads cubins and PTX of its own CUDA version and older ones
        files={"c_header": c_name, "op_header": abi.header, "runtime_header": c_header.RUNTIME_HEADER,
               "cpp_header": c_header.CPP_HEADER, "example": EXAMPLE, "cmake": CMAKE},
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        tracea_version=__version__,
        shapes=tuple(p.sizes() for p in problems),
    )
    doc = manifest.as_dict()
    errors = validate(doc)
    if errors:
        raise TraceaError(f"the manifest tracea built is invalid ({errors[0]}).", "Report this as a bug.")
    files[c_name] = c_header.render_export(manifest, files, abi, abi.fields(problems[0])).encode()
    files[abi.header] = c_header.render_op_header(abi).encode()
    files[c_header.RUNTIME_HEADER] = c_header.render_runtime().encode()
    files[c_header.CPP_HEADER] = c_header.render_cpp().encode()
    files[EXAMPLE] = abi.example(doc, c_name).encode()
    files[CMAKE] = (c_header.template(CMAKE).replace("@PREFIX@", prefix).replace("@VERSION@", __version__)).encode()
    files[MANIFEST] = (json.dumps(doc, indent=2) + "\n").encode()
    write_folder(out, files)
    return ExportResult(out=out, manifest=doc, files=tuple(sorted(files)), warnings=tuple(warnings), label=manifest.label)


def _ptx_images(built: Sequence[Built], archs: Sequence[str], prefix: str, files: dict[str, bytes],
                warnings: list[str]) -> tuple[list[PtxImage], str, str]:
    """PTX for forward compatibility: that of the lowest requested architecture with no arch-specific instructions.
    Returns (the images, their PTX ISA, the note the manifest carries)."""
    portable = [a for a in archs if not a.endswith("a")]
    specific = sorted({b.choice.arch for b in built if b.choice.arch.endswith("a")})
    specific_list = ", ".join(specific)
    images: list[PtxImage] = []
    ptx_isa = ""
    if portable:
        for b in built:
            if b.choice.arch != portable[0]:
                continue
            program = _ptx(b)
            virtual = "compute_" + portable[0][3:]
            name = f"{KERNELS_DIR}/{prefix}_{shape_label(b.choice.problem.sizes())}_{virtual}.ptx"
            files[name] = program.ptx.encode()
            ptx_isa = program.ptx_isa
            images.append(PtxImage(shape=b.choice.problem.sizes(), arch=virtual, file=name, from_arch=portable[0]))
        note = (f"PTX of the {portable[0]} configurations (ISA {ptx_isa}): the driver compiles it for newer GPUs "
                f"that no cubin here matches.")
        if specific:
            note += (f" No PTX of the {specific_list} configurations: their code is arch-specific and runs on that "
                     "architecture only.")
    elif specific:
        note = (f"no PTX: the {specific_list} configurations are arch-specific code that runs on that architecture "
                "only; add a portable architecture such as sm_80 (with a configuration of another family) to get PTX.")
        warnings.append(note)
    else:
        note = ("no PTX: every requested architecture is arch-specific (" + ", ".join(archs) +
                "), whose instructions no other GPU runs; add a portable architecture such as sm_80 to get PTX.")
        warnings.append(note)
    return images, ptx_isa, note


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

