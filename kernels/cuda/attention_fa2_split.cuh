// Split-KV ("flash-decoding") attention forward for sm_80+: the keys of each (batch, head) split into KV_SPLITS
// contiguous chunks, each chunk's partial softmax computed by its own block, and a second kernel combining the chunks
// (docs/attention.md, "Split-KV"). For few query rows (decode), where attention_fa2.cuh's grid of query blocks x
// batch·heads leaves most SMs idle and each block walks every key alone.
//
// fa2_split_forward: grid (query blocks, batch·heads, KV_SPLITS). Block (x, y, z) runs fa2_forward's main loop over the
//   key blocks [z·B / KV_SPLITS, (z + 1)·B / KV_SPLITS) of B = ceil(seq_k / BLOCK_N) (causal: only those its query
//   block sees) and writes, for each of its rows, fp32 into the workspace
//     O_z = Σ_j exp2(s_j - m) v_j / l      (D floats: the chunk's own softmax-weighted mean of V)
//     lse_z = m + log2 l                   (log2 domain; -inf where the chunk holds no visible key of the row)
// With PACK_GQA (grouped-query attention, G = heads / kv_heads > 1) the forward's grid is (ceil(G·seq_q / BLOCK_M),
//   batch·kv_heads, KV_SPLITS) instead: a block's rows are the G query heads of its K/V head times the seq_q query
//   rows (packed row r: head kv_head·G + r / seq_q, query row r % seq_q), so each K/V tile is loaded once per group,
//   not G times, and a decode step (seq_q = 1) fills G rows of a 16-row tile rather than one. Q is gathered row by
//   row, the causal mask reads each row's own query row, and each row goes to its own (batch·head, query row) slot
//   of the workspace: the combine is the same kernel either way.
// fa2_split_combine: grid (ceil(seq_q / COMBINE_WARPS), batch·heads), one warp per (batch·head, query row): with L = max_z lse_z and w_z = exp2(lse_z - L),
//     out = Σ_z w_z O_z / Σ_z w_z,  lse = (L + log2 Σ_z w_z)·ln 2
//   rounded to the op's dtype; a chunk with lse_z = -inf weighs 0 and its O_z is not read.
//
// Workspace (fp32, KV_SPLITS·(D + 1) floats per (query row, batch·head), the launch plan's workspace_bytes_per_mn):
//   O     [KV_SPLITS][batch·heads][seq_q][D]
//   lse   [KV_SPLITS][batch·heads][seq_q]           after O
// Every block writes all of its rows (an empty chunk: O = 0, lse = -inf), so the workspace needs no zeroing and the
// combine no atomics: two launches, no memset.
//
// The main loop repeats fa2_forward's (attention_fa2.cuh) with a key range and an fp32 epilogue. It is kept apart so
// that attention_fa2.cuh's text, hashed into the cache key of every attention problem, stays as it was; the next
// change that alters every key anyway should make fa2_forward the KV_SPLITS = 1 case of this one.
#pragma once

#include "attention_fa2.cuh"

// the FA2 kernel's parameters and the workspace (batch·heads is gridDim.y of the combine, and of the forward without
// PACK_GQA)
#define TRACEA_ATTENTION_SPLIT_PARAMS TRACEA_ATTENTION_PARAMS, float *__restrict__ workspace

