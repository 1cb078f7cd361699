"""The C headers of an export: `tracea_runtime.h` (the driver glue, the same text in every export of this version)
and `<prefix>.h` (the embedded binaries, their launch tables and the export's four functions).

The runtime finds the CUDA driver at run time (`dlopen("libcuda.so.1")` + `cuGetProcAddress`), so a program that
includes these headers builds and links with `-ldl -lpthread` on a machine without a GPU or a driver. It loads the
binaries into the device's primary context lazily, under a mutex, checks the device's architecture and limits as it
loads, raises the dynamic shared memory limit where a kernel needs more than 48 KiB, and follows the launch
description of docs/kernel-abi.md (memsets of the workspace, kernels with grid rules) generically from tables this
module writes. Every function returns a `tracea_status`.

Kernels of the Hopper family (docs/kernel-abi.md, "Hopper family") take TMA tensor maps: their launch description
names the kernel's parameters (`params`) and describes each map (`tensor_maps`); the tables carry both, and the
runtime encodes the maps over each call's memory with `cuTensorMapEncodeTiled` and passes them by value in the
kernel's parameter order. Their grids (`work_clusters`, `persistent_clusters`) and clusters go through
`cuLaunchKernelEx`. Where the family stages an operand (docs/kernel-abi.md, "Staging"), the description lists the
`scratch` buffers and staging kernel steps with their own `params`; the runtime places the buffers in the caller's
workspace, launches the staging kernels first, and encodes the maps over the buffers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from tracea_cli import __version__
from tracea_cli.errors import TraceaError
from tracea_cli.export.manifest import Manifest, PtxImage, Variant, shape_label

RUNTIME_HEADER = "tracea_runtime.h"
MAX_KERNELS = 4  # kernels per variant the runtime's tables hold (TRACEA_MAX_KERNELS)
MAX_TENSOR_MAPS = 4  # TRACEA_MAX_TENSOR_MAPS
MAX_PARAMS = 16  # TRACEA_MAX_PARAMS
MAX_SCRATCH = 2  # TRACEA_MAX_SCRATCH: the staged copies of A and B
DEFAULT_SMEM_LIMIT = 48 * 1024  # above this a kernel's dynamic shared memory limit must be raised

DTYPE_ENUM = {"fp32": "TRACEA_DTYPE_FP32", "tf32": "TRACEA_DTYPE_TF32", "fp16": "TRACEA_DTYPE_FP16",
              "bf16": "TRACEA_DTYPE_BF16", "fp64": "TRACEA_DTYPE_FP64"}
ELEM_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp64": 8}
LAYOUT_ENUM = {"nn": "TRACEA_LAYOUT_NN", "nt": "TRACEA_LAYOUT_NT"}
EPILOGUE_ENUM = {"none": "TRACEA_EPILOGUE_NONE", "bias": "TRACEA_EPILOGUE_BIAS", "bias_relu": "TRACEA_EPILOGUE_BIAS_RELU",
                 "bias_silu": "TRACEA_EPILOGUE_BIAS_SILU", "bias_gelu": "TRACEA_EPILOGUE_BIAS_GELU",
                 "bias_residual": "TRACEA_EPILOGUE_BIAS_RESIDUAL"}


class UnsupportedLaunch(TraceaError):
    """The backend's launch description uses something the exported runtime cannot follow (a bug between the two)."""


def _unsupported(what: str) -> UnsupportedLaunch:
    return UnsupportedLaunch(f"the launch description has {what}, which the exported runtime cannot follow.",
                             "Update tracea (export and the CUDA backend disagree on docs/kernel-abi.md).")


# ---- kernel parameters and tensor maps (docs/kernel-abi.md) ----------------------------------------------------------

# The engine's ABI, used when a launch description names no `params`.
STANDARD_PARAMS = ("A", "B", "C", "bias", "residual", "workspace", "M", "N", "K", "lda", "ldb", "ldc")
_PARAM_ENUM = {"A": "TRACEA_PARAM_A", "B": "TRACEA_PARAM_B", "C": "TRACEA_PARAM_C", "bias": "TRACEA_PARAM_BIAS",
               "residual": "TRACEA_PARAM_RESIDUAL", "workspace": "TRACEA_PARAM_WORKSPACE",
               "A_staged": "TRACEA_PARAM_A_STAGED", "B_staged": "TRACEA_PARAM_B_STAGED", "M": "TRACEA_PARAM_M",
               "N": "TRACEA_PARAM_N", "K": "TRACEA_PARAM_K", "lda": "TRACEA_PARAM_LDA", "ldb": "TRACEA_PARAM_LDB",
               "ldc": "TRACEA_PARAM_LDC", "lda_staged": "TRACEA_PARAM_LDA_STAGED",
               "ldb_staged": "TRACEA_PARAM_LDB_STAGED"}
