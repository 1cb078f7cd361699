"""The C headers of an export: `tracea_runtime.h` (the driver glue, the same text in every export of this version),
the op's header (`tracea_<op>.h`: its argument struct and calls, from the op's ABI), `tracea.hpp`, and `<prefix>.h`
(the embedded binaries, their launch tables and the export's functions).

The runtime finds the CUDA driver at run time (`dlopen("libcuda.so.1")` + `cuGetProcAddress`), so a program that
includes these headers builds and links with `-ldl -lpthread` on a machine without a GPU or a driver. It loads the
binaries into the device's primary context lazily, under a mutex, checks the device's architecture and limits as it
loads, raises the dynamic shared memory limit where a kernel needs more than 48 KiB, and follows each variant's launch
plan (ops/launch.py, docs/kernel-abi.md: memsets of the workspace, kernels with grid rules, clusters, TMA tensor
maps encoded over each call's memory, staging kernels into scratch) generically from tables this module writes. The
runtime knows no op: a call is a set of slots (pointers and ints) that the op's header fills from its argument
struct; the tables name kernel parameters, tensors and sizes by slot (the op's `ExportAbi`). Every function returns a
`tracea_status`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from tracea_cli import __version__
from tracea_cli.errors import TraceaError
from tracea_cli.export.manifest import Manifest, Variant, shape_label
from tracea_cli.ops.base import ExportAbi
from tracea_cli.ops.launch import KernelStep, LaunchPlan, MemsetStep, Requirement, Scratch, TensorMap

RUNTIME_HEADER = "tracea_runtime.h"
CPP_HEADER = "tracea.hpp"
MAX_KERNELS = 4  # kernels per variant the runtime's tables hold (TRACEA_MAX_KERNELS)
MAX_TENSOR_MAPS = 4  # TRACEA_MAX_TENSOR_MAPS
MAX_PARAMS = 24  # TRACEA_MAX_PARAMS
MAX_SCRATCH = 2  # TRACEA_MAX_SCRATCH
MAX_POINTERS = 16  # TRACEA_MAX_POINTERS
MAX_INTS = 32  # TRACEA_MAX_INTS
MAX_DISPATCH = 8  # TRACEA_MAX_DISPATCH
MAX_FIELDS = 8  # TRACEA_MAX_FIELDS

DTYPE_ENUM = {"fp32": "TRACEA_DTYPE_FP32", "tf32": "TRACEA_DTYPE_TF32", "fp16": "TRACEA_DTYPE_FP16",
              "bf16": "TRACEA_DTYPE_BF16", "fp64": "TRACEA_DTYPE_FP64"}
ELEM_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp64": 8}


class UnsupportedLaunch(TraceaError):
    """The family's launch plan uses something the exported runtime cannot follow (a bug between the two)."""


def _unsupported(what: str) -> UnsupportedLaunch:
    return UnsupportedLaunch(f"the launch plan has {what}, which the exported runtime cannot follow.",
                             "Update tracea (export and the family disagree on docs/kernel-abi.md).")


# ---- slots: what the tables call the op's values ------------------------------------------------------------------------

