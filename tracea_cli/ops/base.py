"""The op interface: everything the core (tune, cache, bench, report, export, the CLI and the Python API) asks of an
operation. One op is a folder under `tracea_cli/ops/` that provides an `Op`; `registry.py` lists them.

    Option     one declared option of an op's problem (a CLI flag, a suite-file field, a Python keyword)
    Epilogue   what an op may fuse after its main product (bias, activation, residual): one tuple per op
    Tensor     one operand or output of a problem, as the runtimes allocate it
    Problem    a concrete problem: its cache identity (`key`), named sizes, label, work (FLOPs, fewest bytes)
    Family     one kernel family on one backend: space, source, launch plan (ops/launch.py), arguments, picks
    Baseline   a vendor library (or framework) call on the same problem, checked and timed like a kernel
    GraphBinding  how the Python API's Graph builds the op's nodes from tensors
    NodePair   two other ops' nodes in a row that an op computes as one (the fusion pass asks for them)
    Op         the operation: options, problem type, dtypes per backend, families, baselines, inputs, reference,
               bench suite rows, export ABI, graph binding

Pure description: nothing here imports a backend or touches a device. Validation errors are `UsageError`s phrased
for any caller (the option's name, not a CLI flag), so the Python API raises the same sentences.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, Sequence

from tracea_cli.errors import UsageError
from tracea_cli.ops.launch import LaunchPlan
from tracea_cli.space import SearchSpace, Value
from tracea_cli.target import Target

Config = Mapping[str, Value]

# ---- options ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    """One option of an op's problem, declared once: `tracea tune OP --flag`, a bench suite file's field and the
    Python API's keyword all read it.

    `default_from` names another option whose value this one takes when not given (GEMM's n and k default to m).
    `size` marks a problem size: part of `sizes()`, repeatable in `tracea export` (several shapes), positive.
    `key` is False for an option that is not a field of the problem's `key()`: a form that only sets others
    (conv2d's `stride` sets `stride_h` and `stride_w`) or a value every problem has (its `groups`); an export's
    manifest carries the key fields only."""

    name: str  # the keyword: "m", "d_in"
    type: type  # int | float | str | bool
    help: str
    default: Any = None
    required: bool = False
    choices: tuple[str, ...] = ()
    default_from: str | None = None
    size: bool = False
    key: bool = True

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def argument(self, value: Any) -> str:
        """The option as typed with `value`: "--m 4096", or a switch "--bias" / "--no-bias"."""
        if self.type is bool:
            return self.flag if value else f"--no-{self.flag[2:]}"
        return f"{self.flag} {value}"


def resolve_options(op_name: str, options: Sequence[Option], values: Mapping[str, Any]) -> dict[str, Any]:
    """`values` completed with defaults, checked against the declaration: every name known, required ones present,
    choices respected. Raises UsageError naming the option (and the ones the op has)."""
    declared = {o.name: o for o in options}
    unknown = sorted(set(values) - set(declared))
    if unknown:
        raise UsageError(f"{op_name} has no option {unknown[0]!r}.",
                         f"Its options are {', '.join(o.name for o in options)}.")
    out: dict[str, Any] = {}
    for o in options:
        v = values.get(o.name)
        if v is None and o.default_from is None:
            v = o.default
        if v is None and o.required:
            what = o.help.rstrip(".")
            raise UsageError(f"{op_name} needs {o.name} ({what[:1].lower() + what[1:]}).",
                             f"Give {o.flag} on the command line, {o.name}= from Python.")
        if v is not None and o.choices and v not in o.choices:
            raise UsageError(f"unknown {o.name} {v!r}.", f"Use one of {', '.join(map(str, o.choices))}.")
        out[o.name] = v
    for o in options:
        if out[o.name] is None and o.default_from is not None:
            out[o.name] = out[o.default_from]
    return out


# ---- epilogues ----------------------------------------------------------------------------------------------------

ACTIVATIONS = ("relu", "silu", "gelu")


@dataclass(frozen=True)
class Epilogue:
    """What runs on each output after the main product, in this order: + bias[col], an activation, + residual, a
    second activation. Named by its parts joined by "_" ("bias_relu", "bias_residual_relu"); `code` is its place in
    the op's tuple of epilogues, which kernels and the exported ABI use."""

    name: str
    code: int

    @property
    def parts(self) -> tuple[str, ...]:
        return () if self.name == "none" else tuple(self.name.split("_"))

    @property
    def bias(self) -> bool:
        return "bias" in self.parts

    @property
    def residual(self) -> bool:
        return "residual" in self.parts

    @property
    def activation(self) -> str | None:
        """The activation before the residual (if any)."""
        before = self.parts[: self.parts.index("residual")] if self.residual else self.parts
        return next((p for p in before if p in ACTIVATIONS), None)

    @property
    def post_activation(self) -> str | None:
        """The activation after the residual (if any)."""
        after = self.parts[self.parts.index("residual") + 1:] if self.residual else ()
        return next((p for p in after if p in ACTIVATIONS), None)

    @property
    def template_name(self) -> str:
        """CamelCase, as kernel templates name it: "bias_relu" -> "BiasRelu", "none" -> "None"."""
        return "".join(p.capitalize() for p in self.name.split("_"))


def epilogues(*names: str) -> tuple[Epilogue, ...]:
    """An op's epilogues, codes in the order given ("none" first)."""
    for name in names:
        parts = () if name == "none" else name.split("_")
        if any(p not in ("bias", "residual", *ACTIVATIONS) for p in parts):
            raise ValueError(f"epilogue {name!r} has an unknown part")
    return tuple(Epilogue(name, i) for i, name in enumerate(names))


def find_epilogue(all_: Sequence[Epilogue], name: str) -> Epilogue:
    for e in all_:
        if e.name == name:
            return e
    raise UsageError(f"unknown epilogue {name!r}.", f"Use one of {', '.join(e.name for e in all_)}.")


# ---- problems and their tensors -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tensor:
    """An operand or output of a problem: its name (as families' arguments and the ABI name it), its shape, and its
    element type when that is not the problem's dtype."""

    name: str
    shape: tuple[int, ...]
    output: bool = False
    dtype: str | None = None


class Problem(Protocol):
    """One concrete problem of an op. Frozen and hashable."""

    op: str
    dtype: str

    def key(self) -> dict[str, Value]:
        """The cache identity besides op, dtype, backend and device: labelled plain values (sizes included)."""
        ...

    def sizes(self) -> dict[str, int]:
        """Named sizes, in the op's order: what warm starts measure distances in, and export dispatches on."""
        ...

    @property
    def label(self) -> str: ...

    @property
    def flops(self) -> int: ...

    @property
    def bytes(self) -> int:
        """The fewest bytes a kernel must move: each input read once, each output written once."""
        ...


def problem_fields(problem: Any) -> dict[str, Any]:
    """A problem as results and reports carry it: op, dtype and its key's fields."""
    return {"op": problem.op, "dtype": problem.dtype, **problem.key()}


# ---- kernel families ----------------------------------------------------------------------------------------------


class Family(Protocol):
    """One kernel family of an op on one backend. Pure: no device, no I/O beyond reading kernel templates."""

    name: str  # the value of the configuration's "family" parameter where a backend has several
    backend: str  # "cuda" | "cpu"

    def space(self, problem: Any, target: Target) -> SearchSpace | str:
        """The family's configurations for this problem on this target, or the reason the family does not apply."""
        ...

    def template(self, problem: Any) -> str | None:
        """The text this family generates the problem's kernels from (hashed into the cache key); None when the
        family has no kernels for the problem's dtype."""
        ...

    def source(self, problem: Any, config: Config) -> str:
        """The exact, self-contained source of one configuration (what is compiled, hashed and exported)."""
        ...

    def launch(self, problem: Any, config: Config) -> LaunchPlan: ...

    def args(self, problem: Any, operands: Mapping[str, Any]) -> dict[str, Any]:
        """The values the plan names, from the problem and its operands (tensor name -> device or host array):
        pointers by tensor name, sizes and leading dimensions by parameter name."""
        ...

    def suggested(self, problem: Any, target: Target) -> list[dict[str, Value]]:
        """Hand-picked starting points, best guesses first; all valid in `space`."""
        ...

    # Optional: serves(built_for, config, problem) -> str | None. Why a kernel of `config` built for `built_for` cannot
    # compute `problem` although `config` is in problem's space (a pre-pass that follows from the problem, say);
    # export asks it when it decides which sizes a variant serves. Families whose sources depend on the problem only
    # through its key's non-size fields need none.
    # Optional: config_in(config, problem) -> config. `config` as `problem`'s space names it, where a parameter whose
    # meaning follows from the sizes (a pre-pass the kernel makes) is absent or other there; export asks the space
    # about this, and `serves` about the kernel. Without it the configuration is asked as it is.


# ---- baselines ----------------------------------------------------------------------------------------------------


@dataclass
class BaselineRun:
    """A prepared baseline call over one problem's operands: `run()` writes the outputs. `label` names what runs
    ("cublas+epilogue-pass"); `math` is a context the calls need (TF32 math mode); `stream` the external CUDA
    stream pointer the calls are queued on, when it is not the current one."""

    label: str
    run: Callable[[], None]
    math: Callable[[], Any] | None = None
    stream: int | None = None


@dataclass(frozen=True)
class Baseline:
    """A library call on the same problem. `prepare(problem, operands)` imports what it needs and returns the run;
    it raises `ToolchainMissing` when the library is absent. `backends`: where it runs."""

    name: str
    backends: tuple[str, ...]
    prepare: Callable[[Any, Mapping[str, Any]], BaselineRun]
    # the baseline `--baseline auto` means on its backends; where several are, the first whose `requires` is installed
    # (a result then names the one it stands in for: "numpy-im2col (no torch: torch is not installed)")
    default: bool = False
    requires: str | None = None  # the Python module it imports ("torch"), checked before a run asks for it


# ---- the op -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExportAbi:
    """What `tracea export` needs of an op besides its families' launch plans (docs/kernel-abi.md).

    The exported runtime (tracea_runtime.h) knows no op: a call is a set of slots (device pointers, ints) that the
    op's C header fills from its own argument struct. `pointers` and `ints` name the slots, in order, with the names
    launch plans use; the header names them `slot_prefix + NAME`. `workspace` is the workspace's pointer slot,
    `grid_sizes` the int slots grid rules read as M, N, K, `dispatch` the int slots of the problem's sizes (in the
    order of `Problem.sizes()`) that decide which tuned shape serves a call, `tensors` the (pointer, leading
    dimension or None) pairs whose alignment the runtime checks. `slot_names(plan)` renames what a plan names
    (LaunchPlan.renamed) before the export writes it; `requests` are the int slots that ask for a pre-pass."""

    header: str  # the op's C header file, the same text in every export of the op: "tracea_gemm.h"
    header_text: Callable[[str], str]  # its text, given the generated slot enum and ABI table
    slot_prefix: str  # "TRACEA_GEMM_"
    pointers: tuple[str, ...]
    ints: tuple[str, ...]
    workspace: str
    grid_sizes: tuple[str, str, str]
    dispatch: tuple[str, ...]
    tensors: tuple[tuple[str, str | None], ...]
    fields: Callable[[Any], tuple[int, ...]]  # the C codes of a problem's other key fields (a layout, an epilogue)
    prefix: Callable[[Any], str]  # the C identifier prefix of an export of this problem
    api: Callable[[str, bool], str]  # the prefix functions of an export (prefix, whether a variant stages)
    api_summary: Callable[[str], str]  # the header comment's lines listing them
    example: Callable[[Mapping[str, Any], str], str]  # example.cpp for (manifest document, the export's C header)
    # The op's slot for each name a family's launch plan uses otherwise (a plan borrowed from another op over a view:
    # conv2d's 1x1 wgmma plan is the GEMM's, its A the op's X); None: every plan names the slots themselves.
    slot_names: Callable[[LaunchPlan], Mapping[str, str]] | None = None
    # Int slots by which a call asks for a pre-pass (conv2d's x_is_nchw: transpose the input first): a variant serves
    # a call that sets one only if a step of its plan runs `when` that slot.
    requests: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodePair:
    """Two op nodes in a row that this op computes as one node: a `first` node (of op `first`) whose value only a
    `second` node (of op `second`) reads, as its input tensor `through` (x → linear → linear is one lowrank-mlp).

    `options(first, second)` takes both nodes' option values and returns this op's option values for the pair (sizes
    and geometry, as `GraphBinding.options_from` does), or None where this op does not compute the pair (a wide
    middle, another layout). `operands` maps this op's input tensors, in its binding's order, to (0: the first node,
    1: the second; that node's tensor name). The fusion pass asks every op of the registry for its pairs, so the API
    names no op; the pointwise chain after the second node then fuses as this op's epilogue."""

    first: str
    second: str
    through: str
    options: Callable[[Mapping[str, Any], Mapping[str, Any]], dict[str, Any] | None]
    operands: Mapping[str, tuple[int, str]]


def check_graph_keywords(op_name: str, keywords: Mapping[str, Any], known: Sequence[str],
                         refused: Mapping[str, tuple[str, str]] | None = None) -> None:
    """A graph builder's keywords against the op's `known` ones: a keyword in `refused` raises its own (sentence,
    hint) (one the op has elsewhere but a graph node cannot take), any other unknown one names the known ones."""
    for name in sorted(set(keywords) - set(known)):
        if refused and name in refused:
            raise UsageError(*refused[name])
        raise UsageError(f"{op_name} has no keyword {name!r}.", f"Use {' or '.join(known)}.")


def graph_layout(keywords: Mapping[str, Any], layouts: Sequence[str], default: str) -> str:
    """The builder's `layout` keyword (`default` where it is not given), one of `layouts`."""
    layout = keywords.get("layout", default)
    if layout not in layouts:
        raise UsageError(f"unknown layout {layout!r}.", f"Use one of {', '.join(layouts)}.")
    return layout


@dataclass(frozen=True)
class GraphBinding:
    """How the Python API's `Graph` builds a node of this op from tensors (`g.conv2d(x, w, stride=2)`) and folds
    per-output-channel scales (an inference batch norm) into it.

    `inputs` are the op's tensor names the builder takes, in order; `output` its output tensor. `options_from(shapes,
    keywords)` turns the inputs' shapes (by tensor name, in the op's own layouts) and the builder's keywords into the
    op's option values (sizes and geometry; not dtype or epilogue), raising UsageError for shapes that do not fit
    together. `channel_axis(problem)` is (the weight tensor, its axis) along which output channel j's weights lie.
    `aliases` are further builder names with fixed keywords (gemm: {"linear": {"layout": "nt"}}).

    `torch_module` names the torch.nn module class this op computes ("Conv2d"), and `from_torch(module)` reads one:
    (the builder's keywords, the module's weight in the op's layout by tensor name, its bias or None), or a sentence
    saying why the op cannot compute that module (Graph.from_fx and patch_conv2d use it; torch is imported by
    the caller).

    `pairs` are the pairs of other ops' nodes this op computes as one node (`NodePair`)."""

    inputs: tuple[str, ...]
    output: str
    options_from: Callable[[Mapping[str, tuple[int, ...]], Mapping[str, Any]], dict[str, Any]]
    channel_axis: Callable[[Any], tuple[str, int]]
    aliases: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    torch_module: str | None = None
    from_torch: Callable[[Any], tuple[dict[str, Any], dict[str, Any], Any] | str] | None = None
    pairs: tuple[NodePair, ...] = ()


class Op(Protocol):
    name: str
    summary: str  # one line for --help
    options: tuple[Option, ...]
    epilogues: tuple[Epilogue, ...]
    dtypes: Mapping[str, tuple[str, ...]]  # backend -> the dtypes its families run
    families: tuple[Family, ...]
    baselines: tuple[Baseline, ...]
    export: ExportAbi | None
    graph: GraphBinding | None  # how the Python API's Graph builds its nodes; None: not in graphs

    def problem(self, **values: Any) -> Any:
        """The problem for option values (defaults applied, validated)."""
        ...

    def from_key(self, dtype: str, key: Mapping[str, Any]) -> Any:
        """The problem a cache key's `problem` part names; UsageError when it is not one of this op's."""
        ...

    def tensors(self, problem: Any) -> tuple[Tensor, ...]: ...

    def make_inputs(self, problem: Any, rng: Any) -> dict[str, Any]:
        """Fresh inputs by tensor name: float64 values in [-1, 1] representable in the dtype, on the host (numpy
        Generator) or on the current GPU (CuPy RandomState)."""
        ...

    def reference(self, problem: Any, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """The outputs by tensor name, in float64, on the inputs' device."""
        ...

    def suite(self, name: str, backend: str, dtypes: tuple[str, ...]) -> tuple[Any, ...]:
        """This op's rows of the built-in bench suite `name` ("quick", "default", or the op's own name)."""
        ...


def families_for(op: Op, backend: str) -> tuple[Family, ...]:
    return tuple(f for f in op.families if f.backend == backend)


def family_named(op: Op, backend: str, name: str | None) -> Family:
    """The op's family of that name on `backend` (None: the backend's only family)."""
    own = families_for(op, backend)
    if name is None and len(own) == 1:
        return own[0]
    for f in own:
        if f.name == name:
            return f
    raise KeyError(f"{op.name} has no {backend} family {name!r}")