# Tensor map fields as cuda.h names them. The mapping of dtypes follows backends/cuda_hopper.py (_MAP_DTYPE), the
# source of truth for how the family's maps are encoded: tf32 operands as TFLOAT32, a tf32 problem's C as FLOAT32.
MAP_DATA_TYPE = {"fp16": "CU_TENSOR_MAP_DATA_TYPE_FLOAT16", "bf16": "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16",
                 "tf32": "CU_TENSOR_MAP_DATA_TYPE_TFLOAT32", "fp32": "CU_TENSOR_MAP_DATA_TYPE_FLOAT32"}
MAP_INTERLEAVE = {"none": "CU_TENSOR_MAP_INTERLEAVE_NONE"}
MAP_SWIZZLE = {"none": "CU_TENSOR_MAP_SWIZZLE_NONE", "32B": "CU_TENSOR_MAP_SWIZZLE_32B",
               "64B": "CU_TENSOR_MAP_SWIZZLE_64B", "128B": "CU_TENSOR_MAP_SWIZZLE_128B"}
MAP_L2_PROMOTION = {"none": "CU_TENSOR_MAP_L2_PROMOTION_NONE", "64B": "CU_TENSOR_MAP_L2_PROMOTION_L2_64B",
                    "128B": "CU_TENSOR_MAP_L2_PROMOTION_L2_128B", "256B": "CU_TENSOR_MAP_L2_PROMOTION_L2_256B"}
# "zero": elements outside the tensor read as zeros, which the driver calls OOB_FILL_NONE (its other mode fills NaN).
MAP_OOB_FILL = {"zero": "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE"}
MAP_ELEM_BYTES = {"fp16": 2, "bf16": 2, "tf32": 4, "fp32": 4}
_MAP_TENSORS = ("A", "B", "C", "A_staged", "B_staged")
_MAP_SIZES = ("M", "N", "K")
_MAP_STRIDES = ("lda", "ldb", "ldc", "lda_staged", "ldb_staged")
# Scratch buffers of the staging pre-pass: the buffer, the operand it holds a copy of, its leading dimension.
_SCRATCH = {"A_staged": ("A", "lda_staged"), "B_staged": ("B", "ldb_staged")}
SWIZZLE_BYTES = {"none": None, "32B": 32, "64B": 64, "128B": 128}


@dataclass(frozen=True)
class TensorMap:
    """One map of a launch description as the C table row `tracea_tensor_map`."""

    name: str
    tensor: str  # TRACEA_PARAM_A | _B | _C | _A_STAGED | _B_STAGED
    dims: tuple[str, str]  # TRACEA_PARAM_M | _N | _K, innermost first
    row_stride: str  # TRACEA_PARAM_LDA | _LDB | _LDC | _LDA_STAGED | _LDB_STAGED
    box: tuple[int, int]
    elem_bytes: int
    data_type: str
    interleave: str
    swizzle: str
    l2_promotion: str
    oob_fill: str


def _lookup(table: Mapping[str, str], value: Any, what: str) -> str:
    if not isinstance(value, str) or value not in table:
        raise _unsupported(f"a tensor map with {what} {value!r}")
    return table[value]