@dataclass(frozen=True)
class Slots:
    """The op's ABI as C names: pointer slots, int slots, and what a table row writes for each."""

    abi: ExportAbi

    def name(self, slot: str) -> str:
        return self.abi.slot_prefix + slot.upper()

    def pointer(self, slot: Any) -> str:
        if slot not in self.abi.pointers:
            raise _unsupported(f"a pointer {slot!r} the op's ABI does not have")
        return self.name(slot)

    def integer(self, slot: Any) -> str:
        if slot not in self.abi.ints:
            raise _unsupported(f"a size {slot!r} the op's ABI does not have")
        return self.name(slot)

    def param(self, slot: str, maps: Sequence[str]) -> str:
        """A kernel parameter's code: a pointer slot, TRACEA_PARAM_INT + an int slot, TRACEA_PARAM_MAP + a map."""
        if slot in maps:
            return f"TRACEA_PARAM_MAP + {list(maps).index(slot)}"
        if slot in self.abi.ints:
            return f"TRACEA_PARAM_INT + {self.name(slot)}"
        if slot not in self.abi.pointers:
            raise _unsupported(f"a kernel parameter {slot!r} that is none of the op's ABI slots or tensor maps")
        return self.name(slot)

    def declarations(self) -> str:
        """The slot enum, the tensors the runtime checks, the dispatch sizes and the op's tracea_abi table."""
        op = self.abi.slot_prefix.lower().rstrip("_")  # "tracea_gemm"
        if len(self.abi.pointers) > MAX_POINTERS or len(self.abi.ints) > MAX_INTS or len(self.abi.dispatch) > MAX_DISPATCH:
            raise _unsupported(f"{len(self.abi.pointers)} pointer and {len(self.abi.ints)} int slots")
        pointers = ", ".join(f"{self.name(s)} = {i}" for i, s in enumerate(self.abi.pointers))
        ints = ", ".join(f"{self.name(s)} = {i}" for i, s in enumerate(self.abi.ints))
        tensors = ", ".join(f"{{{self.pointer(p)}, {self.integer(ld) if ld else -1}}}" for p, ld in self.abi.tensors)
        dispatch = ", ".join(self.integer(s) for s in self.abi.dispatch)
        grid = ", ".join(self.integer(s) for s in self.abi.grid_sizes)
        name = op.removeprefix("tracea_")
        requests = [f"static const int {op}__requests[] = {{{', '.join(self.integer(s) for s in self.abi.requests)}}};"]
        tail = f", {op}__requests, {len(self.abi.requests)}" if self.abi.requests else ", NULL, 0"
        return "\n".join([
            f"enum {{ {pointers} }};  /* pointer slots */",
            f"enum {{ {ints} }};  /* int slots */",
            f"static const tracea_tensor_arg {op}__tensors[] = {{{tensors}}};",
            f"static const int {op}__dispatch[] = {{{dispatch}}};",
            *(requests if self.abi.requests else []),
            f"static const tracea_abi {op}__abi = {{\"{name}\", {self.pointer(self.abi.workspace)}, {{{grid}}}, "
            f"{op}__dispatch, {len(self.abi.dispatch)}, {op}__tensors, {len(self.abi.tensors)}{tail}}};",
        ])

    @property
    def abi_symbol(self) -> str:
        return f"{self.abi.slot_prefix.lower().rstrip('_')}__abi"


# ---- tensor maps, scratch and kernel parameters -------------------------------------------------------------------------

# Tensor map fields as cuda.h names them. The data types follow backends/cuda.py (_MAP_DTYPE), the source of truth
# for how maps are encoded: tf32 operands as TFLOAT32, a tf32 problem's C as FLOAT32.
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
SWIZZLE_BYTES = {"none": None, "32B": 32, "64B": 64, "128B": 128}


def _lookup(table: Mapping[str, str], value: Any, what: str) -> str:
    if not isinstance(value, str) or value not in table:
        raise _unsupported(f"a tensor map with {what} {value!r}")
    return table[value]


MAP_KIND = {"tiled3d": "TRACEA_MAP_TILED3D", "im2col": "TRACEA_MAP_IM2COL"}  # "tiled" is 0: its rows end earlier


def _box_fits(name: str, m: TensorMap, inner: int) -> None:
    """The innermost extent a copy moves (`inner` elements) suits the swizzle: a multiple of 16 bytes within its
    span."""
    span = SWIZZLE_BYTES.get(m.swizzle) if isinstance(m.swizzle, str) else None
    if (inner * m.elem_bytes) % 16 or (span is not None and inner * m.elem_bytes > span):
        raise _unsupported(f"a tensor map {name!r} whose inner box ({inner * m.elem_bytes} bytes) does not suit "
                           f"swizzle {m.swizzle}")


