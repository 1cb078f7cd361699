"""`patch_conv2d`: torch.nn.Conv2d's forward through Tracea's conv2d kernels where they apply, torch's own elsewhere.

The router decides per call, from what torch passes: a CUDA tensor of a routed dtype, 4-D, groups = 1, zeros padding
given as numbers, channels_last or contiguous NCHW memory, a backend with conv2d kernels for the dtype, and at least
`min_flops` of work. Anything else calls the original forward unchanged. A routed call:

- looks its layer shape up once (the Context's mode decides a miss: "default" picks and checks one configuration in
  seconds, "tune" tunes, "cached" falls back), then reuses the compiled kernel and its bound launch;
- reads the input in place when its memory is channels_last (NCHW contiguous input is copied to channels_last first,
  and the report counts it), the filter as K x R x S x C (made once per weight version), the bias fused;
- writes a channels_last output on torch's current stream;
- under autograd, is a torch.autograd.Function whose backward is torch's own convolution backward.

Patching is reversible (`unpatch_conv2d()`, or `with patch_conv2d(): ...`), idempotent and thread-safe.
`patch_report()` says what was routed and what fell back, and why, per layer shape.
"""

from __future__ import annotations

import threading
import weakref
from collections import Counter
from dataclasses import dataclass
from typing import Any

from tracea_cli.backends.base import DevicePointer
from tracea_cli.errors import ToolchainMissing, UsageError

ROUTED_DTYPES = ("fp16", "bf16", "fp32")
_TORCH_NAMES = {"torch.float16": "fp16", "torch.bfloat16": "bf16", "torch.float32": "fp32"}
DEFAULT_MIN_FLOPS = 0


def _conv2d_op() -> Any:
    """The op this patch routes to, from the registry."""
    from tracea_cli.ops.registry import get_op

    return get_op("conv2d")


@dataclass(frozen=True)
class RouteRecord:
    """How calls of one layer shape went: routed through a kernel, or fell back and why."""

    shape: str
    routed: bool
    reason: str  # why it fell back; for a routed shape, the kernel's source ("default", "cached", "tuned")
    calls: int
    copies: int = 0  # routed calls whose NCHW input was copied to channels_last first


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise ToolchainMissing("patch_conv2d needs torch, which is not installed.", "Install PyTorch (pip install torch).") from None
    return torch


@dataclass
class _Layer:
    """One routed layer shape: its problem and kernel, and where the kernel came from."""

    problem: Any
    kernel: Any  # run.Kernel
    source: str
    alignment: int  # the kernel's tensors' addresses must be multiples of this many bytes


@dataclass
class _Fast:
    """A layer's call as it last went. Routed (inference, channels_last input): while the next call brings the same
    module, input geometry, weight version, bias and stream, it skips every decision and only moves the launch to
    the new pointers. Declined for its layer shape (`launch` None: e.g. the baseline was faster): while the input's
    shape and dtype and the weight and bias objects are the same (what the decision was made from: it never depends
    on the weight's values, strides or addresses), the next call goes straight to torch's forward, checked in as few
    steps as it can be (this path runs for every declined layer of every forward pass)."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: Any
    device: int
    weight_version: tuple[int, int]
    bias: Any
    stream: int
    krsc: Any  # the filter as the kernel reads it (kept alive here)
    krsc_ptr: int
    alignment: int  # what the kernel's addresses must be a multiple of
    out_size: tuple[int, ...]
    out_stride: tuple[int, ...]
    launch: Any  # run.Kernel.pointer_launch's launch: (X, W, Y[, bias]) addresses; None for a declined shape
    label: str
    outcome: str
    weight: Any = None  # a declined entry: the weight Parameter the decision was made with
    key: tuple[str, str] = ("", "")  # (label, outcome): the report's count of this entry's calls

    def __post_init__(self) -> None:
        self.key = (self.label, self.outcome)

    def declined_again(self, x: Any, params: dict[str, Any]) -> bool:
        """Whether a call of a declined entry's module is declined the same way (see the class)."""
        return (x.shape == self.shape and x.dtype is self.dtype and params["weight"] is self.weight
                and params["bias"] is self.bias)

    def same_call(self, x: Any, weight: Any, bias: Any) -> bool:
        """Whether this call brings what the entry was made for (input geometry, weight version, bias)."""
        return (x.shape == self.shape and x.stride() == self.stride and x.dtype == self.dtype
                and x.get_device() == self.device and bias is self.bias
                and (weight.data_ptr(), weight._version) == self.weight_version)