def tensor_map(name: str, spec: Mapping[str, Any]) -> TensorMap:
    """A `tensor_maps` entry of a launch description, checked against what cuTensorMapEncodeTiled accepts."""
    dims, box = spec.get("dims"), spec.get("box")
    if spec.get("tensor") not in _MAP_TENSORS or not isinstance(dims, (list, tuple)) or len(dims) != 2 or any(
            d not in _MAP_SIZES for d in dims) or spec.get("row_stride") not in _MAP_STRIDES:
        raise _unsupported(f"a tensor map {name!r} over {spec.get('tensor')!r} {dims!r} / {spec.get('row_stride')!r}")
    if not isinstance(box, (list, tuple)) or len(box) != 2 or any(
            not isinstance(b, int) or isinstance(b, bool) or not 1 <= b <= 256 for b in box):
        raise _unsupported(f"a tensor map {name!r} with the box {box!r} (two sizes of 1 to 256)")
    data_type = _lookup(MAP_DATA_TYPE, spec.get("dtype"), "the element type")
    elem = int(spec.get("elem_bytes", 0))
    if elem != MAP_ELEM_BYTES[spec["dtype"]]:
        raise _unsupported(f"a tensor map {name!r} of {spec['dtype']} with {elem}-byte elements")
    swizzle = spec.get("swizzle", "none")
    span = SWIZZLE_BYTES.get(swizzle) if isinstance(swizzle, str) else None
    if (box[0] * elem) % 16 or (span is not None and box[0] * elem > span):
        raise _unsupported(f"a tensor map {name!r} whose inner box ({box[0] * elem} bytes) does not suit swizzle {swizzle}")
    return TensorMap(
        name=name, tensor=_PARAM_ENUM[spec["tensor"]], dims=(_PARAM_ENUM[dims[0]], _PARAM_ENUM[dims[1]]),
        row_stride=_PARAM_ENUM[spec["row_stride"]], box=(int(box[0]), int(box[1])), elem_bytes=elem, data_type=data_type,
        interleave=_lookup(MAP_INTERLEAVE, spec.get("interleave", "none"), "the interleave"),
        swizzle=_lookup(MAP_SWIZZLE, swizzle, "the swizzle"),
        l2_promotion=_lookup(MAP_L2_PROMOTION, spec.get("l2_promotion", "none"), "the L2 promotion"),
        oob_fill=_lookup(MAP_OOB_FILL, spec.get("oob_fill", "zero"), "the out-of-bounds fill"))


def kernel_params(launch: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[TensorMap, ...]]:
    """(the kernels' parameters as TRACEA_PARAM_* names, in signature order; the tensor maps they pass)."""
    specs = launch.get("tensor_maps") or {}
    if not isinstance(specs, Mapping):
        raise _unsupported("tensor_maps that are not an object")
    names = launch.get("params")
    names = list(STANDARD_PARAMS) if names is None else list(names)
    maps = [tensor_map(n, specs[n]) for n in names if n in specs]
    unused = sorted(set(specs) - set(names))
    if unused:
        raise _unsupported(f"tensor maps {unused} that no kernel parameter takes")
    if len(maps) > MAX_TENSOR_MAPS or len(names) > MAX_PARAMS:
        raise _unsupported(f"{len(names)} kernel parameters with {len(maps)} tensor maps")
    order = [m.name for m in maps]
    enums = []
    for n in names:
        if n in specs:
            enums.append(f"TRACEA_PARAM_MAP_0 + {order.index(n)}")
        elif n in _PARAM_ENUM:
            enums.append(_PARAM_ENUM[n])
        else:
            raise _unsupported(f"a kernel parameter {n!r}")
    return tuple(enums), tuple(maps)


def step_params(names: Any) -> tuple[str, ...]:
    """A staging step's own `params` (pointers and sizes only, no tensor maps) as TRACEA_PARAM_* names."""
    if not isinstance(names, (list, tuple)) or not names or len(names) > MAX_PARAMS or any(
            n not in _PARAM_ENUM for n in names):
        raise _unsupported(f"kernel step params {names!r}")
    return tuple(_PARAM_ENUM[n] for n in names)


@dataclass(frozen=True)
class Scratch:
    """One scratch buffer of the staging pre-pass as the C table row `tracea_scratch`."""

    buffer: str  # TRACEA_PARAM_A_STAGED | _B_STAGED
    source: str  # TRACEA_PARAM_A | _B: the operand copied there
    rows: str  # TRACEA_PARAM_M | _N | _K
    cols: str
    ld: str  # TRACEA_PARAM_LDA_STAGED | _LDB_STAGED
    ld_multiple: int
    elem_bytes: int
    align_bytes: int


