"""What an export holds, as data: one `Variant` per (tuned shape, architecture), and the manifest.json built from them.

The JSON document flattens the variants into the fields product.md names (`shape`, `config`, `kernels`, `launch`,
`verification`, `measurement`), each entry naming the shape and architecture it belongs to, so that its types do not
change with the number of shapes. A shape is the op's named sizes; the op's other problem fields (GEMM's `layout`
and `epilogue`) sit at the top level. `schema(op)` is the JSON Schema of an op's manifests (a dict, documented in
docs/manifest-schema.md), made from the op's declaration; `validate` checks a document against its op's schema and
checks the cross-references a schema cannot express.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from tracea_cli.space import Value

SCHEMA_VERSION = 2  # 2: sizes and problem fields from the op's declaration; files.op_header
VERIFIED = "verified"
COMPILED_ONLY = "compiled-only"


def shape_label(shape: Mapping[str, int]) -> str:
    """'2048x1024x512': the sizes in the op's order."""
    return "x".join(str(v) for v in shape.values())


@dataclass(frozen=True)
class Verification:
    """Whether a configuration was checked against the float64 reference on this architecture, and where."""

    status: str  # VERIFIED | COMPILED_ONLY
    device: str | None = None  # the device class it was checked on
    rel_error: float | None = None  # relative Frobenius error of that check
    bound: float | None = None  # the dtype's bound it passed
    date: str | None = None  # ISO 8601
    evidence: str = ""  # where the record comes from (a cache key, the defaults profile, a file)

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, "device": self.device, "rel_error": self.rel_error, "bound": self.bound,
                "date": self.date, "evidence": self.evidence}


@dataclass(frozen=True)
class Measurement:
    """A time measured for the configuration at this shape, on `device` (a device class)."""

    device: str
    median_ms: float
    cv: float
    n: int  # samples
    date: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"device": self.device, "median_ms": self.median_ms, "cv": self.cv, "n": self.n, "date": self.date}


@dataclass(frozen=True)
class Kernel:
    """One kernel entry point of a variant's cubin, with what launching it takes."""

    name: str
    grid: Mapping[str, int | str]  # {"x": rule, "y": rule, "z": rule}; rules as in docs/kernel-abi.md
    block: tuple[int, int, int]
    dynamic_smem_bytes: int
    static_smem_bytes: int
    registers: int
    spill_bytes: int
    cluster: tuple[int, int, int] = (1, 1, 1)  # thread-block cluster dimensions (1, 1, 1: none)


@dataclass(frozen=True)
class Variant:
    """One configuration compiled for one architecture at one tuned shape."""

    shape: Mapping[str, int]
    arch: str  # as compiled: "sm_80", "sm_90a"
    config: Mapping[str, Value]
    origin: str  # "cache" | "default" | "file"
    origin_detail: str
    file: str  # the cubin, relative to the export folder
    source_file: str  # the exact source it was compiled from
    launch: Any  # the family's LaunchPlan (ops/launch.py), written as docs/kernel-abi.md describes it
    kernels: tuple[Kernel, ...]
    alignment_bytes: int
    valid_for: Mapping[str, int]  # {"<size>_min", "<size>_max", "<size>_multiple", ...}: the sizes it serves
    verification: Verification
    measurement: Measurement | None = None

    @property
    def arch_specific(self) -> bool:
        return self.arch.endswith("a")

    @property
    def shared_bytes(self) -> int:
        """The most shared memory (static + dynamic) one of its kernels needs, in bytes."""
        return max((k.static_smem_bytes + k.dynamic_smem_bytes for k in self.kernels), default=0)


@dataclass(frozen=True)
class PtxImage:
    """PTX for forward compatibility: the configuration of the lowest non-arch-specific architecture, as PTX."""

    shape: Mapping[str, int]
    arch: str  # virtual architecture, "compute_80"
    file: str
    from_arch: str  # whose configuration it is, "sm_80"


