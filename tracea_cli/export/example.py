"""The example program of an export (example.cpp) and its CMakeLists.txt.

The program runs the exported GEMM once on a stream with random inputs (uniform in [-1, 1], rounded to the dtype),
output poisoned with NaN first, and compares it with a float64 reference computed on the host: the relative
Frobenius error against the dtype's bound of the correctness policy. It prints one JSON line and exits 0 when the
result passes, 1 when it does not, 2 when it could not run. It needs only cuda.h to build and -ldl -lpthread to link.
"""

from __future__ import annotations

from tracea_cli import __version__
from tracea_cli.export.c_header import template
from tracea_cli.export.manifest import Manifest
from tracea_cli.ops.dtypes import get_dtype

EXAMPLE = "example.cpp"
CMAKE = "CMakeLists.txt"

_STORAGE = {"fp32": "float", "tf32": "float", "fp16": "uint16_t", "bf16": "uint16_t", "fp64": "double"}


def render_example(manifest: Manifest, c_header: str) -> str:
    first = manifest.shape_list()[0]
    dtype = manifest.dtype
    return (
        template(EXAMPLE).replace("@VERSION@", __version__)
        .replace("@HEADER@", c_header)
        .replace("@DTYPE@", dtype)
        .replace("@LAYOUT@", manifest.layout)
        .replace("@EPILOGUE@", manifest.epilogue)
        .replace("@STORAGE@", _STORAGE[dtype])
        .replace("@BOUND@", repr(get_dtype(dtype).bound))
        .replace("@NT@", "true" if manifest.layout == "nt" else "false")
        .replace("@M@", str(first["m"]))
        .replace("@N@", str(first["n"]))
        .replace("@K@", str(first["k"]))
    )


def render_cmake(manifest: Manifest) -> str:
    return template(CMAKE).replace("@PREFIX@", manifest.prefix).replace("@VERSION@", __version__)