def scratch_buffers(launch: Mapping[str, Any]) -> tuple[Scratch, ...]:
    """The description's `scratch` list (docs/kernel-abi.md, "Staging"), checked, as C table rows."""
    out = []
    for spec in launch.get("scratch") or ():
        name = spec.get("name")
        if name not in _SCRATCH or (spec.get("source"), spec.get("ld")) != _SCRATCH[name] or spec.get(
                "rows") not in _MAP_SIZES or spec.get("cols") not in _MAP_SIZES:
            raise _unsupported(f"a scratch buffer {dict(spec)}")
        numbers = [spec.get(key) for key in ("ld_multiple", "elem_bytes", "align_bytes")]
        if any(not isinstance(v, int) or isinstance(v, bool) or v < 1 for v in numbers) or numbers[2] % 16:
            raise _unsupported(f"a scratch buffer {name!r} with ld_multiple/elem_bytes/align_bytes {numbers}")
        out.append(Scratch(buffer=_PARAM_ENUM[name], source=_PARAM_ENUM[spec["source"]], rows=_PARAM_ENUM[spec["rows"]],
                           cols=_PARAM_ENUM[spec["cols"]], ld=_PARAM_ENUM[spec["ld"]], ld_multiple=numbers[0],
                           elem_bytes=numbers[1], align_bytes=numbers[2]))
    if len(out) > MAX_SCRATCH or len({s.buffer for s in out}) != len(out):
        raise _unsupported(f"{len(out)} scratch buffers")
    return tuple(out)


# ---- launch descriptions -> C tables --------------------------------------------------------------------------------

@dataclass(frozen=True)
class GridRule:
    kind: str  # TRACEA_GRID_CONST | _TILES | _TILES_M | _TILES_N | _SPLIT_K | _MN_DIV | _WORK_CLUSTERS | _PERSISTENT_CLUSTERS
    #          | _M_DIV | _N_DIV | _K_DIV
    value: int = 0  # the constant, Q of mn/Q (m/Q, n/Q, k/Q), or cluster_m of the cluster rules


@dataclass(frozen=True)
class Step:
    kind: str  # "memset" | "kernel"
    kernel: int = 0  # index into the variant's kernel names
    grid: tuple[GridRule, GridRule, GridRule] = (GridRule("TRACEA_GRID_CONST", 1),) * 3
    block: tuple[int, int, int] = (1, 1, 1)
    cluster: tuple[int, int, int] = (0, 0, 0)
    dynamic_smem_bytes: int = 0
    memset_bytes_per_mn: int = 0
    params: tuple[str, ...] | None = None  # the step's own parameters (staging kernels); None: the variant's


_NAMED_RULES = {"tiles": "TRACEA_GRID_TILES", "tiles_m": "TRACEA_GRID_TILES_M", "tiles_n": "TRACEA_GRID_TILES_N",
                "split_k": "TRACEA_GRID_SPLIT_K"}
_CLUSTER_RULES = {"work_clusters": "TRACEA_GRID_WORK_CLUSTERS", "persistent_clusters": "TRACEA_GRID_PERSISTENT_CLUSTERS"}
_DIVIDED_RULES = {"mn": "TRACEA_GRID_MN_DIV", "m": "TRACEA_GRID_M_DIV", "n": "TRACEA_GRID_N_DIV", "k": "TRACEA_GRID_K_DIV"}


def grid_rule(rule: Any, cluster_m: int | None = None) -> GridRule:
    """A grid rule of docs/kernel-abi.md ("tiles", "tiles_m", "tiles_n", "split_k", "mn/Q", "m/Q", "n/Q", "k/Q",
    "work_clusters", "persistent_clusters", an integer) as a C rule. The cluster rules need the description's
    `cluster_m`."""
    if isinstance(rule, int) and not isinstance(rule, bool) and rule >= 1:
        return GridRule("TRACEA_GRID_CONST", rule)
    if isinstance(rule, str):
        if rule in _NAMED_RULES:
            return GridRule(_NAMED_RULES[rule])
        if rule in _CLUSTER_RULES:
            if not isinstance(cluster_m, int) or isinstance(cluster_m, bool) or cluster_m < 1:
                raise UnsupportedLaunch(f"the grid rule {rule!r} needs the launch description's cluster_m, which it lacks.",
                                        "Report this as a bug in the CUDA backend.")
            return GridRule(_CLUSTER_RULES[rule], cluster_m)
        m = re.fullmatch(r"(mn|m|n|k)/([1-9][0-9]*)", rule)
        if m:
            return GridRule(_DIVIDED_RULES[m.group(1)], int(m.group(2)))
    raise UnsupportedLaunch(f"the launch description has a grid rule {rule!r} that the exported runtime does not know.",
                            "Update tracea (export and the CUDA backend disagree on docs/kernel-abi.md).")


