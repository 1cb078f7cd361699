"""The host-side arithmetic of conv2d's TMA im2col path (families/wgmma_im2col.py; step 2, not on a GPU yet): the
cuTensorMapEncodeIm2col arguments, each tile's start and each k-step's im2col offsets, checked on the CPU against a
direct enumeration of which input element every shared-memory row and column must hold, over strides, padding,
dilation, ragged sizes and channel counts no k-step divides; then a whole convolution assembled from the modelled
tiles against conv2d's float64 reference. What these tests cannot show is that the GPU's TMA follows the model
(module docstring): that needs the kernel run on an H200."""

from __future__ import annotations

import numpy as np
import pytest

from tracea_cli.ops.conv2d import problem as cp
from tracea_cli.ops.conv2d.families import wgmma_im2col as im
from tracea_cli.ops.conv2d.problem import Conv2dProblem

GEOMETRIES = [
    # n, h, w, c, k, r, s, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w
    (2, 7, 9, 8, 16, 3, 3, 1, 1, 1, 1, 1, 1),       # 'same' 3x3, odd sizes
    (1, 11, 10, 16, 8, 3, 3, 2, 2, 1, 1, 1, 1),     # ResNet's strided 3x3
    (3, 5, 6, 8, 8, 1, 1, 2, 2, 0, 0, 1, 1),        # strided 1x1 projection
    (1, 12, 13, 24, 8, 3, 2, 1, 2, 2, 0, 2, 3),     # dilation, mixed strides, pad on one axis, S != R
    (2, 9, 9, 72, 8, 7, 7, 2, 2, 3, 3, 1, 1),       # a 7x7/2 stem-like layer, C past one k-step (64 fp16)
    (1, 4, 4, 8, 8, 3, 3, 1, 1, 0, 0, 1, 1),        # no padding: P = Q = 2
]


def _problem(g, dtype="fp16"):
    n, h, w, c, k, r, s, sh, sw, ph, pw, dh, dw = g
    return Conv2dProblem(n, h, w, c, k, r, s, sh, sw, ph, pw, dh, dw, dtype=dtype)


def test_the_map_arguments_of_a_resnet_3x3_layer():
    p = Conv2dProblem(32, 56, 56, 64, 64, 3, 3, 1, 1, 1, 1, dtype="fp16")
    m = im.im2col_map(p, 128)
    assert m.dims == (64, 56, 56, 32) and m.strides_bytes == (128, 56 * 128, 56 * 56 * 128)
    assert m.lower == (-1, -1) and m.upper == (-1, -1)  # pad - dilation * (3 - 1)
    assert (m.channels_per_pixel, m.pixels_per_column, m.element_strides) == (64, 128, (1, 1, 1, 1))
    assert im.k_blocks(p) == 9 and im.why_not(p, 128) is None
    strided = Conv2dProblem(32, 56, 56, 128, 128, 3, 3, 2, 2, 1, 1, dtype="bf16")
    assert im.im2col_map(strided, 64).element_strides == (1, 2, 2, 1) and im.k_blocks(strided) == 18
    f = im.filter_map(p, 256, cluster=2)
    assert f.dims == (64, 9, 64) and f.strides_bytes == (128, 9 * 128) and f.box == (64, 1, 128)
    tf32 = Conv2dProblem(1, 8, 8, 48, 8, 3, 3, 1, 1, 1, 1, dtype="tf32")
    assert im.tile_k("tf32") == 32 and im.c_blocks(tf32) == 2 and im.im2col_map(tf32, 64).strides_bytes[0] == 192


@pytest.mark.parametrize("change, words", [
    ({"c": 3}, "TMA needs C·2 bytes to be a multiple of 16 (C=3)"),
    ({"stride_h": 9, "stride_w": 9}, "traversal strides are at most 8"),
    ({"pad_h": 200, "h": 8}, "bounding box's lower corner"),
    ({"dilation_w": 70, "s": 3, "w": 200, "pad_w": 1}, "bounding box's upper corner"),
])
def test_what_the_maps_cannot_describe_is_refused_with_a_reason(change, words):
    base = {"n": 1, "h": 16, "w": 16, "c": 8, "k": 8, "r": 3, "s": 3, "pad_h": 1, "pad_w": 1}
    p = Conv2dProblem(**{**base, **change}, dtype="fp16")
    assert words in im.why_not(p, 128)
    assert "at most 1024 pixels" in im.why_not(Conv2dProblem(**base, dtype="fp16"), 2048)


