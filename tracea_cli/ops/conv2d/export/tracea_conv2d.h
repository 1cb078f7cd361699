/* tracea_conv2d.h: the conv2d part of Tracea's exported ABI (tracea @VERSION@), included by every conv2d export's
 * header. Generated; do not edit.
 *
 *   tracea_conv2d_args        one call's device pointers and sizes (below)
 *   tracea__conv2d(e, a, s)   check the arguments, fill the runtime's slots, run the export `e` on stream `s`
 *   C++: tracea::conv2d(x, w, bias, out, params), tracea::conv2d_workspace_bytes(...), tracea::Conv2dParams,
 *        tracea::Conv2dEpilogue
 *
 * An export serves one geometry (stride, padding, dilation) and one epilogue, those it was tuned for; its sizes
 * (N, H, W, C, K, R, S) dispatch between the exported variants. The kernels read X as N x H x W x C (NHWC) and the
 * filter as K x R x S x C (KRSC) and write Y as N x P x Q x K (NPQK). An input given in NCHW and a filter in KCRS
 * (torch's default layouts) are first transposed into the workspace by the call itself: the workspace then holds
 * those copies too (conv2d_workspace_bytes counts them), and the call's time includes them. The Hopper wgmma
 * family's kernels (sm_90a) have no transposes: a call in NCHW / KCRS that only they would serve returns
 * TRACEA_ERROR_UNSUPPORTED_LAYOUT (pass channels_last views).
 */
#ifndef TRACEA_CONV2D_H_V1
#define TRACEA_CONV2D_H_V1

#include "tracea_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

@ENUMS@

/* One conv2d: Y = epilogue(conv(X, W)). Device pointers; sizes in elements.
 * x: N x H x W x C, or N x C x H x W when x_is_nchw is 1; filter: K x R x S x C, or K x C x R x S when filter_is_kcrs
 * is 1; y: N x P x Q x K; bias: K elements; residual: N x P x Q x K (both only for the epilogues that use them);
 * workspace: <prefix>_workspace_bytes(...) bytes of scratch when that is not 0, aligned to 256 bytes (cuMemAlloc's
 * are). P = (H + 2 pad_h - dilation_h (R - 1) - 1) / stride_h + 1, Q likewise, with the export's geometry. */
typedef struct tracea_conv2d_args {
  const void* x;
  const void* filter;
  void* y;
  const void* bias;
  const void* residual;
  void* workspace;
  size_t workspace_bytes;
  int n, h, w, c, k, r, s;
  int x_is_nchw;      /* 1: x is contiguous N x C x H x W */
  int filter_is_kcrs; /* 1: filter is contiguous K x C x R x S */
} tracea_conv2d_args;

/* The runtime's slots of a conv2d call (what launch tables name), and where its tensors, workspace and sizes live. */
@SLOTS@

#define TRACEA_CONV2D_ALIGN 256u

/* The export's geometry and epilogue (its fields, in this order). */
enum { TRACEA_CONV2D_FIELD_STRIDE_H = 0, TRACEA_CONV2D_FIELD_STRIDE_W, TRACEA_CONV2D_FIELD_PAD_H,
       TRACEA_CONV2D_FIELD_PAD_W, TRACEA_CONV2D_FIELD_DILATION_H, TRACEA_CONV2D_FIELD_DILATION_W,
       TRACEA_CONV2D_FIELD_EPILOGUE };

/* Output positions along one axis (<= 0: the filter does not fit). */
static inline long long tracea__conv2d_extent(int size, int pad, int filter, int dilation, int stride) {
  return ((long long)size + 2ll * pad - (long long)dilation * (filter - 1) - 1) / stride + 1;
}

static inline size_t tracea__conv2d_round(size_t bytes) {
  return (bytes + TRACEA_CONV2D_ALIGN - 1) / TRACEA_CONV2D_ALIGN * TRACEA_CONV2D_ALIGN;
}

