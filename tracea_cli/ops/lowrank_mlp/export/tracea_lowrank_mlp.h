/* tracea_lowrank_mlp.h: the lowrank-mlp part of Tracea's exported ABI (tracea @VERSION@), included by every
 * lowrank-mlp export's header. Generated; do not edit.
 *
 *   tracea_lowrank_mlp_args       one call's device pointers and sizes (below)
 *   tracea__lowrank_mlp(e, a, s)  check the arguments, fill the runtime's slots, run the export `e` on stream `s`
 *   C++: tracea::lowrank_mlp(x, u, v, bias, out, params), tracea::lowrank_mlp_workspace_bytes(...),
 *        tracea::LowrankMlpParams, tracea::LowrankAct, tracea::LowrankIntermediate
 */
#ifndef TRACEA_LOWRANK_MLP_H_V1
#define TRACEA_LOWRANK_MLP_H_V1

#include "tracea_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

@ENUMS@

/* One low-rank MLP layer: y = act(x.U.V + bias) + residual. Device pointers; sizes in elements; every tensor dense and
 * row-major. x is M x d_in; U is d_in x rank (layout nn) or rank x d_in (nt, as torch.nn.Linear stores it); V is
 * rank x d_out (nn) or d_out x rank (nt); bias has d_out elements and residual is M x d_out (each exactly when the
 * export was made with it); y is M x d_out. workspace: <prefix>_workspace_bytes(M, d_in, rank, d_out) bytes when that
 * is not 0 (the two-GEMM kernels keep T there), aligned to 256 bytes (cuMemAlloc's are). */
typedef struct tracea_lowrank_mlp_args {
  const void* x;
  const void* u;
  const void* v;
  const void* bias;
  const void* residual;
  void* y;
  void* workspace;
  size_t workspace_bytes;
  int m, d_in, rank, d_out;
} tracea_lowrank_mlp_args;

/* The runtime's slots of a lowrank-mlp call (what launch tables name), and where its tensors and sizes live. */
@SLOTS@

/* TRACEA_OK when `a` is a well-formed call of the export `e` (its bias and residual), else the reason. */
static inline tracea_status tracea__lowrank_mlp_check(const tracea_export* e, const tracea_lowrank_mlp_args* a) {
  const int bias = e->fields[1], residual = e->fields[2];
  if (a == NULL || a->x == NULL || a->u == NULL || a->v == NULL || a->y == NULL || a->m <= 0 || a->d_in <= 0 ||
      a->rank <= 0 || a->d_out <= 0 || a->rank > a->d_in || a->rank > a->d_out || (bias && a->bias == NULL) ||
      (residual && a->residual == NULL)) {
    return TRACEA_ERROR_INVALID_ARGUMENT;
  }
  return TRACEA_OK;
}

static inline void tracea__lowrank_mlp_fill(const tracea_lowrank_mlp_args* a, tracea_call* c) {
  memset(c, 0, sizeof(*c));
  c->pointers[TRACEA_LOWRANK_MLP_X] = (CUdeviceptr)(uintptr_t)a->x;
  c->pointers[TRACEA_LOWRANK_MLP_U] = (CUdeviceptr)(uintptr_t)a->u;
  c->pointers[TRACEA_LOWRANK_MLP_V] = (CUdeviceptr)(uintptr_t)a->v;
  c->pointers[TRACEA_LOWRANK_MLP_BIAS] = (CUdeviceptr)(uintptr_t)a->bias;
  c->pointers[TRACEA_LOWRANK_MLP_RESIDUAL] = (CUdeviceptr)(uintptr_t)a->residual;
  c->pointers[TRACEA_LOWRANK_MLP_Y] = (CUdeviceptr)(uintptr_t)a->y;
  c->pointers[TRACEA_LOWRANK_MLP_WORKSPACE] = (CUdeviceptr)(uintptr_t)a->workspace;
  c->workspace_bytes = a->workspace_bytes;
  c->ints[TRACEA_LOWRANK_MLP_M] = a->m;
  c->ints[TRACEA_LOWRANK_MLP_K] = a->d_in;
  c->ints[TRACEA_LOWRANK_MLP_R] = a->rank;
  c->ints[TRACEA_LOWRANK_MLP_N] = a->d_out;
}

/* y = act(x.U.V + bias) + residual with export `e` on `stream`: the device is the stream's (for the default stream,
 * the calling thread's current context's, else device 0). Loads the binaries on first use. */
static inline tracea_status tracea__lowrank_mlp(const tracea_export* e, const tracea_lowrank_mlp_args* a,
                                                CUstream stream) {
  tracea_call call;
  tracea_status status = tracea__lowrank_mlp_check(e, a);
  if (status != TRACEA_OK) {
    return status;
  }
  tracea__lowrank_mlp_fill(a, &call);
  return tracea__run(e, &call, stream);
}

/* Bytes of scratch an (M, d_in, rank, d_out) call of export `e` needs (0: none). */
static inline size_t tracea__lowrank_mlp_workspace_bytes(const tracea_export* e, int m, int d_in, int rank, int d_out) {
  int ints[TRACEA_MAX_INTS] = {0};
  if (m <= 0 || d_in <= 0 || rank <= 0 || d_out <= 0) {
    return 0;
  }
  ints[TRACEA_LOWRANK_MLP_M] = m;
  ints[TRACEA_LOWRANK_MLP_K] = d_in;
  ints[TRACEA_LOWRANK_MLP_R] = rank;
  ints[TRACEA_LOWRANK_MLP_N] = d_out;
  return tracea__workspace_bytes(e, ints, 0);
}