@pytest.mark.parametrize("g", GEOMETRIES)
@pytest.mark.parametrize("tile_m", [64, 128])
def test_every_row_and_column_of_every_tile_and_k_step_holds_the_element_it_must(g, tile_m):
    p = _problem(g)
    checked = 0
    for m0 in range(0, p.gemm_m, tile_m):
        for kb in range(im.k_blocks(p)):
            assert im.device_rows(p, m0, kb, tile_m) == im.direct_rows(p, m0, kb, tile_m), (m0, kb)
            checked += 1
    assert checked == -(-p.gemm_m // tile_m) * p.r * p.s * im.c_blocks(p)


def test_tiles_that_start_mid_row_and_mid_image_walk_on_in_m_order():
    p = _problem(GEOMETRIES[1])  # P = 6, Q = 5
    for m0 in (3, 7, 29, p.gemm_m - 2):  # any start: the walk wraps rows and images as M does
        for kb in (0, 4, 8):
            assert im.device_rows(p, m0, kb, 64) == im.direct_rows(p, m0, kb, 64)
    w, h, n = im.tile_start(p, 7)  # pixel 7 = (n 0, p 1, q 2)
    assert (w, h, n) == (2 * 2 - 1, 1 * 2 - 1, 0)


def test_a_wrong_corner_or_offset_is_caught():
    p = _problem(GEOMETRIES[0])
    m = im.im2col_map(p, 64)
    w, h, n = im.tile_start(p, 0)
    step = im.k_step(p, 4)  # tap (1, 1)
    good = im.tma_im2col_rows(m.dims, m, (step.c0, w, h, n), step.offsets)
    assert good == im.direct_rows(p, 0, 4, 64)
    wrong_upper = m.__class__(**{**m.__dict__, "upper": (m.upper[0] + 1, m.upper[1])})
    assert im.tma_im2col_rows(m.dims, wrong_upper, (step.c0, w, h, n), step.offsets) != good
    assert im.tma_im2col_rows(m.dims, m, (step.c0, w, h, n), (step.offsets[1] + 1, step.offsets[0])) != good


@pytest.mark.parametrize("g", GEOMETRIES)
def test_a_and_b_columns_of_a_k_step_name_the_same_tap_and_channel(g):
    p = _problem(g)
    for kb in range(im.k_blocks(p)):
        step = im.k_step(p, kb)
        cols = im.filter_columns(p, kb, 0, 8)
        for j in range(im.tile_k(p.dtype)):
            c = step.c0 + j
            assert cols[0][j] == ((0, step.r, step.s, c) if c < p.c else None)


@pytest.mark.parametrize("g", GEOMETRIES)
def test_the_modelled_tiles_multiply_to_the_convolution(g):
    p = _problem(g, dtype="fp32")  # fp32 for an exact comparison; tile_k follows the dtype (32)
    rng = np.random.default_rng(1)
    inputs = cp.make_inputs(p, rng)
    x, wt = inputs["X"], inputs["W"]
    tile_m, tile_n = 64, 8
    y = np.zeros((p.gemm_m, p.k))
    for m0 in range(0, p.gemm_m, tile_m):
        for n0 in range(0, p.k, tile_n):
            acc = np.zeros((tile_m, tile_n))
            for kb in range(im.k_blocks(p)):
                a = np.array([[x[e] if e else 0.0 for e in row] for row in im.device_rows(p, m0, kb, tile_m)])
                b = np.array([[wt[e] if e else 0.0 for e in row] for row in im.filter_columns(p, kb, n0, tile_n)])
                acc += a @ b.T
            rows, cols = min(tile_m, p.gemm_m - m0), min(tile_n, p.k - n0)
            y[m0:m0 + rows, n0:n0 + cols] = acc[:rows, :cols]
    ref = cp.reference(p, inputs)["Y"].reshape(p.gemm_m, p.k)
    assert np.allclose(y, ref, rtol=1e-12, atol=1e-12)