def launch_steps(launch: Mapping[str, Any], kernel_names: Sequence[str]) -> tuple[Step, ...]:
    """The launch description's steps as C table rows; kernel steps refer to `kernel_names` by index."""
    steps = []
    for raw in launch.get("steps", ()):
        kind = raw.get("kind")
        if kind == "memset":
            if raw.get("buffer") != "workspace" or raw.get("bytes_per") != "mn":
                raise UnsupportedLaunch(f"the launch description has a memset the exported runtime cannot do: {dict(raw)}.",
                                        "Update tracea (export and the CUDA backend disagree on docs/kernel-abi.md).")
            steps.append(Step("memset", memset_bytes_per_mn=int(raw.get("elem_bytes", 1))))
        elif kind == "kernel":
            extra = set(raw) - {"kind", "name", "block", "grid", "dynamic_smem_bytes", "cluster", "params"}
            if extra:
                raise UnsupportedLaunch(f"kernel step {raw.get('name')!r} needs {sorted(extra)}, which the exported runtime "
                                        "cannot provide yet.", "Export a configuration of another kernel family.")
            grid = raw["grid"]
            block = tuple(int(b) for b in raw["block"]) + (1, 1)
            cluster = tuple(int(c) for c in raw.get("cluster", (0, 0, 0))) + (1, 1)
            cluster_m = launch.get("cluster_m")
            if raw.get("cluster") and cluster_m is not None and cluster[0] != cluster_m:
                raise _unsupported(f"a kernel step with cluster {list(raw['cluster'])} but cluster_m={cluster_m}")
            if raw.get("cluster") and min(cluster[:3]) < 1:
                raise _unsupported(f"a kernel step with cluster {list(raw['cluster'])}")
            steps.append(Step(
                "kernel",
                kernel=list(kernel_names).index(raw["name"]),
                grid=(grid_rule(grid["x"], cluster_m), grid_rule(grid["y"], cluster_m), grid_rule(grid["z"], cluster_m)),
                block=block[:3],  # type: ignore[arg-type]
                cluster=cluster[:3] if raw.get("cluster") else (0, 0, 0),  # type: ignore[arg-type]
                dynamic_smem_bytes=int(raw.get("dynamic_smem_bytes", 0)),
                params=step_params(raw["params"]) if "params" in raw else None,
            ))
        else:
            raise UnsupportedLaunch(f"the launch description has a step of kind {kind!r} the exported runtime cannot do.",
                                    "Update tracea (export and the CUDA backend disagree on docs/kernel-abi.md).")
    if not any(s.kind == "kernel" for s in steps):
        raise UnsupportedLaunch("the launch description launches no kernel.", "Report this as a bug in the CUDA backend.")
    return tuple(steps)


def kernel_names(variant: Variant) -> list[str]:
    """Kernels in the order the launch steps first name them."""
    names: list[str] = []
    for step in variant.launch.get("steps", ()):
        if step.get("kind") == "kernel" and step["name"] not in names:
            names.append(step["name"])
    if len(names) > MAX_KERNELS:
        raise UnsupportedLaunch(f"a variant launches {len(names)} kernels; the exported runtime holds {MAX_KERNELS}.",
                                "Report this as a bug.")
    return names


# ---- rendering -----------------------------------------------------------------------------------------------------

def _bytes_literal(data: bytes, indent: str = "  ", per_line: int = 24) -> str:
    rows = (", ".join(str(b) for b in data[i : i + per_line]) for i in range(0, len(data), per_line))
    return ",\n".join(indent + row for row in rows)


def _c_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _step_row(step: Step, params_symbol: str) -> str:
    kind = "TRACEA_STEP_MEMSET" if step.kind == "memset" else "TRACEA_STEP_KERNEL"
    grid = ", ".join(f"{{{g.kind}, {g.value}u}}" for g in step.grid)
    block = ", ".join(f"{b}u" for b in step.block)
    cluster = ", ".join(f"{c}u" for c in step.cluster)
    n_params = len(step.params) if step.params is not None else 0
    return (f"  {{{kind}, {step.kernel}, {{{grid}}}, {{{block}}}, {{{cluster}}}, "
            f"{step.dynamic_smem_bytes}u, {step.memset_bytes_per_mn}u, {params_symbol}, {n_params}}},")


def _scratch_row(b: Scratch) -> str:
    return (f"  {{{b.buffer}, {b.source}, {b.rows}, {b.cols}, {b.ld}, {b.ld_multiple}u, {b.elem_bytes}u, "
            f"{b.align_bytes}u}},")