@dataclass(frozen=True)
class Manifest:
    op: str
    dtype: str
    fields: Mapping[str, Any]  # the op's other problem fields (GEMM: layout, epilogue), at the document's top level
    prefix: str  # C identifier prefix of the export's functions
    variants: tuple[Variant, ...]
    ptx: tuple[PtxImage, ...]
    ptx_note: str
    toolchain: Mapping[str, str]  # {"nvrtc", "ptx_isa", "tracea"}
    min_driver: str  # "13.0": the oldest CUDA driver that loads these binaries
    files: Mapping[str, str]
    created: str
    tracea_version: str
    shapes: tuple[Mapping[str, int], ...] = field(default=())  # dispatch order; defaults to the variants' order

    @property
    def label(self) -> str:
        """"gemm fp16 nt bias_relu", "conv2d fp16 stride_h=1 ... bias_relu": op, dtype and the other problem fields
        that are set (a named choice by its value, a switch by its name, a number with its name)."""
        words = [v if isinstance(v, str) else name if v is True else f"{name}={v}"
                 for name, v in self.fields.items() if v not in ("none", None, False)]
        return " ".join([self.op, self.dtype, *words])

    @property
    def min_driver_version(self) -> int:
        """`min_driver` as cuDriverGetVersion reports it: 13000 for "13.0"."""
        major, minor = (int(x) for x in self.min_driver.split("."))
        return major * 1000 + minor * 10

    def shape_list(self) -> list[dict[str, int]]:
        if self.shapes:
            return [dict(s) for s in self.shapes]
        seen: list[dict[str, int]] = []
        for v in self.variants:
            if dict(v.shape) not in seen:
                seen.append(dict(v.shape))
        return seen

    def as_dict(self) -> dict[str, Any]:
        def where(v: Variant) -> dict[str, Any]:
            return {"shape": dict(v.shape), "arch": v.arch}

        archs = sorted({v.arch for v in self.variants}, key=_arch_order)
        measured = [{**where(v), **v.measurement.as_dict()} for v in self.variants if v.measurement is not None]
        return {
            "schema_version": SCHEMA_VERSION,
            "tracea_version": self.tracea_version,
            "created": self.created,
            "op": self.op,
            "dtype": self.dtype,
            **dict(self.fields),
            "prefix": self.prefix,
            "shape": self.shape_list(),
            "config": [{**where(v), "values": dict(v.config), "origin": v.origin, "origin_detail": v.origin_detail}
                       for v in self.variants],
            "kernels": [
                {**where(v), "file": v.file, "name": k.name, "grid": dict(k.grid), "block": list(k.block),
                 "cluster": list(k.cluster), "dynamic_smem_bytes": k.dynamic_smem_bytes, "static_smem_bytes": k.static_smem_bytes,
                 "registers": k.registers, "spill_bytes": k.spill_bytes, "alignment_bytes": v.alignment_bytes}
                for v in self.variants for k in v.kernels
            ],
            "launch": [
                {**where(v), "file": v.file, "source": v.source_file, "arch_specific": v.arch_specific,
                 "valid_for": dict(v.valid_for), "description": _jsonable(v.launch.as_dict())}
                for v in self.variants
            ],
            "ptx": {
                "files": [{"shape": dict(p.shape), "arch": p.arch, "file": p.file, "from_arch": p.from_arch} for p in self.ptx],
                "note": self.ptx_note,
            },
            "requires": {
                "min_driver": self.min_driver,
                "min_driver_version": self.min_driver_version,
                "archs": archs,
                "shared_bytes": {a: max(v.shared_bytes for v in self.variants if v.arch == a) for a in archs},
                "threads_per_block": {
                    a: max(k.block[0] * k.block[1] * k.block[2] for v in self.variants if v.arch == a for k in v.kernels)
                    for a in archs
                },
            },
            "toolchain": dict(self.toolchain),
            "verification": [{**where(v), **v.verification.as_dict()} for v in self.variants],
            "measurement": measured or None,
            "files": dict(self.files),
        }