/* Bytes of the transposed copies at the front of the workspace (0 when the call passes NHWC and KRSC). */
static inline size_t tracea__conv2d_copies(const tracea_export* e, const tracea_conv2d_args* a, size_t* filter_at) {
  const size_t x_bytes = a->x_is_nchw ? tracea__conv2d_round((size_t)a->n * a->h * a->w * a->c * e->elem_bytes) : 0;
  const size_t f_bytes = a->filter_is_kcrs ? tracea__conv2d_round((size_t)a->k * a->r * a->s * a->c * e->elem_bytes)
                                           : 0;
  if (filter_at != NULL) {
    *filter_at = x_bytes;
  }
  return x_bytes + f_bytes;
}

/* TRACEA_OK when `a` is a well-formed call of the export `e` (its geometry and epilogue), else the reason. */
static inline tracea_status tracea__conv2d_check(const tracea_export* e, const tracea_conv2d_args* a) {
  const int* f = e->fields;
  const int epilogue = f[TRACEA_CONV2D_FIELD_EPILOGUE];
  long long p, q;
  if (a == NULL || a->x == NULL || a->filter == NULL || a->y == NULL || a->n <= 0 || a->h <= 0 || a->w <= 0 ||
      a->c <= 0 || a->k <= 0 || a->r <= 0 || a->s <= 0 || (epilogue != TRACEA_CONV2D_EPILOGUE_NONE && a->bias == NULL) ||
      ((epilogue == TRACEA_CONV2D_EPILOGUE_BIAS_RESIDUAL || epilogue == TRACEA_CONV2D_EPILOGUE_BIAS_RESIDUAL_RELU) &&
       a->residual == NULL)) {
    return TRACEA_ERROR_INVALID_ARGUMENT;
  }
  p = tracea__conv2d_extent(a->h, f[TRACEA_CONV2D_FIELD_PAD_H], a->r, f[TRACEA_CONV2D_FIELD_DILATION_H],
                            f[TRACEA_CONV2D_FIELD_STRIDE_H]);
  q = tracea__conv2d_extent(a->w, f[TRACEA_CONV2D_FIELD_PAD_W], a->s, f[TRACEA_CONV2D_FIELD_DILATION_W],
                            f[TRACEA_CONV2D_FIELD_STRIDE_W]);
  if (p <= 0 || q <= 0 || (long long)a->n * p * q > 2147483647ll || (long long)a->r * a->s * a->c > 2147483647ll ||
      (long long)a->n * a->h * a->w * a->c > 2147483647ll) {
    return TRACEA_ERROR_INVALID_ARGUMENT;
  }
  return TRACEA_OK;
}

/* The slots of a checked call: the implicit GEMM's M = N P Q, N = K, K = R S C for the grid rules; X and the filter
 * at their transposed copies in the workspace where the call passes NCHW / KCRS, the kernels' workspace after them. */
