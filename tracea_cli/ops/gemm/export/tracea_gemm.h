/* tracea_gemm.h: the GEMM part of Tracea's exported ABI (tracea @VERSION@), included by every gemm export's header.
 * Generated; do not edit.
 *
 *   tracea_gemm_args        one call's device pointers, sizes and leading dimensions (below)
 *   tracea__gemm(e, a, s)   check the arguments, fill the runtime's slots, run the export `e` on stream `s`
 *   C++: tracea::gemm(a, b, out, params), tracea::gemm_workspace_bytes(...), tracea::GemmParams, tracea::Epilogue
 */
#ifndef TRACEA_GEMM_H_V1
#define TRACEA_GEMM_H_V1

#include "tracea_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

@ENUMS@

/* One GEMM: C = epilogue(A.B). Device pointers; sizes and leading dimensions in elements.
 * A is M x K row-major (lda >= K); B is K x N row-major for layout nn (ldb >= N), N x K row-major for nt (ldb >= K);
 * C is M x N row-major (ldc >= N); bias has N elements, residual is M x N with leading dimension ldc (both only for
 * the epilogues that use them); workspace: <prefix>_workspace_bytes_mnk(M, N, K) bytes of scratch when that is not 0,
 * aligned to 256 bytes (cuMemAlloc's are). */
typedef struct tracea_gemm_args {
  const void* a;
  const void* b;
  void* c;
  const void* bias;
  const void* residual;
  void* workspace;
  size_t workspace_bytes;
  int m, n, k;
  int lda, ldb, ldc;
} tracea_gemm_args;

/* The runtime's slots of a GEMM call (what launch tables name), and where its tensors, workspace and sizes live. */
@SLOTS@

/* TRACEA_OK when `a` is a well-formed call of the export `e` (its layout and epilogue), else the reason. */
static inline tracea_status tracea__gemm_check(const tracea_export* e, const tracea_gemm_args* a) {
  const int layout = e->fields[0], epilogue = e->fields[1];
  if (a == NULL || a->a == NULL || a->b == NULL || a->c == NULL || a->m <= 0 || a->n <= 0 || a->k <= 0 ||
      a->lda < a->k || a->ldc < a->n || a->ldb < (layout == TRACEA_LAYOUT_NN ? a->n : a->k) ||
      (epilogue != TRACEA_EPILOGUE_NONE && a->bias == NULL) ||
      (epilogue == TRACEA_EPILOGUE_BIAS_RESIDUAL && a->residual == NULL)) {
    return TRACEA_ERROR_INVALID_ARGUMENT;
  }
  return TRACEA_OK;
}

static inline void tracea__gemm_fill(const tracea_gemm_args* a, tracea_call* c) {
  memset(c, 0, sizeof(*c));
  c->pointers[TRACEA_GEMM_A] = (CUdeviceptr)(uintptr_t)a->a;
  c->pointers[TRACEA_GEMM_B] = (CUdeviceptr)(uintptr_t)a->b;
  c->pointers[TRACEA_GEMM_C] = (CUdeviceptr)(uintptr_t)a->c;
  c->pointers[TRACEA_GEMM_BIAS] = (CUdeviceptr)(uintptr_t)a->bias;
  c->pointers[TRACEA_GEMM_RESIDUAL] = (CUdeviceptr)(uintptr_t)a->residual;
  c->pointers[TRACEA_GEMM_WORKSPACE] = (CUdeviceptr)(uintptr_t)a->workspace;
  c->workspace_bytes = a->workspace_bytes;
  c->ints[TRACEA_GEMM_M] = a->m;
  c->ints[TRACEA_GEMM_N] = a->n;
  c->ints[TRACEA_GEMM_K] = a->k;
  c->ints[TRACEA_GEMM_LDA] = a->lda;
  c->ints[TRACEA_GEMM_LDB] = a->ldb;
  c->ints[TRACEA_GEMM_LDC] = a->ldc;
}

/* C = epilogue(A.B) with export `e` on `stream`: the device is the stream's (for the default stream, the calling
 * thread's current context's, else device 0). Loads the binaries on first use. */
static inline tracea_status tracea__gemm(const tracea_export* e, const tracea_gemm_args* a, CUstream stream) {
  tracea_call call;
  tracea_status status = tracea__gemm_check(e, a);
  if (status != TRACEA_OK) {
    return status;
  }
  tracea__gemm_fill(a, &call);
  return tracea__run(e, &call, stream);
}

