"""tracea.hpp: the C++ face of the exports a program includes: `tracea::TensorView`, `tracea::DType`,
`tracea::gemm(a, b, out, params)` with the stream in `params`.

The same text in every export of this tracea version. Each export's C header registers itself when compiled as C++;
`tracea::gemm` picks the export of the operands' dtype, B's layout (told by its strides) and the epilogue, and that
export picks the tuned shape (exact, else the nearest valid one).
"""

from __future__ import annotations

from tracea_cli import __version__
from tracea_cli.export.c_header import RUNTIME_HEADER, template

CPP_HEADER = "tracea.hpp"


def render_cpp() -> str:
    return template(CPP_HEADER).replace("@VERSION@", __version__).replace("@RUNTIME@", RUNTIME_HEADER)
