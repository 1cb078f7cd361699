"""A direct convolution for tests: loops over output pixels and filter taps with explicit bounds checks (no padding
buffer, no im2col), and each epilogue written out. Slow; for small shapes only."""

from __future__ import annotations

import numpy as np


def direct_conv2d(p, inputs) -> np.ndarray:
    x, w = np.asarray(inputs["X"], np.float64), np.asarray(inputs["W"], np.float64)
    y = np.zeros((p.n, p.p, p.q, p.k))
    for pp in range(p.p):
        for qq in range(p.q):
            for r in range(p.r):
                hh = pp * p.stride_h - p.pad_h + r * p.dilation_h
                if not 0 <= hh < p.h:
                    continue
                for s in range(p.s):
                    ww = qq * p.stride_w - p.pad_w + s * p.dilation_w
                    if 0 <= ww < p.w:
                        y[:, pp, qq, :] += x[:, hh, ww, :] @ w[:, r, s, :].T
    relu = lambda v: np.maximum(v, 0)  # noqa: E731
    e = p.epilogue
    if e != "none":
        y = y + inputs["bias"]
    if e == "bias_relu":
        y = relu(y)
    elif e == "bias_silu":
        y = y / (1 + np.exp(-y))
    elif e in ("bias_residual", "bias_residual_relu"):
        y = y + inputs["residual"]
        if e == "bias_residual_relu":
            y = relu(y)
    return y


# Shapes no tile divides (issue 13): odd H and W, stride 2, dilation 2, padding 0..3, C in {3, 12, 100}, odd K.
AWKWARD = (
    dict(n=1, h=9, w=7, c=3, k=5, r=3, s=3),
    dict(n=2, h=11, w=9, c=12, k=7, r=3, s=3, stride=2, pad=1),
    dict(n=1, h=13, w=11, c=3, k=9, r=3, s=3, dilation=2, pad=2),
    dict(n=1, h=9, w=11, c=100, k=33, r=3, s=5, stride_h=2, stride_w=1, pad_h=3, pad_w=0, dilation_w=2),
    dict(n=2, h=7, w=5, c=12, k=3, r=1, s=1, stride=2),
    dict(n=1, h=15, w=17, c=3, k=17, r=7, s=7, stride=2, pad=3),
    dict(n=1, h=5, w=5, c=12, k=37, r=3, s=3, pad=3, dilation=2, stride=2),
)