static inline void tracea__conv2d_fill(const tracea_export* e, const tracea_conv2d_args* a, tracea_call* c) {
  const int* f = e->fields;
  size_t filter_at = 0;
  const size_t copies = tracea__conv2d_copies(e, a, &filter_at);
  const CUdeviceptr ws = (CUdeviceptr)(uintptr_t)a->workspace;
  const long long p = tracea__conv2d_extent(a->h, f[TRACEA_CONV2D_FIELD_PAD_H], a->r, f[TRACEA_CONV2D_FIELD_DILATION_H],
                                            f[TRACEA_CONV2D_FIELD_STRIDE_H]);
  const long long q = tracea__conv2d_extent(a->w, f[TRACEA_CONV2D_FIELD_PAD_W], a->s, f[TRACEA_CONV2D_FIELD_DILATION_W],
                                            f[TRACEA_CONV2D_FIELD_STRIDE_W]);
  memset(c, 0, sizeof(*c));
  c->pointers[TRACEA_CONV2D_X] = a->x_is_nchw ? ws : (CUdeviceptr)(uintptr_t)a->x;
  c->pointers[TRACEA_CONV2D_X_NCHW] = a->x_is_nchw ? (CUdeviceptr)(uintptr_t)a->x : 0;
  c->pointers[TRACEA_CONV2D_FILTER] = a->filter_is_kcrs ? ws + filter_at : (CUdeviceptr)(uintptr_t)a->filter;
  c->pointers[TRACEA_CONV2D_FILTER_KCRS] = a->filter_is_kcrs ? (CUdeviceptr)(uintptr_t)a->filter : 0;
  c->pointers[TRACEA_CONV2D_Y] = (CUdeviceptr)(uintptr_t)a->y;
  c->pointers[TRACEA_CONV2D_BIAS] = (CUdeviceptr)(uintptr_t)a->bias;
  c->pointers[TRACEA_CONV2D_RESIDUAL] = (CUdeviceptr)(uintptr_t)a->residual;
  c->pointers[TRACEA_CONV2D_WORKSPACE] = ws == 0 ? 0 : ws + copies;
  c->workspace_bytes = a->workspace_bytes > copies ? a->workspace_bytes - copies : 0;
  c->ints[TRACEA_CONV2D_M] = (int)(a->n * p * q);
  c->ints[TRACEA_CONV2D_N] = a->k;
  c->ints[TRACEA_CONV2D_K] = a->r * a->s * a->c;
  c->ints[TRACEA_CONV2D_BATCH] = a->n;
  c->ints[TRACEA_CONV2D_IN_H] = a->h;
  c->ints[TRACEA_CONV2D_IN_W] = a->w;
  c->ints[TRACEA_CONV2D_IN_C] = a->c;
  c->ints[TRACEA_CONV2D_OUT_C] = a->k;
  c->ints[TRACEA_CONV2D_FLT_R] = a->r;
  c->ints[TRACEA_CONV2D_FLT_S] = a->s;
  c->ints[TRACEA_CONV2D_X_IS_NCHW] = a->x_is_nchw ? 1 : 0;
  c->ints[TRACEA_CONV2D_FILTER_IS_KCRS] = a->filter_is_kcrs ? 1 : 0;
  /* what the TMA im2col kernel reads besides: the output's P x Q, the geometry, X's row and image strides and the
   * filter's taps and row stride (KRSC seen as C x R S x K), in elements */
  c->ints[TRACEA_CONV2D_P] = (int)p;
  c->ints[TRACEA_CONV2D_Q] = (int)q;
  c->ints[TRACEA_CONV2D_STRIDE_H] = f[TRACEA_CONV2D_FIELD_STRIDE_H];
  c->ints[TRACEA_CONV2D_STRIDE_W] = f[TRACEA_CONV2D_FIELD_STRIDE_W];
  c->ints[TRACEA_CONV2D_PAD_H] = f[TRACEA_CONV2D_FIELD_PAD_H];
  c->ints[TRACEA_CONV2D_PAD_W] = f[TRACEA_CONV2D_FIELD_PAD_W];
  c->ints[TRACEA_CONV2D_DILATION_H] = f[TRACEA_CONV2D_FIELD_DILATION_H];
  c->ints[TRACEA_CONV2D_DILATION_W] = f[TRACEA_CONV2D_FIELD_DILATION_W];
  c->ints[TRACEA_CONV2D_X_ROW] = a->w * a->c;
  c->ints[TRACEA_CONV2D_X_IMAGE] = a->h * a->w * a->c;
  c->ints[TRACEA_CONV2D_W_TAPS] = a->r * a->s;
  c->ints[TRACEA_CONV2D_W_ROW] = a->r * a->s * a->c;
}

/* Bytes of scratch a call of export `e` with these sizes and layouts needs (0: none; the pointers are not read):
 * the transposed copies, then the kernels' own (split-K partial sums), an upper bound over the export's variants. */
