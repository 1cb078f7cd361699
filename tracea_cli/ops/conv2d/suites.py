"""conv2d's rows of the built-in bench suites, CPU only for now (the CUDA families come later, and the default GPU
suite must not gain rows that cannot run): `default` (three ResNet-50 3×3 layers at N = 1, one with bias+ReLU) and
`conv2d` (the ResNet-50 layers of issue 13 at N = 1, fp32 and one fp64, and an awkward shape no tile divides). Each
runs in seconds on two cores."""

from __future__ import annotations

from tracea_cli.ops.conv2d.problem import Conv2dProblem


def _layer(c: int, k: int, hw: int, rs: int, *, stride: int = 1, dtype: str = "fp32",
           epilogue: str = "none") -> Conv2dProblem:
    """A square layer at N = 1 with 'same' padding for odd filters."""
    return Conv2dProblem(1, hw, hw, c, k, rs, rs, stride, stride, rs // 2, rs // 2, dtype=dtype, epilogue=epilogue)


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
_ROWS = {("default", "cpu"): _CPU_DEFAULT, ("conv2d", "cpu"): _CPU_CONV2D}


def suite(name: str, backend: str, dtypes: tuple[str, ...]) -> tuple[Conv2dProblem, ...]:
    """The rows of suite `name` for `backend` in the dtypes the device runs (others left out)."""
    return tuple(p for p in _ROWS.get((name, backend), ()) if p.dtype in dtypes)
