"""conv2d's rows of the built-in bench suites.

CPU (each runs in seconds on two cores): `default` has three ResNet-50 3×3 layers at N = 1, one with bias+ReLU;
`conv2d` adds the rest of issue 13's layers at N = 1, fp32 and one fp64, and an awkward shape no tile divides.

GPU, fp16: `conv2d` has the ResNet-50 layers of issue 13 — the 3×3 layers 64@56², 128@28², 256@14², 512@7², the 1×1 256→64@56²
and the 7×7/2 C = 3 stem — at N = 1 and N = 32, with and without a fused bias+ReLU (24 rows); `default` takes eight of
them, so that the default suite stays a few minutes long: the six layers at N = 32, and the 64@56² layer with
bias+ReLU at N = 32 and N = 1 (where the unfused pair's extra passes cost most)."""

from __future__ import annotations

from tracea_cli.ops.conv2d.problem import Conv2dProblem


def _layer(c: int, k: int, hw: int, rs: int, *, n: int = 1, stride: int = 1, dtype: str = "fp32",
           epilogue: str = "none") -> Conv2dProblem:
    """A square layer with 'same' padding for odd filters."""
    return Conv2dProblem(n, hw, hw, c, k, rs, rs, stride, stride, rs // 2, rs // 2, dtype=dtype, epilogue=epilogue)


#: the ResNet-50 layers of the GPU rows: (C, K, H = W, R = S, stride)
RESNET50 = ((64, 64, 56, 3, 1), (128, 128, 28, 3, 1), (256, 256, 14, 3, 1), (512, 512, 7, 3, 1), (256, 64, 56, 1, 1),
            (3, 64, 224, 7, 2))

_CPU_DEFAULT = (
    _layer(64, 64, 56, 3),
    _layer(64, 64, 56, 3, epilogue="bias_relu"),
    _layer(128, 128, 28, 3),
    _layer(256, 256, 14, 3),
)
_CPU_CONV2D = (
    *_CPU_DEFAULT,
    _layer(512, 512, 7, 3),
    _layer(256, 64, 56, 1),  # the 1x1 reduction
    _layer(3, 64, 224, 7, stride=2),  # the stem: C = 3
    _layer(64, 64, 56, 3, epilogue="bias_residual_relu"),
    _layer(64, 64, 56, 3, dtype="fp64"),
    Conv2dProblem(1, 27, 31, 12, 37, 3, 3, 2, 2, 1, 2, 2, 1),  # awkward: odd sizes, stride 2, dilation 2
)
_GPU_CONV2D = tuple(_layer(c, k, hw, rs, n=n, stride=stride, dtype="fp16", epilogue=epilogue)
                    for n in (32, 1) for epilogue in ("none", "bias_relu") for c, k, hw, rs, stride in RESNET50)
_GPU_DEFAULT = (
    *(_layer(c, k, hw, rs, n=32, stride=stride, dtype="fp16") for c, k, hw, rs, stride in RESNET50),
    _layer(64, 64, 56, 3, n=32, dtype="fp16", epilogue="bias_relu"),
    _layer(64, 64, 56, 3, n=1, dtype="fp16", epilogue="bias_relu"),
)
_ROWS = {("default", "cpu"): _CPU_DEFAULT, ("conv2d", "cpu"): _CPU_CONV2D,
         ("default", "cuda"): _GPU_DEFAULT, ("conv2d", "cuda"): _GPU_CONV2D}


def suite(name: str, backend: str, dtypes: tuple[str, ...]) -> tuple[Conv2dProblem, ...]:
    """The rows of suite `name` for `backend` in the dtypes the device runs (others left out)."""
    return tuple(p for p in _ROWS.get((name, backend), ()) if p.dtype in dtypes)
