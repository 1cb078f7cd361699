"""How a compiled kernel family is run: one typed launch description (docs/kernel-abi.md).

A family's `launch(problem, config)` returns a `LaunchPlan`: the steps in order (memsets of the workspace, kernels
with their grid rules, block, cluster and dynamic shared memory, or on the CPU calls of a compiled function), the
kernels' parameters by name, the TMA tensor maps and the scratch buffers of a staging pre-pass. The CUDA runtime
follows it to launch, the export writes it into manifest.json (`as_dict`, the documented JSON) and the C header
generator turns it into tables for the exported runtime, which follows the same rules in C. `grid_extent` below is
the one reader of grid rules in Python.

Values a plan names (kernel parameters, tensor-map sizes and strides, scratch sizes) come from the family's
`args(problem, operands)`: pointers by tensor name ("A", "C"), sizes and leading dimensions by parameter name ("M",
"lda"). Grid rules read the sizes "M", "N" and "K" (the GEMM view every family states its grid in: a convolution's
implicit GEMM has one too).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Union

_DIVIDED = re.compile(r"(mn|m|n|k)/([1-9][0-9]*)")
_NAMED = ("tiles", "tiles_m", "tiles_n", "split_k")
_CLUSTERED = ("work_clusters", "persistent_clusters")

GridRule = Union[int, str]  # docs/kernel-abi.md: an integer, "tiles", "tiles_m", "tiles_n", "split_k", "mn/Q",
#                             "m/Q", "n/Q", "k/Q", "work_clusters", "persistent_clusters"


def check_grid_rule(rule: Any) -> GridRule:
    """`rule` if it is one the runtimes know, else ValueError naming it."""
    if isinstance(rule, int) and not isinstance(rule, bool) and rule >= 1:
        return rule
    if isinstance(rule, str) and (rule in _NAMED or rule in _CLUSTERED or _DIVIDED.fullmatch(rule)):
        return rule
    raise ValueError(f"unknown grid rule {rule!r}")


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class KernelStep:
    """One kernel launch. `params` None: the plan's `params` (the main kernels' signature); a staging kernel names its
    own. `cluster` None: no launch-time cluster (a kernel may still declare one at compile time). `when` names an int
    value: the step runs only for calls where it is not 0 (a pre-pass that only some calls need; None: always)."""

    name: str
    grid: tuple[GridRule, GridRule, GridRule]
    block: tuple[int, int, int]
    dynamic_smem_bytes: int = 0
    cluster: tuple[int, int, int] | None = None
    params: tuple[str, ...] | None = None
    when: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "grid", tuple(check_grid_rule(r) for r in self.grid))
        object.__setattr__(self, "block", tuple(int(b) for b in self.block))

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": "kernel", "name": self.name, "block": list(self.block),
                             "grid": dict(zip("xyz", self.grid)), "dynamic_smem_bytes": self.dynamic_smem_bytes}
        if self.cluster is not None:
            d["cluster"] = list(self.cluster)
        if self.params is not None:
            d["params"] = list(self.params)
        if self.when is not None:
            d["when"] = self.when
        return d

    def runs(self, sizes: Mapping[str, int]) -> bool:
        """Whether this step runs in a call with these int values (`when` unset, or its value not 0)."""
        return self.when is None or int(sizes.get(self.when, 0)) != 0


@dataclass(frozen=True)
class MemsetStep:
    """Zero `elem_bytes` per output element (M x N) of the workspace, on the stream, before the kernels that sum
    into it (split-K).

    `once`: the kernels leave that part of the workspace zero after every call (serial split-K restores what it
    used), so it needs zeroing only when the workspace is allocated. The rule every runner follows: a runner that
    allocates the workspace itself and gives it to this plan alone (the CUDA backend's `bind`: tuning, bench, the
    Python API, patch_conv2d; one workspace per bound launch, never shared) zeroes it once there and skips the step
    on every call; a runner handed a workspace it did not allocate, which the caller may share with other kernels
    that leave it dirty (the exported C runtime), cannot know it is zero and runs the step on every call, as if
    `once` were false. `once` is therefore only ever an optimisation: running it per call is always correct."""

    elem_bytes: int = 4
    buffer: str = "workspace"
    bytes_per: str = "mn"
    once: bool = False

    def as_dict(self) -> dict[str, Any]:
        d = {"kind": "memset", "buffer": self.buffer, "bytes_per": self.bytes_per, "elem_bytes": self.elem_bytes}
        if self.once:
            d["once"] = True
        return d

    def per_call(self) -> bool:
        """Whether a runner that allocated the workspace itself (and zeroed it then) still runs this on each call."""
        return not self.once


@dataclass(frozen=True)
class CallStep:
    """One call of a compiled host function (the CPU backend): its entry point, its signature as numba writes it,
    its parameters by name, the values the configuration fixes (block sizes, flags) and the threads it runs on."""

    name: str
    signature: str
    params: tuple[str, ...]
    values: Mapping[str, Any] = field(default_factory=dict)
    threads: int = 1

    def as_dict(self) -> dict[str, Any]:
        return {"kind": "call", "name": self.name, "signature": self.signature, "params": list(self.params),
                "values": dict(self.values), "threads": self.threads}


Step = Union[KernelStep, MemsetStep, CallStep]


MAP_KINDS = ("tiled", "tiled3d", "im2col")


@dataclass(frozen=True)
class TensorMap:
    """A TMA tensor map over one tensor (docs/kernel-abi.md, "Tensor maps"): sizes innermost first, named.

    `kind` "tiled" (today's 2-D tiled map: `dims` two sizes, `row_stride` the elements per row, a 2-D `box`);
    "tiled3d" (cuTensorMapEncodeTiled of rank 3: three `dims`, the two outer dimensions' `strides` in elements by
    name, a 3-D `box`); "im2col" (cuTensorMapEncodeIm2col of rank 4: four `dims`, three `strides`, the spatial
    bounding box's `lower` and `upper` corners (innermost spatial dimension first), `element_strides` per
    dimension, `channels_per_pixel` x `pixels_per_column` elements per load; no `box`). Sizes and strides are named
    values of the family's `args`; corners and traversal strides are integers the plan fixes for its problem."""

    tensor: str  # the pointer it maps: "A", "B", "C", "A_staged", "B_staged", "X"
    dims: tuple[str, ...]  # sizes, innermost first: "K", "M"
    row_stride: str  # elements per row: "lda", ... (kind "tiled"; "" for the others, which name `strides`)
    box: tuple[int, ...]
    dtype: str
    elem_bytes: int
    swizzle: str = "128B"
    interleave: str = "none"
    l2_promotion: str = "256B"
    oob_fill: str = "zero"
    kind: str = "tiled"
    strides: tuple[str, ...] = ()  # kinds "tiled3d", "im2col": dimensions 1.. in elements, by size name
    lower: tuple[int, ...] = ()  # kind "im2col": pixelBoxLowerCorner
    upper: tuple[int, ...] = ()  # kind "im2col": pixelBoxUpperCorner
    element_strides: tuple[int, ...] = ()  # kind "im2col": traversal strides, one per dimension
    channels_per_pixel: int = 0  # kind "im2col"
    pixels_per_column: int = 0  # kind "im2col"

    def __post_init__(self) -> None:
        for name in ("dims", "box", "strides", "lower", "upper", "element_strides"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        rank = {"tiled": 2, "tiled3d": 3, "im2col": 4}.get(self.kind)
        if rank is None:
            raise ValueError(f"unknown tensor-map kind {self.kind!r} (one of {', '.join(MAP_KINDS)})")
        if len(self.dims) != rank:
            raise ValueError(f"a {self.kind} tensor map has {rank} dimensions, not {len(self.dims)}")
        if self.kind == "tiled":
            if not self.row_stride or len(self.box) != 2 or self.strides:
                raise ValueError("a tiled tensor map names its row stride and a 2-D box (and no `strides`)")
            return
        if len(self.strides) != rank - 1:
            raise ValueError(f"a {self.kind} tensor map names {rank - 1} strides, not {len(self.strides)}")
        if self.kind == "tiled3d" and len(self.box) != 3:
            raise ValueError("a tiled3d tensor map has a 3-D box")
        if self.kind == "im2col" and (len(self.lower) != rank - 2 or len(self.upper) != rank - 2
                                      or len(self.element_strides) != rank or self.box
                                      or self.channels_per_pixel < 1 or self.pixels_per_column < 1):
            raise ValueError("an im2col tensor map has two corners over the spatial dimensions, an element stride "
                             "per dimension, channels and pixels per load, and no box")

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"tensor": self.tensor, "dims": list(self.dims)}
        if self.kind == "tiled":  # today's form, key for key: every existing plan's manifest is unchanged
            d["row_stride"] = self.row_stride
        else:
            d["kind"] = self.kind
            d["strides"] = list(self.strides)
        if self.kind != "im2col":
            d["box"] = list(self.box)
        d.update({"dtype": self.dtype, "elem_bytes": self.elem_bytes, "swizzle": self.swizzle,
                  "interleave": self.interleave, "l2_promotion": self.l2_promotion, "oob_fill": self.oob_fill})
        if self.kind == "im2col":
            d.update({"lower": list(self.lower), "upper": list(self.upper),
                      "element_strides": list(self.element_strides), "channels_per_pixel": self.channels_per_pixel,
                      "pixels_per_column": self.pixels_per_column})
        return d


@dataclass(frozen=True)
class Requirement:
    """A relation between a call's named values that a plan's tensor maps assume: `value` == the product of `of`
    (fa3's 3-D maps read batch·heads as one dimension of stride q_sh, so the batch stride q_sb must be heads·q_sh).
    Runtimes refuse a call that breaks it instead of launching a kernel that would read the wrong memory."""

    value: str
    of: tuple[str, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "of", tuple(self.of))

    def holds(self, values: Mapping[str, int]) -> bool:
        product = 1
        for name in self.of:
            product *= int(values[name])
        return int(values[self.value]) == product

    def as_dict(self) -> dict[str, Any]:
        return {"value": self.value, "of": list(self.of)}


SCRATCH_ALIGN_BYTES = 256  # where the families place scratch buffers: each on a multiple of this in the workspace


@dataclass(frozen=True)
class Scratch:
    """A scratch buffer of a staging pre-pass (docs/kernel-abi.md, "Staging") or an intermediate one kernel writes and
    the next reads: rows x cols, row-major, its leading dimension `ld` = cols rounded up to `ld_multiple` elements; in
    plan order in the workspace (after the M x N part), each starting at the next multiple of `align_bytes`."""

    name: str  # "A_staged"
    source: str | None  # the tensor a staging kernel copies there; None for an intermediate (no operand is copied)
    transposed: bool
    rows: str  # a size name: "M"
    cols: str
    ld: str  # how params and tensor maps name its leading dimension: "lda_staged"
    ld_multiple: int
    elem_bytes: int
    align_bytes: int

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class PlacedScratch:
    """A scratch buffer placed for one call: where it starts in the workspace, its leading dimension and size."""

    name: str
    ld_name: str
    offset: int  # bytes from the start of the workspace
    ld: int  # elements
    nbytes: int


@dataclass(frozen=True)
class LaunchPlan:
    """Everything a runtime needs to run one compiled configuration, and nothing about the op."""

    steps: tuple[Step, ...]
    params: tuple[str, ...] = ()  # the main kernels' parameters in signature order (tensor maps by name)
    tensor_maps: Mapping[str, TensorMap] = field(default_factory=dict)
    scratch: tuple[Scratch, ...] = ()
    tile_m: int | None = None  # output tile, for the "tiles" and cluster grid rules
    tile_n: int | None = None
    tile_k: int | None = None
    split_k: int | None = None  # for the "split_k" grid rule
    cluster_m: int | None = None  # CTAs per cluster along M, for the cluster grid rules
    persistent: int | None = None
    workspace_bytes_per_mn: int = 0  # the M x N part of the workspace (split-K partial sums)
    alignment_bytes: int = 16  # every tensor's base address and row stride must be a multiple of this...
    element_aligned: tuple[str, ...] = ()  # ...but these, which the kernels move one element at a time
    family: str | None = None
    arch: str | None = None  # the architecture the family must be built for ("sm_90a"); None: the target's
    work: str | None = None  # how the cluster rules count work items (documentation)
    requires: tuple[Requirement, ...] = ()  # relations between the call's values that the tensor maps assume

    @property
    def kernels(self) -> tuple[KernelStep, ...]:
        """Kernel steps, each kernel once, in the order the steps first launch them."""
        seen: dict[str, KernelStep] = {}
        for step in self.steps:
            if isinstance(step, KernelStep) and step.name not in seen:
                seen[step.name] = step
        return tuple(seen.values())

    @property
    def main_kernel(self) -> KernelStep | None:
        """The kernel that computes the product: the first that takes the plan's parameters (staging kernels name
        their own; a split-K reduction comes after it). Its ptxas report describes the configuration."""
        return next((k for k in self.kernels if k.params is None), self.kernels[-1] if self.kernels else None)

    def step_params(self, step: KernelStep) -> tuple[str, ...]:
        return self.params if step.params is None else step.params

    def as_dict(self) -> dict[str, Any]:
        """The documented JSON form (docs/kernel-abi.md), as manifest.json carries it."""
        d: dict[str, Any] = {"steps": [s.as_dict() for s in self.steps]}
        if self.family is not None:
            d["family"] = self.family
        if self.arch is not None:
            d["arch"] = self.arch
        if self.params:
            d["params"] = list(self.params)
        if self.tensor_maps:
            d["tensor_maps"] = {name: m.as_dict() for name, m in self.tensor_maps.items()}
        for name in ("tile_m", "tile_n", "tile_k", "split_k", "cluster_m", "persistent", "work"):
            if getattr(self, name) is not None:
                d[name] = getattr(self, name)
        d["workspace_bytes_per_mn"] = self.workspace_bytes_per_mn
        d["alignment_bytes"] = self.alignment_bytes
        if self.element_aligned:
            d["element_aligned"] = list(self.element_aligned)
        if self.scratch:
            d["scratch"] = [s.as_dict() for s in self.scratch]
        if self.requires:
            d["requires"] = [r.as_dict() for r in self.requires]
        return d

    def unmet(self, values: Mapping[str, int]) -> Requirement | None:
        """The first of `requires` that a call with these values breaks (None: all hold)."""
        return next((r for r in self.requires if not r.holds(values)), None)

    def renamed(self, names: Mapping[str, str]) -> "LaunchPlan":
        """The same plan with the values it names (parameters, tensors, sizes, strides, scratch, step conditions)
        renamed by `names` (names it lacks stay): how an op's export ABI gives its own slot names to a plan a family
        borrowed from another op (conv2d's 1x1 wgmma plan is the GEMM's over a view: A is X, lda is C, ...)."""
        if not names:
            return self

        def n(name: str) -> str:
            return names.get(name, name)

        def ns(seq: tuple[str, ...]) -> tuple[str, ...]:
            return tuple(n(x) for x in seq)

        steps = tuple(replace(s, params=ns(s.params) if s.params is not None else None,
                              when=n(s.when) if s.when is not None else None) if isinstance(s, KernelStep) else s
                      for s in self.steps)
        maps = {k: replace(m, tensor=n(m.tensor), dims=ns(m.dims), row_stride=n(m.row_stride) if m.row_stride else "",
                           strides=ns(m.strides)) for k, m in self.tensor_maps.items()}
        scratch = tuple(replace(s, name=n(s.name), source=n(s.source) if s.source is not None else None,
                                rows=n(s.rows), cols=n(s.cols), ld=n(s.ld)) for s in self.scratch)
        requires = tuple(Requirement(n(r.value), ns(r.of)) for r in self.requires)
        return replace(self, steps=steps, params=tuple(k if k in self.tensor_maps else n(k) for k in self.params),
                       tensor_maps=maps, scratch=scratch, requires=requires,
                       element_aligned=ns(self.element_aligned))

    # ---- reading the rules (the one reader in Python; the exported C runtime follows the same ones) --------------

    def work_items(self, sizes: Mapping[str, int]) -> int:
        """Work items of the cluster grid rules: ceil(ceil(M / tile_m) / cluster_m) * ceil(N / tile_n), times
        split_k where the plan has one (each item is then one K slice of a tile)."""
        if not (self.tile_m and self.tile_n and self.cluster_m):
            raise ValueError("the cluster grid rules need tile_m, tile_n and cluster_m")
        tiles = _ceil(_ceil(sizes["M"], self.tile_m), self.cluster_m) * _ceil(sizes["N"], self.tile_n)
        return tiles * (self.split_k or 1)

    def grid_extent(self, rule: GridRule, sizes: Mapping[str, int], resident_clusters: int | None = None) -> int:
        """One grid dimension for a call with `sizes` ("M", "N", "K"). The cluster rules count CTAs: work items (or, for
        `persistent_clusters`, at most the `resident_clusters` that fit on the device at once) times cluster_m."""
        if isinstance(rule, int):
            return rule
        m, n, k = sizes["M"], sizes["N"], sizes["K"]
        if rule in ("tiles", "tiles_m", "tiles_n"):
            if not (self.tile_m and self.tile_n):
                raise ValueError(f"the grid rule {rule!r} needs tile_m and tile_n")
            tiles_m, tiles_n = _ceil(m, self.tile_m), _ceil(n, self.tile_n)
            return {"tiles": tiles_m * tiles_n, "tiles_m": tiles_m, "tiles_n": tiles_n}[rule]
        if rule == "split_k":
            if not self.split_k:
                raise ValueError("the grid rule 'split_k' needs split_k")
            return self.split_k
        if rule in _CLUSTERED:
            work = self.work_items(sizes)
            if rule == "persistent_clusters":
                if resident_clusters is None:
                    raise ValueError("the grid rule 'persistent_clusters' needs the device's resident clusters")
                work = min(work, resident_clusters)
            return work * int(self.cluster_m or 1)
        divided = _DIVIDED.fullmatch(rule)
        if divided:
            size = {"mn": m * n, "m": m, "n": n, "k": k}[divided.group(1)]
            return _ceil(size, int(divided.group(2)))
        raise ValueError(f"unknown grid rule {rule!r}")

    def grid(self, step: KernelStep, sizes: Mapping[str, int], resident_clusters: int | None = None) -> tuple[int, int, int]:
        x, y, z = (self.grid_extent(r, sizes, resident_clusters) for r in step.grid)
        return x, y, z

    def scratch_layout(self, sizes: Mapping[str, int]) -> tuple[tuple[PlacedScratch, ...], int]:
        """(the scratch buffers placed for a call with `sizes`, the workspace bytes the call needs in all). The
        M x N part of `workspace_bytes_per_mn` comes first; the buffers follow in order."""
        offset = self.workspace_bytes_per_mn * sizes["M"] * sizes["N"]
        placed = []
        for s in self.scratch:
            offset = _ceil(offset, s.align_bytes) * s.align_bytes
            ld = _ceil(sizes[s.cols], s.ld_multiple) * s.ld_multiple
            nbytes = sizes[s.rows] * ld * s.elem_bytes
            placed.append(PlacedScratch(s.name, s.ld, offset, ld, nbytes))
            offset += nbytes
        return tuple(placed), offset

    def workspace_bytes(self, sizes: Mapping[str, int]) -> int:
        return self.scratch_layout(sizes)[1]
