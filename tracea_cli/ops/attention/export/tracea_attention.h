/* tracea_attention.h: the attention part of Tracea's exported ABI (tracea @VERSION@), included by every attention
 * export's header. Generated; do not edit.
 *
 *   tracea_attention_args       one call's device pointers, sizes and strides (below)
 *   tracea__attention(e, a, s)  check the arguments, fill the runtime's slots, run the export `e` on stream `s`
 *   C++: tracea::attention(q, k, v, out, params), tracea::AttentionParams
 */
#ifndef TRACEA_ATTENTION_H_V1
#define TRACEA_ATTENTION_H_V1

#include "tracea_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

@LAYOUTS@

/* One attention forward: out = softmax(q.k^T / sqrt(head_dim) + mask).v, the mask causal (aligned bottom-right: query
 * row i sees keys j <= i + seq_k - seq) exactly when the export was made causal. Device pointers; sizes and strides in
 * elements. q and out are batch x heads x seq x head_dim, k and v batch x kv_heads x seq_k x head_dim, each with the
 * (batch, head, row) strides below and the head_dim axis contiguous (q and out share theirs, as k and v do); kv_heads divides heads
 * (query head h reads key/value head h / (heads / kv_heads)). An fa3 export (sm_90a) reads each tensor through one
 * 3-D TMA map over (head_dim, rows, batch x heads), so there the batch strides must be heads x q_sh and kv_heads x
 * kv_sh (the layout bhld packs them so; else TRACEA_ERROR_UNSUPPORTED_LAYOUT). lse: batch x heads x seq fp32,
 * contiguous, each row's natural-log log-sum-exp of its scaled scores, exactly when the export was made with lse
 * (else ignored). Pointers and row strides (and for fa3 the head and batch strides) must keep 16-byte alignment.
 * workspace: <prefix>_workspace_bytes(&args) bytes of device scratch
 * when that is not 0 (a split-KV export: the chunks' partial outputs), 16-byte aligned; else it may be NULL. */
typedef struct tracea_attention_args {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  float* lse;
  int batch, heads, seq, head_dim, kv_heads, seq_k;
  int q_sb, q_sh, q_sr;     /* strides of q and out: batch, head, row */
  int kv_sb, kv_sh, kv_sr;  /* of k and v */
  void* workspace;
  size_t workspace_bytes;
} tracea_attention_args;

/* The runtime's slots of an attention call (what launch tables name), and where its tensors and sizes live. */
@SLOTS@

/* TRACEA_OK when `a` is a well-formed call of the export `e` (its mask and lse), else the reason. */
static inline tracea_status tracea__attention_check(const tracea_export* e, const tracea_attention_args* a) {
  const int causal = e->fields[0], lse = e->fields[2];
  if (a == NULL || a->q == NULL || a->k == NULL || a->v == NULL || a->out == NULL || a->batch <= 0 || a->heads <= 0 ||
      a->seq <= 0 || a->head_dim <= 0 || a->kv_heads <= 0 || a->seq_k <= 0 || a->heads % a->kv_heads != 0 ||
      (lse && a->lse == NULL) || (causal && a->seq > a->seq_k) || a->batch > 65535 / a->heads ||
      a->q_sr < a->head_dim || a->kv_sr < a->head_dim) {
    return TRACEA_ERROR_INVALID_ARGUMENT;
  }
  return TRACEA_OK;
}