def _small_ints(values: Sequence[Any], low: int, high: int) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) and low <= v <= high for v in values)


def tensor_map_row(name: str, m: TensorMap, slots: Slots) -> str:
    """One `tracea_tensor_map` row, checked against what cuTensorMapEncodeTiled (kinds "tiled", "tiled3d") or
    cuTensorMapEncodeIm2col (kind "im2col") accepts: the tensor, sizes, row stride, box, element size and modes as
    the 2-D tiled rows had them, then the kind, the outer dimensions' strides, the im2col corners, traversal strides
    and load shape."""
    rank = {"tiled": 2, "tiled3d": 3, "im2col": 4}.get(m.kind)
    if rank is None or len(m.dims) != rank:
        raise _unsupported(f"a tensor map {name!r} of kind {m.kind!r} with dims {m.dims!r}")
    if m.kind == "im2col":
        if m.box or not _small_ints([m.channels_per_pixel], 1, 256) or not _small_ints([m.pixels_per_column], 1, 1024):
            raise _unsupported(f"an im2col tensor map {name!r} loading {m.channels_per_pixel} channels x "
                               f"{m.pixels_per_column} pixels (1..256 x 1..1024, no box)")
        if (len(m.lower) != 2 or len(m.upper) != 2 or not _small_ints([*m.lower, *m.upper], -128, 127)
                or len(m.element_strides) != 4 or not _small_ints(m.element_strides, 1, 8)):
            raise _unsupported(f"an im2col tensor map {name!r} with corners {m.lower!r}, {m.upper!r} and traversal "
                               f"strides {m.element_strides!r}")
        inner = m.channels_per_pixel
    else:
        if len(m.box) != rank or not _small_ints(m.box, 1, 256):
            raise _unsupported(f"a tensor map {name!r} with dims {m.dims!r} and box {m.box!r} ({rank} sizes of 1 to "
                               "256)")
        inner = m.box[0]
    data_type = _lookup(MAP_DATA_TYPE, m.dtype, "the element type")
    if m.elem_bytes != MAP_ELEM_BYTES[m.dtype]:
        raise _unsupported(f"a tensor map {name!r} of {m.dtype} with {m.elem_bytes}-byte elements")
    _box_fits(name, m, inner)
    fields = (_lookup(MAP_INTERLEAVE, m.interleave, "the interleave"), _lookup(MAP_SWIZZLE, m.swizzle, "the swizzle"),
              _lookup(MAP_L2_PROMOTION, m.l2_promotion, "the L2 promotion"),
              _lookup(MAP_OOB_FILL, m.oob_fill, "the out-of-bounds fill"))
    if m.kind == "tiled":
        rest = "TRACEA_MAP_TILED, {-1, -1}, {0, 0}, {0, 0}, {1u, 1u, 1u, 1u}, 0u, 0u"
        return (f"  {{/* {name} */ {slots.pointer(m.tensor)}, {{{slots.integer(m.dims[0])}, {slots.integer(m.dims[1])}}}, "
                f"{slots.integer(m.row_stride)}, {{{m.box[0]}u, {m.box[1]}u}}, {m.elem_bytes}u,\n   {data_type}, "
                f"{', '.join(fields)},\n   {rest}}},")
    if len(m.strides) != rank - 1:
        raise _unsupported(f"a tensor map {name!r} of kind {m.kind} with strides {m.strides!r}")
    dims = ", ".join(slots.integer(d) for d in m.dims)
    box = ", ".join(f"{b}u" for b in m.box) or "0u"
    outer = [slots.integer(x) for x in m.strides[1:]] + ["-1"] * (3 - len(m.strides))
    if m.kind == "im2col":
        corners = f"{{{m.lower[0]}, {m.lower[1]}}}, {{{m.upper[0]}, {m.upper[1]}}}"
        traversal = ", ".join(f"{e}u" for e in m.element_strides)
        load = f"{m.channels_per_pixel}u, {m.pixels_per_column}u"
    else:
        corners, traversal, load = "{0, 0}, {0, 0}", "1u, 1u, 1u, 1u", "0u, 0u"
    return (f"  {{/* {name} */ {slots.pointer(m.tensor)}, {{{dims}}}, {slots.integer(m.strides[0])}, {{{box}}}, "
            f"{m.elem_bytes}u,\n   {data_type}, {', '.join(fields)},\n   {MAP_KIND[m.kind]}, {{{', '.join(outer)}}}, "
            f"{corners}, {{{traversal}}}, {load}}},")