class _Router:
    """The state of one patch: options, the lazily made Context, the layers seen, and the counts."""

    def __init__(self, context: Any, dtypes: tuple[str, ...], min_flops: int, only_faster: bool = True) -> None:
        self.context = context
        self.dtypes = dtypes
        self.min_flops = min_flops
        self.only_faster = only_faster
        self.layers: dict[tuple, _Layer | str] = {}  # a routed layer, or why the shape falls back
        # module -> (weight version, what it reads as); module -> its fast path (weak: a module may be collected)
        self.modules: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.fast: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.calls: Counter = Counter()
        self.copies: Counter = Counter()
        self.lock = threading.RLock()
        self.count_lock = threading.Lock()  # the counts alone (the per-call paths take no other lock)

    # ---- deciding ----------------------------------------------------------------------------------------------

    def _why_not(self, module: Any, x: Any) -> str | None:
        torch = _torch()
        if not isinstance(x, torch.Tensor) or x.dim() != 4:
            return "the input is not a 4-D tensor"
        if x.device.type != "cuda":
            return f"the input is on {x.device.type}, not a CUDA device"
        dtype = _TORCH_NAMES.get(str(x.dtype))
        if dtype not in self.dtypes:
            return f"dtype {str(x.dtype).removeprefix('torch.')} is not routed (routed: {', '.join(self.dtypes)})"
        if module.weight.dtype != x.dtype:
            return "the weight's dtype differs from the input's"
        if not (x.is_contiguous(memory_format=torch.channels_last) or x.is_contiguous()):
            return "the input is neither channels_last nor contiguous NCHW"
        return None

    def _module(self, module: Any) -> tuple[dict[str, Any], Any] | str:
        """(builder keywords, the filter in the op's layout) of `module`, read once per weight version."""
        weight = module.weight
        version = (weight.data_ptr(), weight._version)
        with self.lock:
            seen = self.modules.get(module)
            if seen is None or seen[0] != version:
                read = _conv2d_op().graph.from_torch(module)
                seen = self.modules[module] = (version, read if isinstance(read, str) else (read[0], read[1]["W"]))
            return seen[1]

    def _layer(self, module: Any, x: Any) -> _Layer | str:
        read = self._module(module)
        if isinstance(read, str):
            return read
        keywords, krsc = read
        n, c, h, w = x.shape
        dtype = _TORCH_NAMES[str(x.dtype)]
        epilogue = "bias" if module.bias is not None else "none"
        key = ((n, h, w, c), tuple(krsc.shape), tuple(sorted(keywords.items())), dtype, epilogue)
        with self.lock:
            found = self.layers.get(key)
            if found is None:
                found = self.layers[key] = self._choose(key)
            return found

    def _choose(self, key: tuple) -> _Layer | str:
        from tracea_cli.api.choose import check_runs, choose
        from tracea_cli.api.run import Kernel
        from tracea_cli.backends.op_backend import OpBackend

        x_shape, w_shape, keywords, dtype, epilogue = key
        op = _conv2d_op()
        try:
            options = op.graph.options_from({"X": x_shape, "W": w_shape}, dict(keywords))
            problem = op.problem(**options, dtype=dtype, epilogue=epilogue)
        except UsageError as e:
            return e.message
        if problem.flops < self.min_flops:
            return f"{problem.flops} FLOPs is under min_flops={self.min_flops}"
        ctx = self.context()
        if ctx.backend != "cuda":
            return "the context's backend is not cuda"
        try:
            check_runs(problem, "cuda", problem.op)
            choice = choose({0: (problem, problem.label)}, ctx._request())[0]
        except UsageError as e:
            return e.message
        if self.only_faster and choice.baseline is not None and choice.measured_ms is not None \
                and choice.measured_ms >= choice.baseline[1]:
            name, ms = choice.baseline
            return f"{name} is faster here ({ms:.4g} ms against the kernel's {choice.measured_ms:.4g} ms)"
        backend = OpBackend(problem.op, "cuda")
        alignment = backend.family_of(choice.config).launch(problem, choice.config).alignment_bytes
        return _Layer(problem, Kernel(backend, problem, choice.config, ctx.target), choice.source, alignment)

    def record(self, key: str, outcome: str) -> None:
        with self.count_lock:
            self.calls[(key, outcome)] += 1

    # ---- running -----------------------------------------------------------------------------------------------

    def forward(self, original: Any, module: Any, x: Any) -> Any:
        fast = self.fast.get(module)
        if fast is not None:
            if fast.launch is None:
                # one dict instead of nn.Module.__getattr__ per name, the count inline: this path is per call
                if fast.declined_again(x, module._parameters):
                    with self.count_lock:
                        self.calls[fast.key] += 1
                    return original(module, x)
            else:
                out = self._fast_call(fast, module, x)
                if out is not None:
                    return out
        why = self._why_not(module, x)
        layer = None if why else self._layer(module, x)
        if why is None and isinstance(layer, str):
            why = layer
            self._remember_declined(module, x, why)
        if why is None and any(t is not None and t.data_ptr() % layer.alignment for t in (x, module.bias)):
            why = f"the input or bias is not at an address that is a multiple of {layer.alignment} bytes"
        shape = f"{tuple(x.shape)} -> {module.out_channels} {tuple(module.kernel_size)}" if hasattr(x, "shape") else "?"
        if why is not None:
            self.record(shape, why)
            return original(module, x)
        self.record(shape, f"routed:{layer.source}")
        torch = _torch()
        if torch.is_grad_enabled() and (x.requires_grad or module.weight.requires_grad or
                                        (module.bias is not None and module.bias.requires_grad)):
            return _conv_function().apply(x, module.weight, module.bias, self, module, layer, shape)
        return self.run(module, layer, x, shape, remember=True)

    def _remember_declined(self, module: Any, x: Any, why: str) -> None:
        """The module's next calls with this geometry go straight to torch: its layer shape was declined (the
        decision depends on the geometry, dtypes and weight only, never on addresses or autograd)."""
        weight = module.weight
        shape = f"{tuple(x.shape)} -> {module.out_channels} {tuple(module.kernel_size)}"
        with self.lock:
            self.fast[module] = _Fast(tuple(x.shape), x.stride(), x.dtype, x.get_device(),
                                      (weight.data_ptr(), weight._version), module.bias, -1, None, 0, 1, (), (),
                                      None, shape, why, weight=weight)

    def run(self, module: Any, layer: _Layer, x: Any, shape: str, remember: bool = False) -> Any:
        """The routed call; with `remember`, an inference call on channels_last input also sets up the module's fast
        path for the calls that follow."""
        torch = _torch()
        remember = remember and x.is_contiguous(memory_format=torch.channels_last)
        if not x.is_contiguous(memory_format=torch.channels_last):
            x = x.contiguous(memory_format=torch.channels_last)
            with self.lock:
                self.copies[shape] += 1
        _, krsc = self._module(module)
        p = layer.problem
        out = torch.empty((p.n, p.k, *p.out_shape[1:3]), dtype=x.dtype, device=x.device,
                          memory_format=torch.channels_last)
        operands = {"X": DevicePointer(x.data_ptr()), "W": DevicePointer(krsc.data_ptr()),
                    "Y": DevicePointer(out.data_ptr())}
        if module.bias is not None:
            operands["bias"] = DevicePointer(module.bias.data_ptr())
        stream = _current_stream(torch, x)
        if not remember:
            layer.kernel.launch(operands, stream)
            return out
        launch = layer.kernel.pointer_launch(operands, stream, tuple(operands))
        if launch is not None:
            weight = module.weight
            with self.lock:
                self.fast[module] = _Fast(tuple(x.shape), x.stride(), x.dtype, x.get_device(),
                                          (weight.data_ptr(), weight._version), module.bias, stream, krsc,
                                          krsc.data_ptr(), layer.alignment, tuple(out.shape), out.stride(), launch,
                                          shape, f"routed:{layer.source}")
        return out

    def _fast_call(self, fast: _Fast, module: Any, x: Any) -> Any:
        """The routed call through the module's fast path, or None where this call differs from the one it was made
        for (the full path then decides again)."""
        torch = _torch()
        params = module._parameters  # one dict instead of nn.Module.__getattr__ per name: this path is per call
        weight, bias = params["weight"], params["bias"]
        if not fast.same_call(x, weight, bias):
            return None
        if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad or
                                        (bias is not None and bias.requires_grad)):
            return None
        x_ptr = x.data_ptr()
        if x_ptr % fast.alignment or _current_stream(torch, x) != fast.stream:
            return None
        out = torch.empty_strided(fast.out_size, fast.out_stride, dtype=x.dtype, device=x.device)
        if bias is None:
            fast.launch((x_ptr, fast.krsc_ptr, out.data_ptr()))
        else:
            fast.launch((x_ptr, fast.krsc_ptr, out.data_ptr(), bias.data_ptr()))
        with self.count_lock:
            self.calls[fast.key] += 1
        return out

    def report(self) -> list[RouteRecord]:
        with self.lock, self.count_lock:
            by_shape: dict[tuple[str, bool, str], int] = {}
            for (shape, outcome), calls in self.calls.items():
                routed = outcome.startswith("routed:")
                reason = outcome.removeprefix("routed:")
                by_shape[(shape, routed, reason)] = by_shape.get((shape, routed, reason), 0) + calls
            return [RouteRecord(s, routed, reason, calls, self.copies.get(s, 0) if routed else 0)
                    for (s, routed, reason), calls in sorted(by_shape.items())]


