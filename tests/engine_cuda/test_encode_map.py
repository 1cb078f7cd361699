"""The CUDA runtime's one tensor-map encoder, `encode_map`, on the CPU with the driver's encoders faked: each kind
(2-D tiled, tiled3d, im2col) reaches its driver call with the arguments its spec and the call's sizes give, the
im2col family's plan and arguments give exactly what wgmma_im2col computes (the values checked on an H200), and
`bind`'s helpers (`pointer_writer`, `repoint`) encode every kind through it."""

from __future__ import annotations

import ctypes
from types import SimpleNamespace

import pytest

from tracea_cli.backends import cuda
from tracea_cli.ops.conv2d.families import wgmma as cw
from tracea_cli.ops.conv2d.families import wgmma_im2col as im
from tracea_cli.ops.conv2d.problem import Conv2dProblem
from tracea_cli.ops.launch import TensorMap


class _Names:
    """An enum namespace of the fake driver: every member is its own name."""

    def __getattr__(self, name: str) -> str:
        return name


class _Encoded:
    def __init__(self, data: bytes) -> None:
        self._buffer = ctypes.create_string_buffer(data.ljust(128, b"\0"), 128)

    def getPtr(self) -> int:
        return ctypes.addressof(self._buffer)


class FakeDriver:
    """Stands in for cuda.bindings.driver (no GPU here): records each encoder's arguments, returns 128 bytes that
    name the call and the address."""

    CUresult = SimpleNamespace(CUDA_SUCCESS=0)
    CUtensorMapDataType = _Names()
    CUtensorMapInterleave = _Names()
    CUtensorMapSwizzle = _Names()
    CUtensorMapL2promotion = _Names()
    CUtensorMapFloatOOBfill = _Names()

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple]] = []

    @staticmethod
    def cuuint64_t(v: int) -> tuple[str, int]:
        return ("u64", v)

    @staticmethod
    def cuuint32_t(v: int) -> tuple[str, int]:
        return ("u32", v)

    def _encode(self, what: str, args: tuple) -> tuple[int, _Encoded]:
        self.calls.append((what, args))
        return 0, _Encoded(what.encode() + int(args[2]).to_bytes(8, "little"))

    def cuTensorMapEncodeTiled(self, *args):
        return self._encode("tiled", args)

    def cuTensorMapEncodeIm2col(self, *args):
        return self._encode("im2col", args)


@pytest.fixture
def driver(monkeypatch) -> FakeDriver:
    fake = FakeDriver()
    monkeypatch.setattr(cuda, "_driver", lambda: fake)
    return fake


def _values(args: tuple) -> list:
    return [v for _, v in args]


def test_a_2d_tiled_map_is_encoded_as_before(driver):
    spec = TensorMap("A", ("K", "M"), "lda", (64, 128), "fp16", 2)
    data = cuda.encode_map(0x1000, spec, {"K": 72, "M": 300, "lda": 80})
    (what, args), = driver.calls
    assert what == "tiled" and data[:5] == b"tiled" and len(data) == 128
    dtype, rank, ptr, dims, strides, box, elem_strides, interleave, swizzle, l2, fill = args
    assert (dtype, rank, ptr) == ("CU_TENSOR_MAP_DATA_TYPE_FLOAT16", 2, 0x1000)
    assert _values(dims) == [72, 300] and _values(strides) == [160] and _values(box) == [64, 128]
    assert _values(elem_strides) == [1, 1] and swizzle == "CU_TENSOR_MAP_SWIZZLE_128B"
    assert (interleave, l2, fill) == ("CU_TENSOR_MAP_INTERLEAVE_NONE", "CU_TENSOR_MAP_L2_PROMOTION_L2_256B",
                                      "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE")


PROBLEMS = [
    (Conv2dProblem(2, 10, 14, 64, 96, 3, 5, 1, 2, 2, 0, 2, 1, dtype="fp16", epilogue="bias_residual"),
     {"tile_m": 128, "tile_n": 128, "cluster_m": 1}),
    (Conv2dProblem(4, 14, 14, 128, 256, 3, 3, 1, 1, 1, 1, dtype="bf16"),
     {"tile_m": 128, "tile_n": 256, "cluster_m": 2}),
    (Conv2dProblem(1, 12, 10, 32, 32, 3, 3, 1, 1, 2, 2, 2, 2, dtype="tf32"),
     {"tile_m": 64, "tile_n": 64, "cluster_m": 1}),
]


def _config(shape: dict) -> dict:
    return {"family": "wgmma", "stages": 4, "consumers": 2 if shape["tile_m"] == 128 else 1,
            "schedule": "cooperative", "persistent": 1, "group_m": 8, "store": "direct", **shape}