def requirement_row(r: Requirement, slots: Slots) -> str:
    """One `tracea_requirement` row: value == of[0] * of[1] (-1: a factor of 1)."""
    if not 1 <= len(r.of) <= 2:
        raise _unsupported(f"a requirement {r.value} = product of {list(r.of)} (one or two factors)")
    of = [slots.integer(x) for x in r.of] + ["-1"] * (2 - len(r.of))
    return f"  {{{slots.integer(r.value)}, {{{', '.join(of)}}}}},"


def kernel_params(plan: LaunchPlan, slots: Slots) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the main kernels' parameter codes in signature order, the names of the tensor maps they pass, in order)."""
    maps = [n for n in plan.params if n in plan.tensor_maps]
    unused = sorted(set(plan.tensor_maps) - set(plan.params))
    if unused:
        raise _unsupported(f"tensor maps {unused} that no kernel parameter takes")
    if len(maps) > MAX_TENSOR_MAPS or len(plan.params) > MAX_PARAMS:
        raise _unsupported(f"{len(plan.params)} kernel parameters with {len(maps)} tensor maps")
    return tuple(slots.param(n, maps) for n in plan.params), tuple(maps)


def step_params(names: Sequence[str], slots: Slots) -> tuple[str, ...]:
    """A staging step's own parameters (pointers and sizes only, no tensor maps)."""
    if not names or len(names) > MAX_PARAMS:
        raise _unsupported(f"kernel step params {list(names)!r}")
    return tuple(slots.param(n, ()) for n in names)


def scratch_row(s: Scratch, slots: Slots) -> str:
    numbers = (s.ld_multiple, s.elem_bytes, s.align_bytes)
    if any(not isinstance(v, int) or isinstance(v, bool) or v < 1 for v in numbers) or s.align_bytes % 16:
        raise _unsupported(f"a scratch buffer {s.name!r} with ld_multiple/elem_bytes/align_bytes {list(numbers)}")
    source = slots.pointer(s.source) if s.source is not None else "-1"  # an intermediate: no operand is staged
    return (f"  {{{slots.pointer(s.name)}, {source}, {slots.integer(s.rows)}, {slots.integer(s.cols)}, "
            f"{slots.integer(s.ld)}, {s.ld_multiple}u, {s.elem_bytes}u, {s.align_bytes}u}},")


# ---- grid rules and steps -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GridRule:
    kind: str  # TRACEA_GRID_CONST | _TILES | _TILES_M | _TILES_N | _SPLIT_K | _MN_DIV | _WORK_CLUSTERS | _PERSISTENT_CLUSTERS
    #          | _M_DIV | _N_DIV | _K_DIV
    value: int = 0  # the constant, Q of mn/Q (m/Q, n/Q, k/Q), or cluster_m of the cluster rules


_NAMED_RULES = {"tiles": "TRACEA_GRID_TILES", "tiles_m": "TRACEA_GRID_TILES_M", "tiles_n": "TRACEA_GRID_TILES_N",
                "split_k": "TRACEA_GRID_SPLIT_K"}
_CLUSTER_RULES = {"work_clusters": "TRACEA_GRID_WORK_CLUSTERS", "persistent_clusters": "TRACEA_GRID_PERSISTENT_CLUSTERS"}
_DIVIDED_RULES = {"mn": "TRACEA_GRID_MN_DIV", "m": "TRACEA_GRID_M_DIV", "n": "TRACEA_GRID_N_DIV", "k": "TRACEA_GRID_K_DIV"}