#ifdef __cplusplus
} /* extern "C" */

namespace tracea {

enum class LowrankAct : int {
@CPP_ACTS@
};

enum class LowrankIntermediate : int {
@CPP_INTERMEDIATES@
};

struct LowrankMlpParams {
  CUstream stream = nullptr;          // the stream to launch on (its device is the one used)
  LowrankAct act = LowrankAct::none;  // after the bias
  TensorView residual;                // M x d_out, added after the activation; empty (no data): none
  LowrankIntermediate intermediate = LowrankIntermediate::dtype;  // T kept in fp32 or rounded to the dtype
  void* workspace = nullptr;          // lowrank_mlp_workspace_bytes(...) bytes of device memory when that is not 0
  size_t workspace_bytes = 0;
};

namespace detail {

// A dense row-major rows x cols view: the only kind the lowrank-mlp kernels read.
inline bool dense(const TensorView& t, int64_t rows, int64_t cols) {
  return t.rows == rows && t.cols == cols && t.col_stride == 1 && t.row_stride == cols;
}

// The export and C arguments for a call, or why there are none. x is M x d_in, u the d_in x rank operand, v the
// rank x d_out operand, bias d_out elements (empty: none), out M x d_out. u and v are either both row-major (layout nn)
// or both transposed views of row-major storage (nt: torch.nn.Linear weights, TensorView(...).t()).
inline Status lowrank_mlp_plan(const TensorView& x, const TensorView& u, const TensorView& v, const TensorView& bias,
                               const TensorView& out, const LowrankMlpParams& p, const tracea_export** exp,
                               tracea_lowrank_mlp_args* args) {
  const int64_t m = x.rows, d_in = x.cols, rank = u.cols, d_out = v.cols;
  const bool has_bias = bias.data != nullptr, has_residual = p.residual.data != nullptr;
  const bool nn = dense(u, d_in, rank) && dense(v, rank, d_out);
  const bool nt = dense(u.t(), rank, d_in) && dense(v.t(), d_out, rank);
  if (x.dtype != u.dtype || x.dtype != v.dtype || x.dtype != out.dtype || !dense(x, m, d_in) ||
      !dense(out, m, d_out) || u.rows != d_in || v.rows != rank || (!nn && !nt) ||
      (has_bias && (bias.dtype != x.dtype || bias.rows * bias.cols != d_out || bias.col_stride != 1)) ||
      (has_residual && (p.residual.dtype != x.dtype || !dense(p.residual, m, d_out))) || !fits_int(m) ||
      !fits_int(d_in) || !fits_int(rank) || !fits_int(d_out) || rank > d_in || rank > d_out) {
    return Status::invalid_argument;
  }
  const int fields[5] = {static_cast<int>(p.act), has_bias ? 1 : 0, has_residual ? 1 : 0,
                         nn ? TRACEA_LOWRANK_LAYOUT_NN : TRACEA_LOWRANK_LAYOUT_NT, static_cast<int>(p.intermediate)};
  const tracea_export* found = find_export("lowrank_mlp", static_cast<tracea_dtype>(x.dtype), fields, 5);
  if (found == nullptr && (x.dtype == DType::fp32 || x.dtype == DType::fp64)) {  // fp32 problems say "dtype" only
    const int either[5] = {fields[0], fields[1], fields[2], fields[3], TRACEA_LOWRANK_INTERMEDIATE_DTYPE};
    found = find_export("lowrank_mlp", static_cast<tracea_dtype>(x.dtype), either, 5);
  }
  if (found == nullptr) {
    return Status::not_exported;
  }
  *exp = found;
  args->x = x.data;
  args->u = u.data;
  args->v = v.data;
  args->bias = bias.data;
  args->residual = p.residual.data;
  args->y = out.data;
  args->workspace = p.workspace;
  args->workspace_bytes = p.workspace_bytes;
  args->m = static_cast<int>(m);
  args->d_in = static_cast<int>(d_in);
  args->rank = static_cast<int>(rank);
  args->d_out = static_cast<int>(d_out);
  return Status::ok;
}

}  // namespace detail

// out = act(x . u . v + bias) + params.residual on params.stream. Returns Status::ok once the work is queued.
inline Status lowrank_mlp(const TensorView& x, const TensorView& u, const TensorView& v, const TensorView& bias,
                          const TensorView& out, const LowrankMlpParams& params = LowrankMlpParams()) {
  const tracea_export* exp = nullptr;
  tracea_lowrank_mlp_args args = {};
  Status s = detail::lowrank_mlp_plan(x, u, v, bias, out, params, &exp, &args);
  if (s != Status::ok) {
    return s;
  }
  return static_cast<Status>(tracea__lowrank_mlp(exp, &args, params.stream));
}

// Bytes of device scratch params.workspace needs for this call (0: none).
inline size_t lowrank_mlp_workspace_bytes(const TensorView& x, const TensorView& u, const TensorView& v,
                                          const TensorView& bias, const TensorView& out,
                                          const LowrankMlpParams& params = LowrankMlpParams()) {
  const tracea_export* exp = nullptr;
  tracea_lowrank_mlp_args args = {};
  if (detail::lowrank_mlp_plan(x, u, v, bias, out, params, &exp, &args) != Status::ok) {
    return 0;
  }
  return tracea__lowrank_mlp_workspace_bytes(exp, args.m, args.d_in, args.rank, args.d_out);
}

}  // namespace tracea
#endif

#endif /* TRACEA_LOWRANK_MLP_H_V1 */