def _map_row(m: TensorMap) -> str:
    return (f"  {{/* {m.name} */ {m.tensor}, {{{m.dims[0]}, {m.dims[1]}}}, {m.row_stride}, {{{m.box[0]}u, {m.box[1]}u}}, "
            f"{m.elem_bytes}u,\n   {m.data_type}, {m.interleave}, {m.swizzle}, {m.l2_promotion}, {m.oob_fill}}},")


def _arch_numbers(arch: str) -> tuple[int, int, bool]:
    m = re.fullmatch(r"(?:sm|compute)_(\d+)(\d)(a?)", arch)
    if not m:
        raise ValueError(f"not a CUDA architecture: {arch}")
    return int(m.group(1)), int(m.group(2)), bool(m.group(3))


def _variant_block(prefix: str, tag: str, variant: Variant, image_symbol: str, image_size: int) -> tuple[str, str]:
    """(definitions, one initializer row of the variants table) for one variant."""
    names = kernel_names(variant)
    steps = launch_steps(variant.launch, names)
    launch = variant.launch
    params, maps = kernel_params(launch)
    rules = {g.kind for st in steps for g in st.grid}
    clusters = set(_CLUSTER_RULES.values())
    needs = {"tile_m": rules & ({"TRACEA_GRID_TILES", "TRACEA_GRID_TILES_M"} | clusters),
             "tile_n": rules & ({"TRACEA_GRID_TILES", "TRACEA_GRID_TILES_N"} | clusters),
             "split_k": rules & {"TRACEA_GRID_SPLIT_K"}}
    missing = [name for name, used in needs.items() if used and name not in launch]
    if missing:
        raise UnsupportedLaunch(f"the launch description uses grid rules that need {missing}, which it does not give.",
                                "Report this as a bug in the CUDA backend.")
    scratch = scratch_buffers(launch)
    named = {p for s in steps if s.params is not None for p in s.params} | set(params) | {m.tensor for m in maps} | {
        m.row_stride for m in maps}
    unplaced = sorted(n for n in named if n.endswith("_STAGED") and n not in {x for b in scratch for x in (b.buffer, b.ld)})
    if unplaced:
        raise _unsupported(f"staged buffers {unplaced} that no scratch entry places")
    threads = max(s.block[0] * s.block[1] * s.block[2] for s in steps if s.kind == "kernel")
    lines = [f"static const char* const {prefix}__kernels_{tag}[] = {{{', '.join(_c_string(n) for n in names)}}};"]
    step_symbols = []
    for i, st in enumerate(steps):
        symbol = "NULL"
        if st.params is not None:
            symbol = f"{prefix}__params_{tag}_step{i}"
            lines.append(f"static const int {symbol}[] = {{{', '.join(st.params)}}};")
        step_symbols.append(symbol)
    lines += [
        f"static const tracea_step {prefix}__steps_{tag}[] = {{",
        *(_step_row(s, symbol) for s, symbol in zip(steps, step_symbols)),
        "};",
        f"static const int {prefix}__params_{tag}[] = {{{', '.join(params)}}};",
    ]
    maps_symbol = "NULL"
    if maps:
        maps_symbol = f"{prefix}__maps_{tag}"
        lines += [f"static const tracea_tensor_map {maps_symbol}[] = {{", *(_map_row(m) for m in maps), "};"]
    scratch_symbol = "NULL"
    if scratch:
        scratch_symbol = f"{prefix}__scratch_{tag}"
        lines += [f"static const tracea_scratch {scratch_symbol}[] = {{", *(_scratch_row(b) for b in scratch), "};"]
    defs = "\n".join(lines)
    s = variant.shape
    vf = variant.valid_for
    row = (
        f"  {{/* {shape_label(s)} {variant.arch} */ {s['m']}, {s['n']}, {s['k']},\n"
        + "".join(f"   {vf[d + '_min']}, {vf[d + '_max']}, {vf[d + '_multiple']},\n" for d in "mnk")
        + f"   {variant.alignment_bytes}u,\n"
        f"   {int(launch.get('tile_m', 1))}u, {int(launch.get('tile_n', 1))}u, {int(launch.get('split_k', 1))}u, "
        f"{int(launch.get('workspace_bytes_per_mn', 0))}u, {variant.shared_bytes}u, {threads}u,\n"
        f"   {image_symbol}, {image_size}u, {prefix}__kernels_{tag}, {len(names)}, {prefix}__steps_{tag}, {len(steps)},\n"
        f"   {prefix}__params_{tag}, {len(params)}, {maps_symbol}, {len(maps)}, {scratch_symbol}, {len(scratch)}}},"
    )
    return defs, row


