// tracea.hpp: C++ interface to the Tracea exports included before or after it (tracea @VERSION@). Generated.
//
//   #include "tracea_gemm_fp16_nn.h"   // one or more exports
//   #include "tracea.hpp"
//   tracea::TensorView a = tracea::TensorView::matrix(d_a, tracea::DType::fp16, M, K);
//   tracea::TensorView b = tracea::TensorView::matrix(d_b, tracea::DType::fp16, K, N);      // layout nn
//   //                   = tracea::TensorView::matrix(d_w, tracea::DType::fp16, N, K).t(); // layout nt
//   tracea::TensorView c = tracea::TensorView::matrix(d_c, tracea::DType::fp16, M, N);
//   tracea::GemmParams params;
//   params.stream = stream;
//   tracea::Status s = tracea::gemm(a, b, c, params);   // C = A.B on `stream`
//
// Views describe device memory in elements: a (rows x cols) matrix whose element (i, j) is at
// data + i * row_stride + j * col_stride. A and the output must be row-major (col_stride == 1); B may be row-major
// (layout nn) or the transpose of a row-major N x K matrix (layout nt, as torch.nn.Linear stores weights).
#ifndef TRACEA_HPP_V1
#define TRACEA_HPP_V1

#include "@RUNTIME@"

#include <cstddef>
#include <cstdint>
#include <limits>

namespace tracea {

enum class DType : int {
  fp32 = TRACEA_DTYPE_FP32,
  tf32 = TRACEA_DTYPE_TF32,  // fp32 storage, TF32 tensor-core math
  fp16 = TRACEA_DTYPE_FP16,
  bf16 = TRACEA_DTYPE_BF16,
  fp64 = TRACEA_DTYPE_FP64,
};

enum class Epilogue : int {
  none = TRACEA_EPILOGUE_NONE,
  bias = TRACEA_EPILOGUE_BIAS,
  bias_relu = TRACEA_EPILOGUE_BIAS_RELU,
  bias_silu = TRACEA_EPILOGUE_BIAS_SILU,
  bias_gelu = TRACEA_EPILOGUE_BIAS_GELU,
  bias_residual = TRACEA_EPILOGUE_BIAS_RESIDUAL,
};

enum class Status : int {
  ok = TRACEA_OK,
  driver_not_found = TRACEA_ERROR_DRIVER_NOT_FOUND,
  driver_too_old = TRACEA_ERROR_DRIVER_TOO_OLD,
  driver_error = TRACEA_ERROR_DRIVER,
  no_device = TRACEA_ERROR_NO_DEVICE,
  unsupported_arch = TRACEA_ERROR_UNSUPPORTED_ARCH,
  device_limits = TRACEA_ERROR_DEVICE_LIMITS,
  invalid_argument = TRACEA_ERROR_INVALID_ARGUMENT,
  misaligned = TRACEA_ERROR_MISALIGNED,
  unsupported_shape = TRACEA_ERROR_UNSUPPORTED_SHAPE,
  workspace = TRACEA_ERROR_WORKSPACE,
  not_exported = TRACEA_ERROR_NOT_EXPORTED,
};

inline const char* status_string(Status s) { return tracea_status_string(static_cast<tracea_status>(s)); }

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::fp32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_stride = 0;  // elements between rows
  int64_t col_stride = 1;  // elements between columns

  // A row-major rows x cols matrix with leading dimension `ld` (default: cols).
  static TensorView matrix(void* data, DType dtype, int64_t rows, int64_t cols, int64_t ld = 0) {
    TensorView v;
    v.data = data;
    v.dtype = dtype;
    v.rows = rows;
    v.cols = cols;
    v.row_stride = ld > 0 ? ld : cols;
    v.col_stride = 1;
    return v;
  }
  // The transpose, without copying.
  TensorView t() const {
    TensorView v = *this;
    v.rows = cols;
    v.cols = rows;
    v.row_stride = col_stride;
    v.col_stride = row_stride;
    return v;
  }
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

inline bool fits_int(int64_t v) { return v > 0 && v <= std::numeric_limits<int>::max(); }

// The export and C arguments for a call, or why there are none.
inline Status plan(const TensorView& a, const TensorView& b, const TensorView& out, const GemmParams& p,
                   const tracea_export** exp, tracea_gemm_args* args) {
  if (a.dtype != b.dtype || a.dtype != out.dtype || a.rows != out.rows || b.cols != out.cols || a.cols != b.rows ||
      a.col_stride != 1 || out.col_stride != 1 || !fits_int(a.rows) || !fits_int(b.cols) || !fits_int(a.cols) ||
      !fits_int(a.row_stride) || !fits_int(out.row_stride)) {
    return Status::invalid_argument;
  }
  const tracea_dtype dtype = static_cast<tracea_dtype>(a.dtype);
  const tracea_epilogue epilogue = static_cast<tracea_epilogue>(p.epilogue);
  const tracea_export* found = nullptr;
  int64_t ldb = 0;
  if (b.col_stride == 1 && (found = detail::find_export(dtype, TRACEA_LAYOUT_NN, epilogue)) != nullptr) {
    ldb = b.row_stride;  // B is K x N row-major
  } else if (b.row_stride == 1 && (found = detail::find_export(dtype, TRACEA_LAYOUT_NT, epilogue)) != nullptr) {
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
  Status s = detail::plan(a, b, out, params, &exp, &args);
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
  if (detail::plan(a, b, out, params, &exp, &args) != Status::ok) {
    return 0;
  }
  return tracea__workspace_bytes(exp, args.m, args.n, args.k);
}

}  // namespace tracea

#endif  // TRACEA_HPP_V1