static inline size_t tracea__conv2d_workspace_bytes(const tracea_export* e, const tracea_conv2d_args* a) {
  const int* f = e->fields;
  int ints[TRACEA_MAX_INTS] = {0};
  long long p, q;
  if (a == NULL || a->n <= 0 || a->h <= 0 || a->w <= 0 || a->c <= 0 || a->k <= 0 || a->r <= 0 || a->s <= 0) {
    return 0;
  }
  p = tracea__conv2d_extent(a->h, f[TRACEA_CONV2D_FIELD_PAD_H], a->r, f[TRACEA_CONV2D_FIELD_DILATION_H],
                            f[TRACEA_CONV2D_FIELD_STRIDE_H]);
  q = tracea__conv2d_extent(a->w, f[TRACEA_CONV2D_FIELD_PAD_W], a->s, f[TRACEA_CONV2D_FIELD_DILATION_W],
                            f[TRACEA_CONV2D_FIELD_STRIDE_W]);
  if (p <= 0 || q <= 0 || (long long)a->n * p * q > 2147483647ll) {
    return 0;
  }
  ints[TRACEA_CONV2D_M] = (int)(a->n * p * q);
  ints[TRACEA_CONV2D_N] = a->k;
  ints[TRACEA_CONV2D_K] = a->r * a->s * a->c;
  return tracea__conv2d_copies(e, a, NULL) + tracea__workspace_bytes(e, ints, 0);
}

/* Y = epilogue(conv(X, W)) with export `e` on `stream`: the device is the stream's (for the default stream, the
 * calling thread's current context's, else device 0). Loads the binaries on first use. A call whose transposed copies
 * need a workspace it lacks returns TRACEA_ERROR_WORKSPACE. */
static inline tracea_status tracea__conv2d(const tracea_export* e, const tracea_conv2d_args* a, CUstream stream) {
  tracea_call call;
  tracea_status status = tracea__conv2d_check(e, a);
  size_t copies;
  if (status != TRACEA_OK) {
    return status;
  }
  copies = tracea__conv2d_copies(e, a, NULL);
  if (copies > 0 && (a->workspace == NULL || a->workspace_bytes < copies ||
                     (uintptr_t)a->workspace % TRACEA_CONV2D_ALIGN != 0)) {
    return TRACEA_ERROR_WORKSPACE;
  }
  tracea__conv2d_fill(e, a, &call);
  return tracea__run(e, &call, stream);
}

#ifdef __cplusplus
} /* extern "C" */