/* Bytes of scratch an M x N x K call of export `e` needs (0: none); `k` = 0 counts the M x N part only. */
static inline size_t tracea__gemm_workspace_bytes(const tracea_export* e, int m, int n, int k) {
  int ints[TRACEA_MAX_INTS] = {0};
  if (m <= 0 || n <= 0 || k < 0) {
    return 0;
  }
  ints[TRACEA_GEMM_M] = m;
  ints[TRACEA_GEMM_N] = n;
  ints[TRACEA_GEMM_K] = k;
  return tracea__workspace_bytes(e, ints, k == 0);
}

#ifdef __cplusplus
} /* extern "C" */

namespace tracea {

enum class Epilogue : int {
@CPP_EPILOGUES@
};

struct GemmParams {
  CUstream stream = nullptr;          // the stream to launch on (its device is the one used)
  Epilogue epilogue = Epilogue::none;
  const void* bias = nullptr;         // N elements, for the bias epilogues
  const void* residual = nullptr;     // M x N, leading dimension that of the output, for bias_residual
  void* workspace = nullptr;          // gemm_workspace_bytes(...) bytes of device memory when that is not 0
  size_t workspace_bytes = 0;
};

namespace detail {

// The export and C arguments for a call, or why there are none.
inline Status gemm_plan(const TensorView& a, const TensorView& b, const TensorView& out, const GemmParams& p,
                        const tracea_export** exp, tracea_gemm_args* args) {
  if (a.dtype != b.dtype || a.dtype != out.dtype || a.rows != out.rows || b.cols != out.cols || a.cols != b.rows ||
      a.col_stride != 1 || out.col_stride != 1 || !fits_int(a.rows) || !fits_int(b.cols) || !fits_int(a.cols) ||
      !fits_int(a.row_stride) || !fits_int(out.row_stride)) {
    return Status::invalid_argument;
  }
  const tracea_dtype dtype = static_cast<tracea_dtype>(a.dtype);
  const int nn[2] = {TRACEA_LAYOUT_NN, static_cast<int>(p.epilogue)};
  const int nt[2] = {TRACEA_LAYOUT_NT, static_cast<int>(p.epilogue)};
  const tracea_export* found = nullptr;
  int64_t ldb = 0;
  if (b.col_stride == 1 && (found = find_export("gemm", dtype, nn, 2)) != nullptr) {
    ldb = b.row_stride;  // B is K x N row-major
  } else if (b.row_stride == 1 && (found = find_export("gemm", dtype, nt, 2)) != nullptr) {
    ldb = b.col_stride;  // B is the transpose of an N x K row-major matrix
  } else if (b.col_stride != 1 && b.row_stride != 1) {
    return Status::invalid_argument;  // neither layout: B needs a copy
  } else {
    return Status::not_exported;
  }
  if (!fits_int(ldb)) {
    return Status::invalid_argument;
  }
  *exp = found;
  args->a = a.data;
  args->b = b.data;
  args->c = out.data;
  args->bias = p.bias;
  args->residual = p.residual;
  args->workspace = p.workspace;
  args->workspace_bytes = p.workspace_bytes;
  args->m = static_cast<int>(a.rows);
  args->n = static_cast<int>(b.cols);
  args->k = static_cast<int>(a.cols);
  args->lda = static_cast<int>(a.row_stride);
  args->ldb = static_cast<int>(ldb);
  args->ldc = static_cast<int>(out.row_stride);
  return Status::ok;
}

}  // namespace detail

// out = epilogue(a . b) on params.stream. Returns Status::ok once the work is queued on the stream.
inline Status gemm(const TensorView& a, const TensorView& b, const TensorView& out, const GemmParams& params = GemmParams()) {
  const tracea_export* exp = nullptr;
  tracea_gemm_args args = {};
  Status s = detail::gemm_plan(a, b, out, params, &exp, &args);
  if (s != Status::ok) {
    return s;
  }
  return static_cast<Status>(tracea__gemm(exp, &args, params.stream));
}

// Bytes of device scratch params.workspace needs for this call (0: none).
inline size_t gemm_workspace_bytes(const TensorView& a, const TensorView& b, const TensorView& out,
                                   const GemmParams& params = GemmParams()) {
  const tracea_export* exp = nullptr;
  tracea_gemm_args args = {};
  if (detail::gemm_plan(a, b, out, params, &exp, &args) != Status::ok) {
    return 0;
  }
  return tracea__gemm_workspace_bytes(exp, args.m, args.n, args.k);
}

}  // namespace tracea
#endif

#endif /* TRACEA_GEMM_H_V1 */