def grid_rule(rule: Any, cluster_m: int | None = None) -> GridRule:
    """A grid rule of docs/kernel-abi.md as a C rule. The cluster rules need the plan's `cluster_m`."""
    if isinstance(rule, int) and not isinstance(rule, bool) and rule >= 1:
        return GridRule("TRACEA_GRID_CONST", rule)
    if isinstance(rule, str):
        if rule in _NAMED_RULES:
            return GridRule(_NAMED_RULES[rule])
        if rule in _CLUSTER_RULES:
            if not isinstance(cluster_m, int) or isinstance(cluster_m, bool) or cluster_m < 1:
                raise UnsupportedLaunch(f"the grid rule {rule!r} needs the launch plan's cluster_m, which it lacks.",
                                        "Report this as a bug in the kernel family.")
            return GridRule(_CLUSTER_RULES[rule], cluster_m)
        m = re.fullmatch(r"(mn|m|n|k)/([1-9][0-9]*)", rule)
        if m:
            return GridRule(_DIVIDED_RULES[m.group(1)], int(m.group(2)))
    raise UnsupportedLaunch(f"the launch plan has a grid rule {rule!r} that the exported runtime does not know.",
                            "Update tracea (export and the family disagree on docs/kernel-abi.md).")


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
    when: str | None = None  # the int slot that must be non-zero for the step to run (None: always)


def launch_steps(plan: LaunchPlan, kernel_names: Sequence[str], slots: Slots) -> tuple[Step, ...]:
    """The plan's steps as C table rows; kernel steps refer to `kernel_names` by index."""
    steps = []
    for raw in plan.steps:
        if isinstance(raw, MemsetStep):
            if raw.buffer != "workspace" or raw.bytes_per != "mn":
                raise _unsupported(f"a memset of {raw.buffer} per {raw.bytes_per}")
            # a memset marked `once` runs on every call here too: the workspace is the caller's, who may share it
            # with kernels that leave it dirty (ops/launch.py MemsetStep, docs/conv2d.md "Serial split-K")
            steps.append(Step("memset", memset_bytes_per_mn=raw.elem_bytes))
        elif isinstance(raw, KernelStep):
            if raw.cluster is not None and (min(raw.cluster) < 1 or (plan.cluster_m is not None
                                                                      and raw.cluster[0] != plan.cluster_m)):
                raise _unsupported(f"a kernel step with cluster {list(raw.cluster)} but cluster_m={plan.cluster_m}")
            steps.append(Step(
                "kernel",
                kernel=list(kernel_names).index(raw.name),
                grid=tuple(grid_rule(r, plan.cluster_m) for r in raw.grid),  # type: ignore[arg-type]
                block=raw.block,
                cluster=raw.cluster if raw.cluster is not None else (0, 0, 0),
                dynamic_smem_bytes=raw.dynamic_smem_bytes,
                params=step_params(raw.params, slots) if raw.params is not None else None,
                when=slots.integer(raw.when) if raw.when is not None else None,
            ))
        else:
            raise _unsupported(f"a step of kind {type(raw).__name__}")
    if not any(s.kind == "kernel" for s in steps):
        raise UnsupportedLaunch("the launch plan launches no kernel.", "Report this as a bug in the kernel family.")
    return tuple(steps)


def kernel_names(variant: Variant) -> list[str]:
    """Kernels in the order the launch steps first name them."""
    names = [k.name for k in variant.launch.kernels]
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
    when = step.when if step.when is not None else "-1"
    return (f"  {{{kind}, {step.kernel}, {{{grid}}}, {{{block}}}, {{{cluster}}}, "
            f"{step.dynamic_smem_bytes}u, {step.memset_bytes_per_mn}u, {params_symbol}, {n_params}, {when}}},")


def _arch_numbers(arch: str) -> tuple[int, int, bool]:
    m = re.fullmatch(r"(?:sm|compute)_(\d+)(\d)(a?)", arch)
    if not m:
        raise ValueError(f"not a CUDA architecture: {arch}")
    return int(m.group(1)), int(m.group(2)), bool(m.group(3))