namespace tracea {

// The fused epilogues of conv2d (its own names and codes: out = act(conv + bias) (+ residual, then ReLU)).
enum class Conv2dEpilogue : int {
@CPP_EPILOGUES@
};

struct Conv2dParams {
  int stride_h = 1, stride_w = 1;       // the export's geometry: a call with another one finds no export
  int pad_h = 0, pad_w = 0;
  int dilation_h = 1, dilation_w = 1;
  Conv2dEpilogue epilogue = Conv2dEpilogue::none;
  const void* residual = nullptr;       // N x P x Q x K (the output's layout), for the residual epilogues
  CUstream stream = nullptr;            // the stream to launch on (its device is the one used)
  void* workspace = nullptr;            // conv2d_workspace_bytes(...) bytes of device memory when that is not 0
  size_t workspace_bytes = 0;
};

namespace detail {

// x: {N, C, H, W} (torch's order), channels_last strides or contiguous; w: {K, C, R, S}, channels_last or contiguous;
// out: {N, K, P, Q}, channels_last; bias: {K} or no data. The export and C arguments for a call, or why there are none.
inline Status conv2d_plan(const TensorView& x, const TensorView& w, const TensorView& bias, const TensorView& out,
                          const Conv2dParams& p, const tracea_export** exp, tracea_conv2d_args* args) {
  if (x.ndim != 4 || w.ndim != 4 || out.ndim != 4 || x.dtype != w.dtype || x.dtype != out.dtype ||
      (bias.data != nullptr && (bias.dtype != x.dtype || bias.ndim != 1 || bias.dims[0] != w.dims[0]))) {
    return Status::invalid_argument;
  }
  const int64_t n = x.dims[0], c = x.dims[1], h = x.dims[2], wd = x.dims[3];
  const int64_t k = w.dims[0], r = w.dims[2], s = w.dims[3];
  if (w.dims[1] != c || out.dims[0] != n || out.dims[1] != k) {
    return Status::invalid_argument;
  }
  for (int64_t v : {n, c, h, wd, k, r, s}) {
    if (!fits_int(v)) return Status::invalid_argument;
  }
  const bool x_nhwc = x.is({n, c, h, wd}, {h * wd * c, 1, wd * c, c});
  const bool x_nchw = !x_nhwc && x.is({n, c, h, wd}, {c * h * wd, h * wd, wd, 1});
  const bool w_krsc = w.is({k, c, r, s}, {r * s * c, 1, s * c, c});
  const bool w_kcrs = !w_krsc && w.is({k, c, r, s}, {c * r * s, r * s, s, 1});
  const int64_t pq = out.dims[2], qq = out.dims[3];
  if ((!x_nhwc && !x_nchw) || (!w_krsc && !w_kcrs) || !out.is({n, k, pq, qq}, {pq * qq * k, 1, qq * k, k})) {
    return Status::invalid_argument;  // another layout: it needs a copy the call does not make
  }
  const int fields[7] = {p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dilation_h, p.dilation_w,
                         static_cast<int>(p.epilogue)};
  const tracea_export* found = find_export("conv2d", static_cast<tracea_dtype>(x.dtype), fields, 7);
  if (found == nullptr) {
    return Status::not_exported;
  }
  *exp = found;
  *args = tracea_conv2d_args{};
  args->x = x.data;
  args->filter = w.data;
  args->y = out.data;
  args->bias = bias.data;
  args->residual = p.residual;
  args->workspace = p.workspace;
  args->workspace_bytes = p.workspace_bytes;
  args->n = static_cast<int>(n), args->h = static_cast<int>(h), args->w = static_cast<int>(wd);
  args->c = static_cast<int>(c), args->k = static_cast<int>(k), args->r = static_cast<int>(r);
  args->s = static_cast<int>(s);
  args->x_is_nchw = x_nchw ? 1 : 0;
  args->filter_is_kcrs = w_kcrs ? 1 : 0;
  if (tracea__conv2d_extent(args->h, p.pad_h, args->r, p.dilation_h, p.stride_h) != pq ||
      tracea__conv2d_extent(args->w, p.pad_w, args->s, p.dilation_w, p.stride_w) != qq) {
    return Status::invalid_argument;  // out is not N x K x P x Q for this geometry
  }
  return Status::ok;
}

}  // namespace detail

// out = epilogue(conv2d(x, w) + bias) on params.stream, as torch.nn.functional.conv2d computes it (cross-correlation).
// Views in torch's dimension order: x {N, C, H, W}, w {K, C, R, S}, out {N, K, P, Q}, bias {K} (a view without data:
// none). x and w may be channels_last (no copy) or contiguous (transposed into params.workspace first, inside this
// call); out must be channels_last. Returns Status::ok once the work is queued on the stream; `if (!status)` on
// failure (not_exported: no included export has this dtype, geometry and epilogue; unsupported_shape: none of its
// variants serves these sizes).
inline Status conv2d(const TensorView& x, const TensorView& w, const TensorView& bias, const TensorView& out,
                     const Conv2dParams& params = Conv2dParams()) {
  const tracea_export* exp = nullptr;
  tracea_conv2d_args args = {};
  Status s = detail::conv2d_plan(x, w, bias, out, params, &exp, &args);
  if (s != Status::ok) {
    return s;
  }
  return Status(tracea__conv2d(exp, &args, params.stream));
}

// The same without a bias (epilogue none).
inline Status conv2d(const TensorView& x, const TensorView& w, const TensorView& out,
                     const Conv2dParams& params = Conv2dParams()) {
  return conv2d(x, w, TensorView(), out, params);
}

// Bytes of device scratch params.workspace needs for this call (0: none): the transposed copies of a contiguous x or
// w, and the kernels' own (split-K).
inline size_t conv2d_workspace_bytes(const TensorView& x, const TensorView& w, const TensorView& bias,
                                     const TensorView& out, const Conv2dParams& params = Conv2dParams()) {
  const tracea_export* exp = nullptr;
  tracea_conv2d_args args = {};
  if (detail::conv2d_plan(x, w, bias, out, params, &exp, &args) != Status::ok) {
    return 0;
  }
  return tracea__conv2d_workspace_bytes(exp, &args);
}

}  // namespace tracea
#endif

#endif /* TRACEA_CONV2D_H_V1 */