def _arch_order(arch: str) -> tuple[int, str]:
    m = re.match(r"sm_(\d+)", arch)
    return (int(m.group(1)) if m else 0, arch)


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


# ---- the schema -----------------------------------------------------------------------------------------------------

_INT0 = {"type": "integer", "minimum": 0}
_POS = {"type": "integer", "minimum": 1}
_TEXT = {"type": "string"}
_ARCH = {"type": "string", "pattern": r"^sm_[0-9]+a?$"}
_GRID_RULE = {"anyOf": [_POS, {"type": "string", "pattern":
                                r"^(tiles|tiles_m|tiles_n|split_k|(mn|m|n|k)/[1-9][0-9]*|work_clusters|persistent_clusters)$"}]}
_DIM3 = {"type": "array", "minItems": 3, "maxItems": 3, "items": _POS}
_GRID = {"type": "object", "required": ["x", "y", "z"], "additionalProperties": False,
         "properties": {"x": _GRID_RULE, "y": _GRID_RULE, "z": _GRID_RULE}}
_KERNEL_NAME = {"type": "string", "pattern": r"^[A-Za-z_][A-Za-z0-9_]*$"}
_KINDS = ("memset", "kernel")
_OPTION_TYPES = {int: "integer", float: "number", str: "string", bool: "boolean"}


def _enum(values: Any) -> dict[str, Any]:
    return {"enum": list(values)}


def _description(pointers: tuple[str, ...], ints: tuple[str, ...]) -> dict[str, Any]:
    """The family's launch plan as JSON (docs/kernel-abi.md): the fields it defines are typed, others pass. Names of
    parameters, tensors and sizes are the op's ABI slots."""
    params = {"type": "array", "minItems": 1, "items": {"type": "string", "pattern": r"^[A-Za-z_][A-Za-z0-9_]*$"}}
    # One scratch buffer of a staging pre-pass ("Staging"), or an intermediate one kernel writes and the next reads
    # (source null): rows x cols, row-major, leading dimension `ld` = cols rounded up to ld_multiple; in list order in
    # the workspace, each at a multiple of align_bytes.
    scratch = {
        "type": "object", "additionalProperties": False,
        "required": ["name", "source", "transposed", "rows", "cols", "ld", "ld_multiple", "elem_bytes", "align_bytes"],
        "properties": {
            "name": _enum(pointers), "source": _enum([*pointers, None]), "transposed": {"type": "boolean"},
            "rows": _enum(ints), "cols": _enum(ints), "ld": _enum(ints),
            "ld_multiple": _POS, "elem_bytes": {"enum": [2, 4, 8]}, "align_bytes": _POS,
        },
    }
    # One TMA tensor map ("Tensor maps"): sizes innermost first. The 2-D tiled form (no "kind"), as before the kinds
    # came; "tiled3d" (rank 3) and "im2col" (rank 4) name their outer strides and, for im2col, the load's shape.
    common = {
        "tensor": _enum(pointers),
        "dtype": {"enum": ["fp16", "bf16", "tf32", "fp32"]},
        "elem_bytes": {"enum": [2, 4]},
        "swizzle": {"enum": ["none", "32B", "64B", "128B"]},
        "interleave": {"enum": ["none"]},
        "l2_promotion": {"enum": ["none", "64B", "128B", "256B"]},
        "oob_fill": {"enum": ["zero"]},
    }

    def sizes(n: int) -> dict[str, Any]:
        return {"type": "array", "minItems": n, "maxItems": n, "items": _enum(ints)}

    def box(n: int) -> dict[str, Any]:
        return small(n, 1, 256)

    def small(n: int, low: int, high: int) -> dict[str, Any]:
        return {"type": "array", "minItems": n, "maxItems": n,
                "items": {"type": "integer", "minimum": low, "maximum": high}}

    base = ["tensor", "dims", "dtype", "elem_bytes", "swizzle", "interleave", "l2_promotion", "oob_fill"]
    tiled = {"type": "object", "additionalProperties": False, "required": [*base[:2], "row_stride", "box", *base[2:]],
             "properties": {**common, "dims": sizes(2), "row_stride": _enum(ints), "box": box(2)}}
    tiled3d = {"type": "object", "additionalProperties": False, "required": [*base, "kind", "strides", "box"],
               "properties": {**common, "kind": {"const": "tiled3d"}, "dims": sizes(3), "strides": sizes(2),
                              "box": box(3)}}
    im2col = {"type": "object", "additionalProperties": False,
              "required": [*base, "kind", "strides", "lower", "upper", "element_strides", "channels_per_pixel",
                           "pixels_per_column"],
              "properties": {**common, "kind": {"const": "im2col"}, "dims": sizes(4), "strides": sizes(3),
                             "lower": small(2, -128, 127), "upper": small(2, -128, 127),
                             "element_strides": small(4, 1, 8),
                             "channels_per_pixel": {"type": "integer", "minimum": 1, "maximum": 256},
                             "pixels_per_column": {"type": "integer", "minimum": 1, "maximum": 1024}}}
    tensor_map = {"anyOf": [tiled, tiled3d, im2col]}
    # A relation between the call's values the maps assume: value = the product of `of`.
    requirement = {"type": "object", "additionalProperties": False, "required": ["value", "of"],
                   "properties": {"value": _enum(ints), "of": {"type": "array", "minItems": 1, "maxItems": 2,
                                                               "items": _enum(ints)}}}
    return {"type": "object", "required": ["steps"], "properties": {
        "steps": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["kind"],
            "properties": {"kind": _enum(_KINDS), "name": _KERNEL_NAME, "block": _DIM3, "grid": _GRID,
                           "cluster": _DIM3, "dynamic_smem_bytes": _INT0, "params": params,
                           "when": _enum(ints)}}},
        "family": _TEXT,
        "arch": _ARCH,
        "params": params,
        "tensor_maps": {"type": "object", "additionalProperties": tensor_map},
        "scratch": {"type": "array", "maxItems": 2, "items": scratch},
        "tile_m": _POS, "tile_n": _POS, "tile_k": _POS, "split_k": _POS, "cluster_m": _POS,
        "persistent": {"enum": [0, 1]},
        "workspace_bytes_per_mn": _INT0,
        "alignment_bytes": _POS,
        # tensors the kernels move one element at a time: alignment_bytes does not apply to them
        "element_aligned": {"type": "array", "minItems": 1, "items": _enum(pointers)},
        "requires": {"type": "array", "minItems": 1, "items": requirement},
    }}