@pytest.mark.parametrize("problem, shape", PROBLEMS, ids=[p.label for p, _ in PROBLEMS])
def test_the_im2col_plan_encodes_what_wgmma_im2col_computes(driver, problem, shape):
    config = _config(shape)
    plan = cw.WGMMA.launch(problem, config)
    values = cw.WGMMA.args(problem, {"X": 0x10000, "W": 0x20000, "Y": 0x30000, "bias": None, "residual": None})
    sizes = {k: v for k, v in values.items() if isinstance(v, int)}
    assert [m.kind for m in plan.tensor_maps.values()] == ["im2col", "tiled3d", "tiled"]
    for name, spec in plan.tensor_maps.items():
        cuda.encode_map(values[spec.tensor], spec, sizes)
    (x_what, x), (w_what, w), (y_what, y) = driver.calls
    e = 4 if problem.dtype == "tf32" else 2
    dtype_name = {"fp16": "FLOAT16", "bf16": "BFLOAT16", "tf32": "TFLOAT32"}[problem.dtype]

    xm = im.im2col_map(problem, config["tile_m"])
    assert x_what == "im2col"
    (dtype, rank, ptr, dims, strides, lower, upper, channels, pixels, elem_strides, interleave, swizzle, l2,
     fill) = x
    assert (dtype, rank, ptr) == (f"CU_TENSOR_MAP_DATA_TYPE_{dtype_name}", 4, 0x10000)
    assert tuple(_values(dims)) == xm.dims and tuple(_values(strides)) == xm.strides_bytes
    assert (tuple(lower), tuple(upper)) == (xm.lower, xm.upper)
    assert (channels, pixels) == (xm.channels_per_pixel, xm.pixels_per_column) == (128 // e, config["tile_m"])
    assert tuple(_values(elem_strides)) == xm.element_strides and swizzle == "CU_TENSOR_MAP_SWIZZLE_128B"
    assert fill == "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE"

    fm = im.filter_map(problem, config["tile_n"], config["cluster_m"])
    assert w_what == "tiled" and w[1:3] == (3, 0x20000)
    assert tuple(_values(w[3])) == fm.dims and tuple(_values(w[4])) == fm.strides_bytes
    assert tuple(_values(w[5])) == fm.box and _values(w[6]) == [1, 1, 1]

    assert y_what == "tiled" and y[1:3] == (2, 0x30000)
    assert _values(y[3]) == [problem.k, problem.gemm_m] and _values(y[4]) == [problem.k * e]


def test_an_unknown_kind_is_refused_where_the_plan_is_made():
    with pytest.raises(ValueError, match="unknown tensor-map kind 'im2row'"):
        TensorMap("X", ("C", "W", "H", "N"), "", (), "fp16", 2, kind="im2row")
    with pytest.raises(ValueError, match="an im2col tensor map has two corners"):
        TensorMap("X", ("C", "W", "H", "N"), "", (), "fp16", 2, kind="im2col", strides=("a", "b", "c"))
    with pytest.raises(ValueError, match="a tiled3d tensor map names 2 strides"):
        TensorMap("W", ("C", "T", "N"), "", (64, 1, 64), "fp16", 2, kind="tiled3d")


def _bound(problem, config):
    plan = cw.WGMMA.launch(problem, config)
    values = cw.WGMMA.args(problem, {"X": 0x10000, "W": 0x20000, "Y": 0x30000, "bias": None, "residual": None})
    sizes = {k: v for k, v in values.items() if isinstance(v, int)}
    maps = {name: [ctypes.create_string_buffer(128)] for name in plan.tensor_maps}
    pointers = {"Y": [ctypes.c_void_p(0)]}
    return cuda.BoundLaunch([], [], pointers, maps, plan, sizes), maps, pointers


def test_the_pointer_writer_and_repoint_encode_im2col_maps_through_encode_map(driver):
    problem, shape = PROBLEMS[0]
    bound, maps, pointers = _bound(problem, _config(shape))
    write = bound.pointer_writer(("X", "Y"))
    for address in (0x40000, 0x50000, 0x40000):
        write((address, 0x60000))
        assert maps["map_x"][0].raw[:14] == b"im2col" + address.to_bytes(8, "little")
    # each map once per address (Y's 2-D map once: its address repeats), then copied from the memo
    assert [(what, args[2]) for what, args in driver.calls] == [("im2col", 0x40000), ("tiled", 0x60000),
                                                                ("im2col", 0x50000)]
    assert pointers["Y"][0].value == 0x60000 and maps["map_w"][0].raw == b"\0" * 128  # W did not move
    bound.repoint({"W": 0x70000})
    assert driver.calls[-1][0] == "tiled" and driver.calls[-1][1][1:3] == (3, 0x70000)
    assert maps["map_w"][0].raw[:13] == b"tiled" + (0x70000).to_bytes(8, "little")