def _variant_block(prefix: str, tag: str, variant: Variant, image_symbol: str, image_size: int,
                   slots: Slots) -> tuple[str, str]:
    """(definitions, one initializer row of the variants table) for one variant."""
    names = kernel_names(variant)
    plan: LaunchPlan = variant.launch
    steps = launch_steps(plan, names, slots)
    params, map_names = kernel_params(plan, slots)
    rules = {g.kind for st in steps for g in st.grid}
    clusters = set(_CLUSTER_RULES.values())
    needs = {"tile_m": rules & ({"TRACEA_GRID_TILES", "TRACEA_GRID_TILES_M"} | clusters),
             "tile_n": rules & ({"TRACEA_GRID_TILES", "TRACEA_GRID_TILES_N"} | clusters),
             "split_k": rules & {"TRACEA_GRID_SPLIT_K"}}
    missing = [name for name, used in needs.items() if used and getattr(plan, name) is None]
    if missing:
        raise UnsupportedLaunch(f"the launch plan uses grid rules that need {missing}, which it does not give.",
                                "Report this as a bug in the kernel family.")
    if len(plan.scratch) > MAX_SCRATCH or len({s.name for s in plan.scratch}) != len(plan.scratch):
        raise _unsupported(f"{len(plan.scratch)} scratch buffers")
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
    if map_names:
        maps_symbol = f"{prefix}__maps_{tag}"
        lines += [f"static const tracea_tensor_map {maps_symbol}[] = {{",
                  *(tensor_map_row(n, plan.tensor_maps[n], slots) for n in map_names), "};"]
    scratch_symbol = "NULL"
    if plan.scratch:
        scratch_symbol = f"{prefix}__scratch_{tag}"
        lines += [f"static const tracea_scratch {scratch_symbol}[] = {{", *(scratch_row(b, slots) for b in plan.scratch),
                  "};"]
    requires = ",\n   NULL, 0"
    if plan.requires:
        symbol = f"{prefix}__requires_{tag}"
        lines += [f"static const tracea_requirement {symbol}[] = {{",
                  *(requirement_row(r, slots) for r in plan.requires), "};"]
        requires = f",\n   {symbol}, {len(plan.requires)}"
    element_aligned = " | ".join(f"(1u << {slots.pointer(t)})" for t in plan.element_aligned) or "0u"
    defs = "\n".join(lines)
    sizes = list(variant.shape)
    vf = variant.valid_for
    tuned = ", ".join(str(variant.shape[s]) for s in sizes)
    valid = ", ".join(f"{{{vf[s + '_min']}, {vf[s + '_max']}, {vf[s + '_multiple']}}}" for s in sizes)
    row = (
        f"  {{/* {shape_label(variant.shape)} {variant.arch} */ {{{tuned}}},\n"
        f"   {{{valid}}},\n"
        f"   {variant.alignment_bytes}u,\n"
        f"   {plan.tile_m or 1}u, {plan.tile_n or 1}u, {plan.split_k or 1}u, "
        f"{plan.workspace_bytes_per_mn}u, {variant.shared_bytes}u, {threads}u,\n"
        f"   {image_symbol}, {image_size}u, {prefix}__kernels_{tag}, {len(names)}, {prefix}__steps_{tag}, {len(steps)},\n"
        f"   {prefix}__params_{tag}, {len(params)}, {maps_symbol}, {len(map_names)}, {scratch_symbol}, "
        f"{len(plan.scratch)}{requires}, {element_aligned}}},"
    )
    return defs, row