def _current_stream(torch: Any, x: Any) -> int:
    """The address of torch's current stream on x's device (torch's raw getter where it has one: the public one
    makes a Stream object per call)."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw(x.get_device()) if raw is not None else torch.cuda.current_stream(x.device).cuda_stream


_FUNCTION: Any = None


def _conv_function() -> Any:
    """The autograd Function of a routed call (made once torch is imported): Tracea forward, torch backward."""
    global _FUNCTION
    if _FUNCTION is None:
        torch = _torch()

        class TraceaConv2d(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, weight, bias, router, module, layer, shape):  # noqa: ANN001
                ctx.save_for_backward(x, weight)
                ctx.geometry = (module.stride, module.padding, module.dilation, bias is not None)
                return router.run(module, layer, x, shape)

            @staticmethod
            def backward(ctx, grad):  # noqa: ANN001
                x, weight = ctx.saved_tensors
                stride, padding, dilation, has_bias = ctx.geometry
                gx = torch.nn.grad.conv2d_input(x.shape, weight, grad, stride, padding, dilation) \
                    if ctx.needs_input_grad[0] else None
                gw = torch.nn.grad.conv2d_weight(x, weight.shape, grad, stride, padding, dilation) \
                    if ctx.needs_input_grad[1] else None
                gb = grad.sum((0, 2, 3)) if has_bias and ctx.needs_input_grad[2] else None
                return gx, gw, gb, None, None, None, None

        _FUNCTION = TraceaConv2d
    return _FUNCTION


class Patch:
    """A live patch (global or of one model): `unpatch()`, or leave its `with` block, to undo it."""

    def __init__(self, router: _Router, model: Any) -> None:
        self.router, self.model = router, model

    def __enter__(self) -> Patch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.unpatch()

    def unpatch(self) -> None:
        _unpatch(self)

    def report(self) -> list[RouteRecord]:
        return self.router.report()


_lock = threading.Lock()
_global: Patch | None = None
_models: dict[int, Patch] = {}
_original: Any = None


def patch_conv2d(model: Any = None, *, context: Any = None, dtypes: tuple[str, ...] = ROUTED_DTYPES,
                 min_flops: int = DEFAULT_MIN_FLOPS, only_faster: bool = True) -> Patch:
    """Route torch.nn.Conv2d's forward (of every Conv2d, or of `model`'s) through Tracea's kernels where they apply.
    `context`: the tracea.Context to choose kernels with (default: one with mode "default", made on the first routed
    call). `only_faster`: route a layer shape only where its kernel measured faster than the vendor baseline (cuDNN)
    that its tuning measured beside it; elsewhere torch's own call runs and the report gives both times.
    Idempotent: patching what is patched returns the live patch."""
    global _global, _original
    torch = _torch()
    bad = [d for d in dtypes if d not in ROUTED_DTYPES]
    if bad:
        raise UsageError(f"patch_conv2d cannot route dtype {bad[0]!r}.", f"Use some of {', '.join(ROUTED_DTYPES)}.")
    if not isinstance(min_flops, int) or min_flops < 0:
        raise UsageError(f"min_flops must be a whole number, 0 or more, not {min_flops!r}.")
    if not isinstance(only_faster, bool):
        raise UsageError(f"only_faster must be True or False, not {only_faster!r}.")
    made: list[Any] = []

    def ctx() -> Any:
        if context is not None:
            return context
        if not made:
            from tracea_cli.api.context import Context

            made.append(Context(device="cuda", mode="default"))
        return made[0]

    with _lock:
        if _original is None:
            _original = torch.nn.Conv2d.forward
        original = _original
        if model is None:
            if _global is None:
                router = _Router(ctx, tuple(dtypes), min_flops, only_faster)
                torch.nn.Conv2d.forward = lambda module, x: router.forward(original, module, x)
                _global = Patch(router, None)
            return _global
        if not isinstance(model, torch.nn.Module):
            raise UsageError(f"patch_conv2d takes a torch.nn.Module, not {type(model).__name__}.")
        if id(model) in _models:
            return _models[id(model)]
        router = _Router(ctx, tuple(dtypes), min_flops, only_faster)
        import types

        for m in model.modules():
            if isinstance(m, torch.nn.Conv2d):
                m.forward = types.MethodType(lambda module, x: router.forward(original, module, x), m)
        _models[id(model)] = patch = Patch(router, model)
        return patch


def _unpatch(patch: Patch) -> None:
    global _global
    torch = _torch()
    with _lock:
        if patch.model is None:
            if _global is patch:
                torch.nn.Conv2d.forward = _original
                _global = None
            return
        if _models.get(id(patch.model)) is patch:
            for m in patch.model.modules():
                if isinstance(m, torch.nn.Conv2d) and "forward" in vars(m):
                    del m.forward
            del _models[id(patch.model)]


def unpatch_conv2d(model: Any = None) -> None:
    """Undo `patch_conv2d()` (or `patch_conv2d(model)`); nothing happens where nothing is patched."""
    _torch()
    with _lock:
        patch = _global if model is None else _models.get(id(model))
    if patch is not None:
        _unpatch(patch)


def patch_report(model: Any = None) -> list[RouteRecord]:
    """What the live patch (global, or `model`'s) routed and what fell back, and why, per layer shape."""
    with _lock:
        patch = _global if model is None else _models.get(id(model))
    return patch.report() if patch is not None else []