static inline void tracea__attention_fill(const tracea_attention_args* a, tracea_call* c) {
  memset(c, 0, sizeof(*c));
  c->pointers[TRACEA_ATTENTION_Q] = (CUdeviceptr)(uintptr_t)a->q;
  c->pointers[TRACEA_ATTENTION_K] = (CUdeviceptr)(uintptr_t)a->k;
  c->pointers[TRACEA_ATTENTION_V] = (CUdeviceptr)(uintptr_t)a->v;
  c->pointers[TRACEA_ATTENTION_OUT] = (CUdeviceptr)(uintptr_t)a->out;
  c->pointers[TRACEA_ATTENTION_LSE] = (CUdeviceptr)(uintptr_t)a->lse;
  c->pointers[TRACEA_ATTENTION_WORKSPACE] = (CUdeviceptr)(uintptr_t)a->workspace;
  c->workspace_bytes = a->workspace_bytes;
  c->ints[TRACEA_ATTENTION_BATCH] = a->batch;
  c->ints[TRACEA_ATTENTION_HEADS] = a->heads;
  c->ints[TRACEA_ATTENTION_SEQ] = a->seq;
  c->ints[TRACEA_ATTENTION_HEAD_DIM] = a->head_dim;
  c->ints[TRACEA_ATTENTION_KV_HEADS] = a->kv_heads;
  c->ints[TRACEA_ATTENTION_SEQ_K] = a->seq_k;
  c->ints[TRACEA_ATTENTION_BH] = a->batch * a->heads;
  c->ints[TRACEA_ATTENTION_Q_SB] = a->q_sb;
  c->ints[TRACEA_ATTENTION_Q_SH] = a->q_sh;
  c->ints[TRACEA_ATTENTION_Q_SR] = a->q_sr;
  c->ints[TRACEA_ATTENTION_KV_SB] = a->kv_sb;
  c->ints[TRACEA_ATTENTION_KV_SH] = a->kv_sh;
  c->ints[TRACEA_ATTENTION_KV_SR] = a->kv_sr;
  c->ints[TRACEA_ATTENTION_KV_BH] = a->batch * a->kv_heads;
}

/* Bytes of workspace a call with these sizes needs from export `e` (0: none; split-KV variants need kv_splits (D + 1)
 * floats per query row and batch x head). */
static inline size_t tracea__attention_workspace_bytes(const tracea_export* e, const tracea_attention_args* a) {
  tracea_call call;
  if (tracea__attention_check(e, a) != TRACEA_OK) {
    return 0;
  }
  tracea__attention_fill(a, &call);
  return tracea__workspace_bytes(e, call.ints, 0);
}

/* out = softmax(q.k^T / sqrt(D) + mask).v with export `e` on `stream`: the device is the stream's (for the default
 * stream, the calling thread's current context's, else device 0). Loads the binaries on first use. */
static inline tracea_status tracea__attention(const tracea_export* e, const tracea_attention_args* a, CUstream stream) {
  tracea_call call;
  tracea_status status = tracea__attention_check(e, a);
  if (status != TRACEA_OK) {
    return status;
  }
  tracea__attention_fill(a, &call);
  return tracea__run(e, &call, stream);
}

#ifdef __cplusplus
} /* extern "C" */