def schema(op: Any) -> dict[str, Any]:
    """The JSON Schema of `op`'s manifests: its sizes are the shapes' fields, its other options (those with choices)
    top-level fields, its ABI slots the names launch descriptions may use."""
    sizes = [o.name for o in op.options if o.size]
    fields = [o for o in op.options if not o.size and o.key and o.name != "dtype"]
    dtype = next(o for o in op.options if o.name == "dtype")
    shape = {"type": "object", "required": sizes, "additionalProperties": False, "properties": {s: _POS for s in sizes}}
    valid_for = [f"{s}_{b}" for s in sizes for b in ("min", "max", "multiple")]

    def entry(properties: dict[str, Any], extra_required: list[str] | None = None) -> dict[str, Any]:
        """An object that names its shape and architecture, with no other keys than those listed."""
        props = {"shape": shape, "arch": _ARCH, **properties}
        return {"type": "object", "additionalProperties": False, "properties": props,
                "required": ["shape", "arch", *(extra_required if extra_required is not None else properties)]}

    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://tracea.dev/schemas/export-manifest-{SCHEMA_VERSION}-{op.name}.json",
        "title": f"Tracea export manifest ({op.name})",
        "type": "object",
        "additionalProperties": False,
        "required": ["schema_version", "tracea_version", "created", "op", "dtype", *(o.name for o in fields), "prefix",
                     "shape", "config", "kernels", "launch", "ptx", "requires", "toolchain", "verification",
                     "measurement", "files"],
        "properties": {
            "schema_version": {"const": SCHEMA_VERSION},
            "tracea_version": _TEXT,
            "created": {"type": "string", "format": "date-time"},
            "op": {"const": op.name},
            "dtype": _enum(dtype.choices),
            **{o.name: (_enum(o.choices) if o.choices else {"type": _OPTION_TYPES[o.type]}) for o in fields},
            "prefix": {"type": "string", "pattern": r"^[a-z_][a-z0-9_]*$"},
            "shape": {"type": "array", "minItems": 1, "items": shape},
            "config": {"type": "array", "minItems": 1, "items": entry({
                "values": {"type": "object", "additionalProperties": {"type": ["integer", "number", "string", "boolean"]}},
                "origin": {"enum": ["cache", "default", "file"]},
                "origin_detail": _TEXT,
            })},
            "kernels": {"type": "array", "minItems": 1, "items": entry({
                "file": _TEXT,
                "name": _KERNEL_NAME,
                "grid": _GRID,
                "block": _DIM3,
                "cluster": _DIM3,
                "dynamic_smem_bytes": _INT0,
                "static_smem_bytes": _INT0,
                "registers": _INT0,
                "spill_bytes": _INT0,
                "alignment_bytes": _POS,
            })},
            "launch": {"type": "array", "minItems": 1, "items": entry({
                "file": _TEXT,
                "source": _TEXT,
                "arch_specific": {"type": "boolean"},
                "valid_for": {"type": "object", "additionalProperties": False, "required": valid_for,
                              "properties": {name: _POS for name in valid_for}},
                "description": _description(op.export.pointers, op.export.ints),
            })},
            "ptx": {"type": "object", "additionalProperties": False, "required": ["files", "note"], "properties": {
                "files": {"type": "array", "items": {
                    "type": "object", "additionalProperties": False, "required": ["shape", "arch", "file", "from_arch"],
                    "properties": {"shape": shape, "arch": {"type": "string", "pattern": r"^compute_[0-9]+$"},
                                   "file": _TEXT, "from_arch": _ARCH}}},
                "note": _TEXT,
            }},
            "requires": {"type": "object", "additionalProperties": False,
                         "required": ["min_driver", "min_driver_version", "archs", "shared_bytes", "threads_per_block"],
                         "properties": {
                             "min_driver": {"type": "string", "pattern": r"^[0-9]+\.[0-9]+$"},
                             "min_driver_version": _POS,
                             "archs": {"type": "array", "minItems": 1, "items": _ARCH},
                             "shared_bytes": {"type": "object", "additionalProperties": _INT0},
                             "threads_per_block": {"type": "object", "additionalProperties": _POS},
                         }},
            "toolchain": {"type": "object", "required": ["nvrtc", "ptx_isa", "tracea"],
                          "additionalProperties": _TEXT,
                          "properties": {"nvrtc": _TEXT, "ptx_isa": _TEXT, "tracea": _TEXT}},
            "verification": {"type": "array", "minItems": 1, "items": {"anyOf": [
                entry({"status": {"const": VERIFIED}, "device": _TEXT, "rel_error": {"type": "number", "minimum": 0},
                       "bound": {"type": "number", "minimum": 0}, "date": _TEXT, "evidence": _TEXT}),
                entry({"status": {"const": COMPILED_ONLY}, "device": {"type": ["string", "null"]},
                       "rel_error": {"type": "null"}, "bound": {"type": "null"}, "date": {"type": ["string", "null"]},
                       "evidence": _TEXT}, extra_required=["status"]),
            ]}},
            "measurement": {"anyOf": [{"type": "null"}, {"type": "array", "minItems": 1, "items": entry({
                "device": _TEXT, "median_ms": {"type": "number", "minimum": 0}, "cv": {"type": "number", "minimum": 0},
                "n": _POS, "date": {"type": ["string", "null"]}})}]},
            "files": {"type": "object", "additionalProperties": _TEXT,
                      "required": ["c_header", "op_header", "runtime_header", "cpp_header", "example", "cmake"]},
        },
    }