def render_export(manifest: Manifest, images: Mapping[str, bytes]) -> str:
    """The export's C header. `images` maps each cubin and PTX file named in `manifest` to its bytes."""
    p = manifest.prefix
    guard = p.upper() + "_H_"
    n_shapes = len(manifest.shape_list())
    archs = sorted({v.arch for v in manifest.variants}, key=lambda a: _arch_numbers(a))
    sets: list[tuple[str, list[Variant], list[str]]] = []  # (arch, variants, image symbols)
    parts: list[str] = []
    image_defs: list[str] = []
    variant_rows: dict[str, list[str]] = {}

    def image(file: str, data: bytes) -> str:
        symbol = f"{p}__image_{len(image_defs)}"
        image_defs.append(f"/* {file} ({len(data)} bytes) */\n"
                          f"static const unsigned char {symbol}[{len(data)}] __attribute__((aligned(16))) = {{\n"
                          f"{_bytes_literal(data)}\n}};")
        return symbol

    order = {shape_label(s): i for i, s in enumerate(manifest.shape_list())}
    for arch in archs:
        variants = sorted((v for v in manifest.variants if v.arch == arch), key=lambda v: order[shape_label(v.shape)])
        rows = []
        for i, v in enumerate(variants):
            symbol = image(v.file, images[v.file])
            defs, row = _variant_block(p, f"{arch}_{i}", v, symbol, len(images[v.file]))
            parts.append(defs)
            rows.append(row)
        variant_rows[arch] = rows
        sets.append((arch, variants, []))
    ptx_sets: list[tuple[str, list[str]]] = []
    by_arch: dict[str, list[PtxImage]] = {}
    for px in manifest.ptx:
        by_arch.setdefault(px.arch, []).append(px)
    for arch, ptxs in by_arch.items():
        rows = []
        for i, px in enumerate(sorted(ptxs, key=lambda x: order[shape_label(x.shape)])):
            source = next(v for v in manifest.variants if v.arch == px.from_arch and v.shape == px.shape)
            data = images[px.file]
            if not data.endswith(b"\0"):
                data += b"\0"  # the driver reads PTX as a C string
            symbol = image(px.file, data)
            defs, row = _variant_block(p, f"{arch}_{i}", source, symbol, len(data))
            parts.append(defs)
            rows.append(row)
        ptx_sets.append((arch, rows))

    set_rows = []
    tables = []
    for arch, _variants, _ in sets:
        major, minor, specific = _arch_numbers(arch)
        tables.append(f"static const tracea_variant {p}__variants_{arch}[] = {{\n" + "\n".join(variant_rows[arch]) + "\n};")
        set_rows.append(f"  {{\"{arch}\", {major}, {minor}, {int(specific)}, 0, {p}__variants_{arch}, {len(variant_rows[arch])}}},")
    for arch, rows in ptx_sets:
        major, minor, _ = _arch_numbers(arch)
        tables.append(f"static const tracea_variant {p}__variants_{arch}[] = {{\n" + "\n".join(rows) + "\n};")
        set_rows.append(f"  {{\"{arch}\", {major}, {minor}, 0, 1, {p}__variants_{arch}, {len(rows)}}},")
    max_variants = max(len(variant_rows[a]) for a in variant_rows)
    min_driver = manifest.min_driver_version
    shapes = ", ".join(shape_label(s) for s in manifest.shape_list())
    label = f"gemm {manifest.dtype} {manifest.layout}" + ("" if manifest.epilogue == "none" else f" +{manifest.epilogue}")
    ptx_line = (", ".join(x.arch for x in manifest.ptx) + " PTX") if manifest.ptx else "no PTX"
    staged = any(v.launch.get("scratch") for v in manifest.variants)

    return f"""/* {p}.h: {label}, tuned shapes {shapes}; cubins for {', '.join(archs)}; {ptx_line}.
 * Generated by tracea {__version__} on {manifest.created}; manifest.json beside it says what each binary is, where its
 * configuration was verified and what it measured. Do not edit: export again instead.
 *
 *   {p}_launch(&args, stream)        C = A.B on `stream` (see tracea_gemm_args in {RUNTIME_HEADER})
 *   {p}_workspace_bytes_mnk(m, n, k) scratch bytes args.workspace needs (0: none)
 *   {p}_workspace_bytes(m, n)        the same without K: enough only for exports that stage no operand
 *   {p}_load(device)                 load now instead of at the first launch (optional)
 *   {p}_unload()                     unload from every device (when no launch is in flight)
 *
 * The call picks the tuned shape that equals (M, N, K), else the nearest tuned shape whose kernel is valid for it
 * (shape multiples and pointer alignment), else returns TRACEA_ERROR_UNSUPPORTED_SHAPE or TRACEA_ERROR_MISALIGNED.
 * In C++, include tracea.hpp as well for tracea::gemm(a, b, out, params).
 */
#ifndef {guard}
#define {guard}

#include "{RUNTIME_HEADER}"

#ifdef __cplusplus
extern "C" {{
#endif

{chr(10).join(image_defs)}

{chr(10).join(parts)}

{chr(10).join(tables)}

/* Image sets, one per architecture: the runtime takes the cubin of the device's exact architecture, else one of the
 * same major version and a lower minor, else PTX of an architecture the device is at least. */
static const tracea_image_set {p}__sets[] = {{
{chr(10).join(set_rows)}
}};

static pthread_mutex_t {p}__mutex = PTHREAD_MUTEX_INITIALIZER;
static tracea_device_state {p}__devices[TRACEA_MAX_DEVICES];
static CUmodule {p}__modules[TRACEA_MAX_DEVICES * {max_variants}];
static CUfunction {p}__functions[TRACEA_MAX_DEVICES * {max_variants} * TRACEA_MAX_KERNELS];
static unsigned int {p}__resident[TRACEA_MAX_DEVICES * {max_variants} * TRACEA_MAX_KERNELS];

static const tracea_export {p}__export = {{
  "{label}", {DTYPE_ENUM[manifest.dtype]}, {LAYOUT_ENUM[manifest.layout]}, {EPILOGUE_ENUM[manifest.epilogue]},
  {ELEM_BYTES[manifest.dtype]}u, {min_driver}, {p}__sets, {len(set_rows)}, {max_variants}, {n_shapes},
  &{p}__mutex, {p}__devices, {p}__modules, {p}__functions, {p}__resident}};

/* C = epilogue(A.B) on `stream`: the device is the stream's (for the default stream, the calling thread's current
 * context's, else device 0). Loads the binaries on first use. Returns TRACEA_OK or the reason it did not launch. */
static inline tracea_status {p}_launch(const tracea_gemm_args* args, CUstream stream) {{
  return tracea__gemm(&{p}__export, args, stream);
}}

/* Bytes of scratch args.workspace must hold for an M x N x K call (0 when no kernel of this export needs any):
 * the split-K partial sums and the staged copies of A and B (docs/kernel-abi.md, "Staging"). */
static inline size_t {p}_workspace_bytes_mnk(int m, int n, int k) {{
  return tracea__workspace_bytes(&{p}__export, m, n, k);
}}

/* The M x N part of {p}_workspace_bytes_mnk (split-K only), kept for programs written before staging: exports whose
 * manifest lists `scratch` buffers{' (this one does)' if staged else ''} need {p}_workspace_bytes_mnk. */
static inline size_t {p}_workspace_bytes(int m, int n) {{
  return tracea__workspace_bytes(&{p}__export, m, n, 0);
}}

/* Load the binaries for CUDA device `device` now (checks the driver, the architecture and the limits). */
static inline tracea_status {p}_load(int device) {{
  return tracea__load_ordinal(&{p}__export, device);
}}

/* Unload from every device and release the primary contexts this export retained. */
static inline void {p}_unload(void) {{
  tracea__unload(&{p}__export);
}}

#ifdef __cplusplus
}} /* extern "C" */
static const tracea::detail::Registration {p}__registration(&{p}__export);
#endif

#endif /* {guard} */
"""


def template(name: str) -> str:
    """A file of tracea_cli/export/templates/ (the C, C++ and CMake text the export fills in)."""
    from importlib import resources

    return resources.files("tracea_cli.export").joinpath("templates", name).read_text()


def render_runtime() -> str:
    """tracea_runtime.h: the same text in every export of this tracea version."""
    return (template(RUNTIME_HEADER).replace("@VERSION@", __version__).replace("@MAX_KERNELS@", str(MAX_KERNELS))
            .replace("@MAX_TENSOR_MAPS@", str(MAX_TENSOR_MAPS)).replace("@MAX_PARAMS@", str(MAX_PARAMS))
            .replace("@MAX_SCRATCH@", str(MAX_SCRATCH)))