def render_export(manifest: Manifest, images: Mapping[str, bytes], abi: ExportAbi, fields: Sequence[int]) -> str:
    """The export's C header. `images` maps each cubin and PTX file named in `manifest` to its bytes; `fields` are the
    op's other problem fields as its header codes them."""
    slots = Slots(abi)
    p = manifest.prefix
    guard = p.upper() + "_H_"
    n_shapes = len(manifest.shape_list())
    archs = sorted({v.arch for v in manifest.variants}, key=lambda a: _arch_numbers(a))
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
            defs, row = _variant_block(p, f"{arch}_{i}", v, symbol, len(images[v.file]), slots)
            parts.append(defs)
            rows.append(row)
        variant_rows[arch] = rows
    ptx_sets: list[tuple[str, list[str]]] = []
    by_arch: dict[str, list[Any]] = {}
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
            defs, row = _variant_block(p, f"{arch}_{i}", source, symbol, len(data), slots)
            parts.append(defs)
            rows.append(row)
        ptx_sets.append((arch, rows))

    set_rows = []
    tables = []
    for arch in archs:
        major, minor, specific = _arch_numbers(arch)
        tables.append(f"static const tracea_variant {p}__variants_{arch}[] = {{\n" + "\n".join(variant_rows[arch]) + "\n};")
        set_rows.append(f"  {{\"{arch}\", {major}, {minor}, {int(specific)}, 0, {p}__variants_{arch}, {len(variant_rows[arch])}}},")
    for arch, rows in ptx_sets:
        major, minor, _ = _arch_numbers(arch)
        tables.append(f"static const tracea_variant {p}__variants_{arch}[] = {{\n" + "\n".join(rows) + "\n};")
        set_rows.append(f"  {{\"{arch}\", {major}, {minor}, 0, 1, {p}__variants_{arch}, {len(rows)}}},")
    if len(fields) > MAX_FIELDS:
        raise _unsupported(f"{len(fields)} problem fields")
    max_variants = max(len(variant_rows[a]) for a in variant_rows)
    min_driver = manifest.min_driver_version
    shapes = ", ".join(shape_label(s) for s in manifest.shape_list())
    label = manifest.label
    ptx_line = (", ".join(x.arch for x in manifest.ptx) + " PTX") if manifest.ptx else "no PTX"
    staged = any(v.launch.scratch for v in manifest.variants)
    field_list = ", ".join(str(int(f)) for f in fields) or "0"

    return f"""/* {p}.h: {label}, tuned shapes {shapes}; cubins for {', '.join(archs)}; {ptx_line}.
 * Generated by tracea {__version__} on {manifest.created}; manifest.json beside it says what each binary is, where its
 * configuration was verified and what it measured. Do not edit: export again instead.
 *
{abi.api_summary(p)}
 *   {p}_load(device)                 load now instead of at the first launch (optional)
 *   {p}_unload()                     unload from every device (when no launch is in flight)
 *
 * The call picks the tuned shape that equals the call's, else the nearest tuned shape whose kernel is valid for it
 * (shape multiples and pointer alignment), else returns TRACEA_ERROR_UNSUPPORTED_SHAPE or TRACEA_ERROR_MISALIGNED.
 * In C++, the op's call (in {abi.header}) takes tracea::TensorView operands.
 */
#ifndef {guard}
#define {guard}

#include "{abi.header}"

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
  "{label}", &{slots.abi_symbol}, {DTYPE_ENUM[manifest.dtype]}, {{{field_list}}}, {len(fields)},
  {ELEM_BYTES[manifest.dtype]}u, {min_driver}, {p}__sets, {len(set_rows)}, {max_variants}, {n_shapes},
  &{p}__mutex, {p}__devices, {p}__modules, {p}__functions, {p}__resident}};

{abi.api(p, staged)}

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


def render_cpp() -> str:
    """tracea.hpp: the C++ entry header, the same text in every export of this tracea version."""
    return template(CPP_HEADER).replace("@VERSION@", __version__).replace("@RUNTIME@", RUNTIME_HEADER)


def render_op_header(abi: ExportAbi) -> str:
    """The op's header (tracea_<op>.h): its argument struct and calls over the generated slots."""
    return abi.header_text(Slots(abi).declarations())