# ---- validation ----------------------------------------------------------------------------------------------------

_TYPES: dict[str, Any] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}
# Keywords that only annotate; every other keyword must be one `_check` implements, so that nothing is silently ignored.
_ANNOTATIONS = {"$schema", "$id", "title", "description", "format"}
_KNOWN = _ANNOTATIONS | {"type", "enum", "const", "minimum", "maximum", "pattern", "required", "properties",
                         "additionalProperties", "items", "minItems", "maxItems", "anyOf"}


def _check(value: Any, schema: Mapping[str, Any], path: str, errors: list[str]) -> None:
    unknown = set(schema) - _KNOWN
    if unknown:
        raise ValueError(f"schema at {path} uses keywords this validator does not implement: {sorted(unknown)}")
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_TYPES[t](value) for t in types):
            errors.append(f"{path}: expected {' or '.join(types)}, got {type(value).__name__}")
            return
    if "const" in schema and value != schema["const"]:
        errors.append(f"{path}: must be {schema['const']!r}, got {value!r}")
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} is not one of {schema['enum']}")
    if "minimum" in schema and _TYPES["number"](value) and value < schema["minimum"]:
        errors.append(f"{path}: {value} is below the minimum {schema['minimum']}")
    if "maximum" in schema and _TYPES["number"](value) and value > schema["maximum"]:
        errors.append(f"{path}: {value} is above the maximum {schema['maximum']}")
    if "pattern" in schema and isinstance(value, str) and not re.search(schema["pattern"], value):
        errors.append(f"{path}: {value!r} does not match {schema['pattern']}")
    if "anyOf" in schema:
        tries = []
        for option in schema["anyOf"]:
            sub: list[str] = []
            _check(value, option, path, sub)
            if not sub:
                break
            tries.append(sub)
        else:
            best = min(tries, key=len)
            errors.append(f"{path}: matches none of the allowed forms (closest: {'; '.join(best)})")
    if isinstance(value, dict):
        for name in schema.get("required", ()):
            if name not in value:
                errors.append(f"{path}: missing {name!r}")
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for name, item in value.items():
            if name in props:
                _check(item, props[name], f"{path}.{name}", errors)
            elif extra is False:
                errors.append(f"{path}: unexpected key {name!r}")
            elif isinstance(extra, Mapping):
                _check(item, extra, f"{path}.{name}", errors)
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            errors.append(f"{path}: needs at least {schema['minItems']} item(s), has {len(value)}")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(f"{path}: allows at most {schema['maxItems']} item(s), has {len(value)}")
        if "items" in schema:
            for i, item in enumerate(value):
                _check(item, schema["items"], f"{path}[{i}]", errors)