namespace tracea {

struct AttentionParams {
  CUstream stream = nullptr;  // the stream to launch on (its device is the one used)
  bool causal = false;        // the bottom-right aligned causal mask
  TensorView lse;             // batch x heads x seq fp32, contiguous; empty (no data): not written
  void* workspace = nullptr;  // attention_workspace_bytes(...) bytes of device memory when that is not 0 (split-KV)
  size_t workspace_bytes = 0;
};

namespace detail {

// A 4-D view of batch x heads x rows x head_dim with the last axis contiguous and strides that fit the kernel's ints.
inline bool attention_view(const TensorView& t, int64_t b, int64_t h, int64_t rows, int64_t d) {
  return t.ndim == 4 && t.dims[0] == b && t.dims[1] == h && t.dims[2] == rows && t.dims[3] == d &&
         t.strides[3] == 1 && fits_int(t.strides[0]) && fits_int(t.strides[1]) && fits_int(t.strides[2]);
}

// Which layout the strides of a (B, H, L, D) view show: (B, L, H, D) storage has the heads inside the rows.
inline int attention_layout(const TensorView& t) {
  return t.strides[1] < t.strides[2] ? TRACEA_ATTENTION_LAYOUT_BLHD : TRACEA_ATTENTION_LAYOUT_BHLD;
}

// The export and C arguments for a call, or why there are none. q and out are (B, H, L_q, D) views, k and v
// (B, H_kv, L_k, D) views, each in either layout (TensorView(ptr, {B, H, L, D}, dtype) for (B, H, L, D) storage, or
// explicit strides for (B, L, H, D) storage; all four in one layout, out with q's strides, v with k's).
inline Status attention_plan(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                             const AttentionParams& p, const tracea_export** exp, tracea_attention_args* args) {
  const int64_t b = q.dims[0], h = q.dims[1], lq = q.dims[2], d = q.dims[3], hkv = k.dims[1], lk = k.dims[2];
  const bool has_lse = p.lse.data != nullptr;
  if (q.ndim != 4 || k.ndim != 4 || q.dtype != k.dtype || q.dtype != v.dtype || q.dtype != out.dtype ||
      !attention_view(q, b, h, lq, d) || !attention_view(k, b, hkv, lk, d) || !attention_view(v, b, hkv, lk, d) ||
      !attention_view(out, b, h, lq, d) || k.strides[0] != v.strides[0] || k.strides[1] != v.strides[1] ||
      k.strides[2] != v.strides[2] || q.strides[0] != out.strides[0] || q.strides[1] != out.strides[1] ||
      q.strides[2] != out.strides[2] || !fits_int(b) || !fits_int(h) || !fits_int(lq) || !fits_int(lk) ||
      !fits_int(hkv) || h % hkv != 0 || (p.causal && lq > lk) ||
      (has_lse && (p.lse.dtype != DType::fp32 || p.lse.ndim != 3 || p.lse.dims[0] != b || p.lse.dims[1] != h ||
                   p.lse.dims[2] != lq || p.lse.strides[2] != 1 || p.lse.strides[1] != lq ||
                   p.lse.strides[0] != h * lq))) {
    return Status::invalid_argument;
  }
  const int layout = attention_layout(q);
  if (attention_layout(k) != layout) {
    return Status::invalid_argument;
  }
  const int fields[3] = {p.causal ? 1 : 0, layout, has_lse ? 1 : 0};
  const tracea_export* found = find_export("attention", static_cast<tracea_dtype>(q.dtype), fields, 3);
  if (found == nullptr) {
    return Status::not_exported;
  }
  *exp = found;
  args->q = q.data;
  args->k = k.data;
  args->v = v.data;
  args->out = out.data;
  args->lse = static_cast<float*>(p.lse.data);
  args->batch = static_cast<int>(b);
  args->heads = static_cast<int>(h);
  args->seq = static_cast<int>(lq);
  args->head_dim = static_cast<int>(d);
  args->kv_heads = static_cast<int>(hkv);
  args->seq_k = static_cast<int>(lk);
  args->q_sb = static_cast<int>(q.strides[0]), args->q_sh = static_cast<int>(q.strides[1]);
  args->q_sr = static_cast<int>(q.strides[2]);
  args->kv_sb = static_cast<int>(k.strides[0]), args->kv_sh = static_cast<int>(k.strides[1]);
  args->kv_sr = static_cast<int>(k.strides[2]);
  args->workspace = p.workspace;
  args->workspace_bytes = p.workspace_bytes;
  return Status::ok;
}

}  // namespace detail

// out = softmax(q . k^T / sqrt(D) + mask) . v on params.stream. Returns Status::ok once the work is queued.
inline Status attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                        const AttentionParams& params = AttentionParams()) {
  const tracea_export* exp = nullptr;
  tracea_attention_args args = {};
  Status s = detail::attention_plan(q, k, v, out, params, &exp, &args);
  if (s != Status::ok) {
    return s;
  }
  return static_cast<Status>(tracea__attention(exp, &args, params.stream));
}

// Bytes of device scratch params.workspace needs for this call (0: none, or not exported for these views).
inline size_t attention_workspace_bytes(const TensorView& q, const TensorView& k, const TensorView& v,
                                        const TensorView& out, const AttentionParams& params = AttentionParams()) {
  const tracea_export* exp = nullptr;
  tracea_attention_args args = {};
  if (detail::attention_plan(q, k, v, out, params, &exp, &args) != Status::ok) {
    return 0;
  }
  return tracea__attention_workspace_bytes(exp, &args);
}

}  // namespace tracea
#endif

#endif /* TRACEA_ATTENTION_H_V1 */