namespace tracea {

template <class F, int KV_SPLITS_> struct Fa2Split {
  static constexpr int KV_SPLITS = KV_SPLITS_;
  static constexpr int COMBINE_WARPS = 4;  // rows per combine block
  static constexpr int COMBINE_THREADS = COMBINE_WARPS * 32;
  static constexpr int COLS = F::D / 32;  // output columns per lane of the combine
  static_assert(KV_SPLITS >= 2, "one chunk is attention_fa2.cuh's kernel");
  static_assert(F::D % 32 == 0, "whole columns per lane");
};

// Copies `rows` rows of D elements, row r from `row_address(r)`, into shared rows of F::LD; rows past `valid_rows`
// are zero-filled (copy_rows with a row address per row: packed GQA rows belong to different heads).
template <class F, class RowAddress>
__device__ __forceinline__ void gather_rows(typename F::T *dst, RowAddress row_address, int rows, int valid_rows) {
  constexpr int CHUNKS = F::D / F::VEC;
  for (int i = threadIdx.x; i < rows * CHUNKS; i += F::THREADS) {
    const int r = i / CHUNKS, c = (i % CHUNKS) * F::VEC;
    const bool valid = r < valid_rows;
    const typename F::T *from = valid ? row_address(r) + c : row_address(0);
    cp_async<16>(smem_address(dst + r * F::LD + c), from, valid);
  }
}

template <class F, int KV_SPLITS, bool PACK_GQA = false>
__device__ void fa2_split_forward(const AttentionArgs &args, float *workspace) {
  using T = typename F::T;
#ifdef TRACEA_HOST_EMULATION
  T *smem = reinterpret_cast<T *>(smem_raw);
#else
  extern __shared__ __align__(128) unsigned char smem_bytes[];
  T *smem = reinterpret_cast<T *>(smem_bytes);
#endif
  const float neg_inf = __uint_as_float(0xff800000u);
  T *sq = smem;
  T *sk = sq + F::Q_ELEMS;
  T *sv = sk + F::STAGES * F::KV_ELEMS;

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int blocks_m = static_cast<int>(gridDim.x);
  const int block_m = F::CAUSAL ? blocks_m - 1 - static_cast<int>(blockIdx.x) : static_cast<int>(blockIdx.x);
  const int split = static_cast<int>(blockIdx.z);
  const int group = args.heads / args.kv_heads;
  // grid y: batch·heads + head, or with PACK_GQA batch·kv_heads + kv_head; head0 is the head of the block's row 0
  const int by = static_cast<int>(blockIdx.y);
  const int batch = by / (PACK_GQA ? args.kv_heads : args.heads);
  const int head0 = PACK_GQA ? (by % args.kv_heads) * group : by % args.heads;
  const int kv_head = head0 / group;
  const int bhs = static_cast<int>(gridDim.y) * (PACK_GQA ? group : 1);  // batch·heads
  const int rows_total = PACK_GQA ? group * args.seq_q : args.seq_q;      // the block rows' space, tiled by BLOCK_M
  // packed row r: head head0 + r / seq_q, query row r % seq_q (unpacked: head0 and r)
  auto head_of = [&](int r) { return PACK_GQA ? head0 + r / args.seq_q : head0; };
  auto query_row = [&](int r) { return PACK_GQA ? r % args.seq_q : r; };
  const int m0 = block_m * F::BLOCK_M;
  const int offset = args.seq_k - args.seq_q;
  // the block's lowest and highest query rows (causal bounds): a packed block over two heads or more holds row
  // seq_q - 1 of one and row 0 of the next
  const int m_last = PACK_GQA ? min(m0 + F::BLOCK_M, rows_total) - 1 : m0 + F::BLOCK_M - 1;
  const bool spans_heads = PACK_GQA && head_of(m0) != head_of(m_last);
  const int q_lo = spans_heads ? 0 : query_row(m0), q_hi = spans_heads ? args.seq_q - 1 : query_row(m_last);

  const T *gq = static_cast<const T *>(args.q) + batch * (long long)args.q_sb;
  const long long kv_base = batch * (long long)args.kv_sb + kv_head * (long long)args.kv_sh;
  const T *gk = static_cast<const T *>(args.k) + kv_base;
  const T *gv = static_cast<const T *>(args.v) + kv_base;

  // This chunk's key blocks: an even share of all of them, cut where the causal query block stops seeing keys.
  const int all_blocks = (args.seq_k + F::BLOCK_N - 1) / F::BLOCK_N;
  const int keys = F::CAUSAL ? min(args.seq_k, q_hi + 1 + offset) : args.seq_k;
  const int seen_blocks = keys > 0 ? (keys + F::BLOCK_N - 1) / F::BLOCK_N : 0;
  const int j_begin = static_cast<int>((long long)split * all_blocks / KV_SPLITS);
  const int j_end = min(seen_blocks, static_cast<int>((long long)(split + 1) * all_blocks / KV_SPLITS));

  auto load_kv = [&](int j) {
    if (j < j_end) {
      const int n0 = j * F::BLOCK_N, stage = (j - j_begin) % F::STAGES;
      copy_rows<F>(sk + stage * F::KV_ELEMS, gk + n0 * (long long)args.kv_sr, args.kv_sr, F::BLOCK_N,
                   args.seq_k - n0);
      copy_rows<F>(sv + stage * F::KV_ELEMS, gv + n0 * (long long)args.kv_sr, args.kv_sr, F::BLOCK_N,
                   args.seq_k - n0);
    }
    cp_async_commit();
  };

  // ---- prologue: Q and the chunk's first STAGES - 1 key/value blocks ------------------------------------------------
  gather_rows<F>(
      sq,
      [&](int r) { return gq + head_of(m0 + r) * (long long)args.q_sh + query_row(m0 + r) * (long long)args.q_sr; },
      F::BLOCK_M, rows_total - m0);
  cp_async_commit();
  for (int j = 0; j < F::STAGES - 1; ++j) load_kv(j_begin + j);
  cp_async_wait<F::STAGES - 1>();
  __syncthreads();

  const int wm0 = warp * F::WARP_ROWS;
  unsigned qf[F::TILES_M][F::D / 16][4];
  for (int i = 0; i < F::TILES_M; ++i)
    for (int kk = 0; kk < F::D / 16; ++kk)
      ldmatrix_x4(qf[i][kk], smem_address(sq + (wm0 + i * 16 + lane % 16) * F::LD + kk * 16 + (lane / 16) * 8));

  float o[F::TILES_M][F::TILES_D][4];
  float row_max[F::TILES_M][2], row_sum[F::TILES_M][2];
  for (int i = 0; i < F::TILES_M; ++i) {
    for (int d = 0; d < F::TILES_D; ++d)
      for (int e = 0; e < 4; ++e) o[i][d][e] = 0.f;
    for (int h = 0; h < 2; ++h) row_max[i][h] = neg_inf, row_sum[i][h] = 0.f;
  }
  const float scale_log2 = 1.4426950408889634f / sqrtf(float(F::D));

  // ---- main loop over the chunk's key blocks (as fa2_forward's) -----------------------------------------------------
  for (int j = j_begin; j < j_end; ++j) {
    cp_async_wait<F::STAGES - 2>();
    __syncthreads();
    load_kv(j + F::STAGES - 1);
    const T *kt = sk + ((j - j_begin) % F::STAGES) * F::KV_ELEMS;
    const T *vt = sv + ((j - j_begin) % F::STAGES) * F::KV_ELEMS;
    const int n0 = j * F::BLOCK_N;

    float s[F::TILES_M][F::TILES_N][4];
    for (int i = 0; i < F::TILES_M; ++i)
      for (int n = 0; n < F::TILES_N; ++n)
        for (int e = 0; e < 4; ++e) s[i][n][e] = 0.f;
    for (int kk = 0; kk < F::D / 16; ++kk) {
      for (int n = 0; n < F::TILES_N; n += 2) {
        unsigned r[4];
        ldmatrix_x4(r, smem_address(kt + (n * 8 + lane % 8 + (lane / 16) * 8) * F::LD + kk * 16 +
                                    ((lane / 8) % 2) * 8));
        const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
        for (int i = 0; i < F::TILES_M; ++i) {
          mma_16x8<T>(s[i][n], qf[i][kk], b0);
          mma_16x8<T>(s[i][n + 1], qf[i][kk], b1);
        }
      }
    }

    const bool masked = n0 + F::BLOCK_N > args.seq_k || (F::CAUSAL && n0 + F::BLOCK_N - 1 > q_lo + offset);
    for (int i = 0; i < F::TILES_M; ++i)
      for (int n = 0; n < F::TILES_N; ++n)
        for (int e = 0; e < 4; ++e) {
          float x = s[i][n][e] * scale_log2;
          if (masked) {
            const int row = query_row(m0 + wm0 + i * 16 + g + 8 * (e / 2)), col = n0 + n * 8 + 2 * t + e % 2;
            if (col >= args.seq_k || (F::CAUSAL && col > row + offset)) x = neg_inf;
          }
          s[i][n][e] = x;
        }

    for (int i = 0; i < F::TILES_M; ++i)
      for (int h = 0; h < 2; ++h) {
        float mx = row_max[i][h];
        for (int n = 0; n < F::TILES_N; ++n) mx = fmaxf(mx, fmaxf(s[i][n][2 * h], s[i][n][2 * h + 1]));
        mx = quad_max(mx);
        const float base = mx == neg_inf ? 0.f : mx;
        const float correction = exp2f(row_max[i][h] - base);
        row_max[i][h] = mx;
        float sum = 0.f;
        for (int n = 0; n < F::TILES_N; ++n)
          for (int e = 2 * h; e < 2 * h + 2; ++e) {
            const float p = exp2f(s[i][n][e] - base);
            s[i][n][e] = p;
            sum += p;
          }
        row_sum[i][h] = row_sum[i][h] * correction + sum;
        for (int d = 0; d < F::TILES_D; ++d) {
          o[i][d][2 * h] *= correction;
          o[i][d][2 * h + 1] *= correction;
        }
      }

    for (int kc = 0; kc < F::BLOCK_N / 16; ++kc) {
      unsigned pa[F::TILES_M][4];
      for (int i = 0; i < F::TILES_M; ++i) {
        pa[i][0] = pack_pair<T>(s[i][2 * kc][0], s[i][2 * kc][1]);
        pa[i][1] = pack_pair<T>(s[i][2 * kc][2], s[i][2 * kc][3]);
        pa[i][2] = pack_pair<T>(s[i][2 * kc + 1][0], s[i][2 * kc + 1][1]);
        pa[i][3] = pack_pair<T>(s[i][2 * kc + 1][2], s[i][2 * kc + 1][3]);
      }
      for (int d = 0; d < F::TILES_D; d += 2) {
        unsigned r[4];
        ldmatrix_x4_trans(r, smem_address(vt + (kc * 16 + lane % 16) * F::LD + d * 8 + (lane / 16) * 8));
        const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
        for (int i = 0; i < F::TILES_M; ++i) {
          mma_16x8<T>(o[i][d], pa[i], b0);
          mma_16x8<T>(o[i][d + 1], pa[i], b1);
        }
      }
    }
  }
  cp_async_wait<0>();

  // ---- epilogue: O / l and m + log2 l of each row, fp32, straight from the fragments into the workspace ------------
  // each row at its own (batch·head, query row) slot of the chunk's slice
  const long long rows = (long long)bhs * args.seq_q;  // rows of one chunk's slice
  float *wo = workspace + (long long)split * rows * F::D;
  float *wl = workspace + KV_SPLITS * rows * F::D + (long long)split * rows;
  for (int i = 0; i < F::TILES_M; ++i)
    for (int h = 0; h < 2; ++h) {
      const float total = quad_sum(row_sum[i][h]);
      const float inv = total > 0.f ? 1.f / total : 0.f;
      const int r = m0 + wm0 + i * 16 + g + 8 * h;
      if (r >= rows_total) continue;
      const long long slot = ((long long)batch * args.heads + head_of(r)) * args.seq_q + query_row(r);
      for (int d = 0; d < F::TILES_D; ++d) {
        float2 pair;
        pair.x = o[i][d][2 * h] * inv;
        pair.y = o[i][d][2 * h + 1] * inv;
        *reinterpret_cast<float2 *>(wo + slot * F::D + d * 8 + 2 * t) = pair;
      }
      if (t == 0) wl[slot] = total > 0.f ? row_max[i][h] + log2f(total) : neg_inf;
    }
}

// One warp per (batch·head, query row), COLS contiguous columns per lane; grid (ceil(seq_q / COMBINE_WARPS),
// batch·heads).
template <class F, int KV_SPLITS> __device__ void fa2_split_combine(const AttentionArgs &args, const float *workspace) {
  using T = typename F::T;
  using S = Fa2Split<F, KV_SPLITS>;
  const float neg_inf = __uint_as_float(0xff800000u);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int row = static_cast<int>(blockIdx.x) * S::COMBINE_WARPS + warp, bh = static_cast<int>(blockIdx.y);
  if (row >= args.seq_q) return;
  const long long rows = (long long)gridDim.y * args.seq_q;
  const long long r = (long long)bh * args.seq_q + row;  // this row of every chunk's slice, and of lse
  const int batch = bh / args.heads, head = bh % args.heads;
  const float *wl = workspace + KV_SPLITS * rows * F::D + r;

  float top = neg_inf;  // every lane reads the chunks' lse (KV_SPLITS floats, one line per row of chunks)
  // not unrolled: unrolled, ptxas (13.0, sm_80, head dim 256 with lse) spills 8 bytes at 40 registers
#pragma unroll 1
  for (int z = 0; z < KV_SPLITS; ++z) top = fmaxf(top, wl[z * rows]);
  const float base = top == neg_inf ? 0.f : top;
  float acc[S::COLS];
#pragma unroll
  for (int c = 0; c < S::COLS; ++c) acc[c] = 0.f;
  float weight_sum = 0.f;
  for (int z = 0; z < KV_SPLITS; ++z) {
    const float lz = wl[z * rows];
    if (lz == neg_inf) continue;  // a chunk without a visible key of this row
    const float w = exp2f(lz - base);
    weight_sum += w;
    const float *oz = workspace + (z * rows + r) * F::D + lane * S::COLS;
#pragma unroll
    for (int c = 0; c < S::COLS; c += 2) {
      const float2 pair = *reinterpret_cast<const float2 *>(oz + c);
      acc[c] += w * pair.x;
      acc[c + 1] += w * pair.y;
    }
  }
  const float inv = weight_sum > 0.f ? 1.f / weight_sum : 0.f;
  T *go = static_cast<T *>(args.out) + batch * (long long)args.q_sb + head * (long long)args.q_sh +
          row * (long long)args.q_sr + lane * S::COLS;
#pragma unroll
  for (int c = 0; c < S::COLS; c += 2)
    *reinterpret_cast<unsigned *>(go + c) = pack_pair<T>(acc[c] * inv, acc[c + 1] * inv);
  if (F::LSE && lane == 0) args.lse[r] = (top + log2f(weight_sum)) * 0.6931471805599453f;
}

}  // namespace tracea