def _where(entry: Mapping[str, Any]) -> tuple[str, str]:
    return (shape_label(entry["shape"]), entry["arch"])


def _cross_references(doc: Mapping[str, Any]) -> list[str]:
    """What the schema cannot say: every (shape, arch) has one config, launch and verification; launch steps name
    kernels that are listed; listed shapes and variants agree."""
    errors: list[str] = []
    shapes = {shape_label(s) for s in doc["shape"]}
    per_field = {}
    for name in ("config", "launch", "verification"):
        keys = [_where(e) for e in doc[name]]
        if len(keys) != len(set(keys)):
            errors.append(f"$.{name}: a shape and architecture appear more than once")
        per_field[name] = set(keys)
    variants = per_field["config"]
    for name in ("launch", "verification"):
        if per_field[name] != variants:
            errors.append(f"$.{name}: covers {sorted(per_field[name])}, but $.config covers {sorted(variants)}")
    if {s for s, _ in variants} != shapes:
        errors.append(f"$.shape lists {sorted(shapes)}, but the variants cover {sorted({s for s, _ in variants})}")
    kernels: dict[tuple[str, str], dict[str, Mapping[str, Any]]] = {}
    for k in doc["kernels"]:
        kernels.setdefault(_where(k), {})[k["name"]] = k
    for entry in doc["launch"]:
        where = _where(entry)
        listed = kernels.get(where, {})
        description = entry["description"]
        seen: set[str] = set()
        for step in description["steps"]:
            if step["kind"] != "kernel":
                continue
            if step.get("name") not in listed:
                errors.append(f"$.launch {where}: step names kernel {step.get('name')!r}, which $.kernels does not list")
                continue
            if step["name"] not in seen:  # a kernel's entry describes the first step that launches it
                errors += _kernel_matches_step(where, listed[step["name"]], step)
                seen.add(step["name"])
            rules = {str(step.get("grid", {}).get(d)) for d in "xyz"}
            if rules & {"work_clusters", "persistent_clusters"}:
                lacking = [f for f in ("tile_m", "tile_n", "cluster_m") if f not in description]
                if lacking:
                    errors.append(f"$.launch {where}: cluster grid rules need {lacking} in the description")
                elif list(step.get("cluster", [1, 1, 1]))[0] != description["cluster_m"]:
                    errors.append(f"$.launch {where}: step cluster {step.get('cluster')} disagrees with cluster_m "
                                  f"{description['cluster_m']}")
        errors += _launch_consistency(where, entry)
    for p in doc["ptx"]["files"]:
        if p["from_arch"].endswith("a"):
            errors.append(f"$.ptx: PTX from {p['from_arch']}, an arch-specific architecture whose code no other GPU runs")
    for m in doc["measurement"] or []:
        if _where(m) not in variants:
            errors.append(f"$.measurement: {_where(m)} is not an exported variant")
    return errors


def _kernel_matches_step(where: tuple[str, str], kernel: Mapping[str, Any], step: Mapping[str, Any]) -> list[str]:
    """A $.kernels entry says what its launch step says: grid, block, cluster, dynamic shared memory."""
    step_view = {"grid": step.get("grid"), "block": step.get("block"), "cluster": list(step.get("cluster") or [1, 1, 1]),
                 "dynamic_smem_bytes": step.get("dynamic_smem_bytes", 0)}
    return [f"$.kernels {where} {kernel['name']}: {name} is {kernel.get(name)!r}, but its launch step says {value!r}"
            for name, value in step_view.items() if kernel.get(name) != value]


def _launch_consistency(where: tuple[str, str], entry: Mapping[str, Any]) -> list[str]:
    """An entry's architecture agrees with its description, and the kernels' parameters name its tensor maps."""
    errors = []
    arch, description = entry["arch"], entry["description"]
    if entry["arch_specific"] != arch.endswith("a"):
        errors.append(f"$.launch {where}: arch_specific is {entry['arch_specific']} for {arch}")
    if "arch" in description and description["arch"] != arch:
        errors.append(f"$.launch {where}: the description was built for {description['arch']}, not {arch}")
    maps = description.get("tensor_maps") or {}
    params = description.get("params")
    if maps and params is None:
        errors.append(f"$.launch {where}: tensor maps without the kernel parameters that take them")
    elif maps:
        unused = sorted(set(maps) - set(params))
        if unused:
            errors.append(f"$.launch {where}: tensor maps {unused} are no kernel parameter")
    return errors


def validate(doc: Any, part: Mapping[str, Any] | None = None) -> list[str]:
    """Every way `doc` breaks its op's manifest schema and the cross-references; [] if valid. With `part` (a piece
    of a schema), only that piece is checked."""
    errors: list[str] = []
    if part is not None:
        _check(doc, part, "$", errors)
        return errors
    from tracea_cli.errors import TraceaError
    from tracea_cli.ops.registry import get_op

    try:
        op = get_op(doc.get("op")) if isinstance(doc, dict) else None
    except TraceaError as e:
        return [f"$.op: {e.message}"]
    if op is None or op.export is None:
        return ["$: not a manifest of an op with an export"]
    _check(doc, schema(op), "$", errors)
    if not errors:
        errors = _cross_references(doc)
    return errors
