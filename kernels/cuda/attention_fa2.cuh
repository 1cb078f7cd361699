// FlashAttention-2-style attention forward for sm_80+: out = softmax(Q·Kᵀ·scale + mask)·V, fp16/bf16 in, fp32
// accumulation and softmax statistics (docs/attention.md).
//
// The kernel ABI: q, out are (batch, heads, seq_q, D) and k, v (batch, kv_heads, seq_k, D) with any (batch, head, row)
// element strides (the last axis contiguous; out has q's, v has k's): the layouts (B, H, L, D) and (B, L, H, D) are
// two sets of strides.
// Query head h reads key/value head h / (heads / kv_heads) (grouped-query attention). `lse` (fp32, batch x heads x
// seq_q, contiguous) receives each row's natural-log log-sum-exp of its scaled scores when the kernel is built with
// LSE. With CAUSAL the mask is aligned bottom-right: query row i sees keys j <= i + (seq_k - seq_q).
//
// A block owns BLOCK_M query rows of one (batch, head): blockIdx.x the query block, blockIdx.y batch·heads + head.
// Each of its WARPS warps owns BLOCK_M / WARPS rows (TILES_M tiles of 16), whose Q fragments it keeps in registers.
//   prologue   Q (BLOCK_M x D) and the first STAGES - 1 key/value blocks start copying (cp.async, zero-filled past
//              the ends); Q goes from shared memory to registers (ldmatrix)
//   main loop  for each BLOCK_N-wide block of keys the block needs (causal: none past the last row's diagonal):
//                wait for its K and V, start copying the block STAGES - 1 ahead into the buffer just freed
//                S = Q·Kᵀ (mma.sync m16n8k16, K fragments by ldmatrix), in the log2 domain: S · scale·log2(e)
//                masked where the block crosses the diagonal or the end of the keys (-inf)
//                online softmax: m = max(m, rowmax S), P = exp2(S - m), O and l rescaled by exp2(m_old - m)
//                O += P·V, P rounded to the input type and used straight from the S registers as the A operand,
//                V fragments by ldmatrix .trans
//   epilogue   O / l through shared memory (the warp's own Q rows) to 16-byte stores; lse = (m + log2 l)·ln 2
//
// Shared rows are padded by 8 elements (16 bytes): the eight row addresses of an ldmatrix then fall on distinct banks.
// The block order along x is reversed for CAUSAL, so the query blocks with the most keys start first.
#pragma once

#include "gemm_common.cuh"

#ifdef TRACEA_HOST_EMULATION
#include <attention_emulation.h>
#endif

#define TRACEA_ATTENTION_PARAMS                                                                                  \
  const void *__restrict__ q, const void *__restrict__ k, const void *__restrict__ v, void *__restrict__ out,  \
      float *__restrict__ lse, int seq_q, int seq_k, int heads, int kv_heads, int q_sb, int q_sh, int q_sr,     \
      int kv_sb, int kv_sh, int kv_sr
#define TRACEA_ATTENTION_ARGS                                                                                   \
  tracea::AttentionArgs{q, k, v, out, lse, seq_q, seq_k, heads, kv_heads, q_sb, q_sh, q_sr, kv_sb, kv_sh, kv_sr}

namespace tracea {

struct AttentionArgs {
  const void *q;
  const void *k;
  const void *v;
  void *out;
  float *lse;
  int seq_q, seq_k, heads, kv_heads;
  int q_sb, q_sh, q_sr;     // element strides of q and out: batch, head, row
  int kv_sb, kv_sh, kv_sr;  // of k and v
};

#ifndef TRACEA_HOST_EMULATION
__device__ __forceinline__ float quad_xor(float x, int mask) { return __shfl_xor_sync(0xffffffffu, x, mask); }
#endif

// The four lanes of a quad (lane / 4 the same) hold one fragment row between them.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, quad_xor(x, 1));
  return fmaxf(x, quad_xor(x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += quad_xor(x, 1);
  return x + quad_xor(x, 2);
}

// Two floats rounded to T, the lower index in the low half (an mma.sync operand register).
template <class T> __device__ __forceinline__ unsigned pack_pair(float lo, float hi) {
  const T a = Element<T>::narrow(lo), b = Element<T>::narrow(hi);
  return unsigned(*reinterpret_cast<const unsigned short *>(&a)) |
         (unsigned(*reinterpret_cast<const unsigned short *>(&b)) << 16);
}

struct alignas(16) Chunk16 {  // one 16-byte copy
  unsigned w[4];
};

template <class T_, int HEAD_DIM_, int BLOCK_M_, int BLOCK_N_, int WARPS_, int STAGES_, bool CAUSAL_, bool LSE_>
struct Fa2 {
  using T = T_;
  static constexpr int D = HEAD_DIM_, BLOCK_M = BLOCK_M_, BLOCK_N = BLOCK_N_, WARPS = WARPS_, STAGES = STAGES_;
  static constexpr bool CAUSAL = CAUSAL_, LSE = LSE_;
  static constexpr int THREADS = WARPS * 32;
  static constexpr int WARP_ROWS = BLOCK_M / WARPS, TILES_M = WARP_ROWS / 16;
  static constexpr int TILES_N = BLOCK_N / 8;  // 8-key tiles of S
  static constexpr int TILES_D = D / 8;        // 8-column tiles of O
  static constexpr int PAD = 8, LD = D + PAD;  // shared row length, in elements
  static constexpr int VEC = 16 / int(sizeof(T));  // elements of one 16-byte copy
  static constexpr int Q_ELEMS = BLOCK_M * LD, KV_ELEMS = BLOCK_N * LD;
  // Q, then STAGES buffers of K, then STAGES of V
  static constexpr int SMEM_BYTES = (Q_ELEMS + 2 * STAGES * KV_ELEMS) * int(sizeof(T));

  static_assert(sizeof(T) == 2, "the FA2 kernel runs fp16 and bf16");
  static_assert(WARP_ROWS % 16 == 0 && BLOCK_M % WARPS == 0, "a warp owns whole 16-row tiles");
  static_assert(BLOCK_N % 16 == 0 && D % 16 == 0, "whole m16n8k16 steps along the keys and the head dim");
  static_assert(STAGES >= 2, "two stages at least");
};

// Copies `rows` rows of D elements (row stride `ld_global`) into shared rows of F::LD; rows past `valid_rows` are
// zero-filled.
template <class F>
__device__ __forceinline__ void copy_rows(typename F::T *dst, const typename F::T *src, long long ld_global, int rows,
                                          int valid_rows) {
  constexpr int CHUNKS = F::D / F::VEC;
  for (int i = threadIdx.x; i < rows * CHUNKS; i += F::THREADS) {
    const int r = i / CHUNKS, c = (i % CHUNKS) * F::VEC;
    const bool valid = r < valid_rows;
    const typename F::T *from = valid ? src + r * ld_global + c : src;
    cp_async<16>(smem_address(dst + r * F::LD + c), from, valid);
  }
}

template <class F> __device__ void fa2_forward(const AttentionArgs &args) {
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
  const int g = lane / 4, t = lane % 4;  // fragment row group and column pair
  const int blocks_m = static_cast<int>(gridDim.x);
  const int block_m = F::CAUSAL ? blocks_m - 1 - static_cast<int>(blockIdx.x) : static_cast<int>(blockIdx.x);
  const int bh = static_cast<int>(blockIdx.y);
  const int batch = bh / args.heads, head = bh % args.heads;
  const int kv_head = head / (args.heads / args.kv_heads);
  const int m0 = block_m * F::BLOCK_M;
  const int offset = args.seq_k - args.seq_q;  // causal: row i sees keys j <= i + offset

  const T *gq = static_cast<const T *>(args.q) + batch * (long long)args.q_sb + head * (long long)args.q_sh +
                m0 * (long long)args.q_sr;
  const long long kv_base = batch * (long long)args.kv_sb + kv_head * (long long)args.kv_sh;
  const T *gk = static_cast<const T *>(args.k) + kv_base;
  const T *gv = static_cast<const T *>(args.v) + kv_base;

  // Key blocks this query block needs: causal stops after the block holding its last row's last key.
  const int keys = F::CAUSAL ? min(args.seq_k, m0 + F::BLOCK_M + offset) : args.seq_k;
  const int blocks_n = keys > 0 ? (keys + F::BLOCK_N - 1) / F::BLOCK_N : 0;

  auto load_kv = [&](int j) {
    if (j < blocks_n) {
      const int n0 = j * F::BLOCK_N, stage = j % F::STAGES;
      copy_rows<F>(sk + stage * F::KV_ELEMS, gk + n0 * (long long)args.kv_sr, args.kv_sr, F::BLOCK_N,
                   args.seq_k - n0);
      copy_rows<F>(sv + stage * F::KV_ELEMS, gv + n0 * (long long)args.kv_sr, args.kv_sr, F::BLOCK_N,
                   args.seq_k - n0);
    }
    cp_async_commit();  // an empty group past the end keeps the wait counts uniform
  };

  // ---- prologue: Q and the first STAGES - 1 key/value blocks --------------------------------------------------------
  copy_rows<F>(sq, gq, args.q_sr, F::BLOCK_M, args.seq_q - m0);
  cp_async_commit();
  for (int j = 0; j < F::STAGES - 1; ++j) load_kv(j);
  cp_async_wait<F::STAGES - 1>();
  __syncthreads();

  const int wm0 = warp * F::WARP_ROWS;
  unsigned qf[F::TILES_M][F::D / 16][4];
  for (int i = 0; i < F::TILES_M; ++i)
    for (int kk = 0; kk < F::D / 16; ++kk)
      ldmatrix_x4(qf[i][kk], smem_address(sq + (wm0 + i * 16 + lane % 16) * F::LD + kk * 16 + (lane / 16) * 8));

  float o[F::TILES_M][F::TILES_D][4];
  float row_max[F::TILES_M][2], row_sum[F::TILES_M][2];  // rows g and g + 8 of each tile, log2 domain
  for (int i = 0; i < F::TILES_M; ++i) {
    for (int d = 0; d < F::TILES_D; ++d)
      for (int e = 0; e < 4; ++e) o[i][d][e] = 0.f;
    for (int h = 0; h < 2; ++h) row_max[i][h] = neg_inf, row_sum[i][h] = 0.f;
  }
  const float scale_log2 = 1.4426950408889634f / sqrtf(float(F::D));  // 1/sqrt(D) · log2(e)

  // ---- main loop over key blocks ------------------------------------------------------------------------------------
  for (int j = 0; j < blocks_n; ++j) {
    cp_async_wait<F::STAGES - 2>();
    __syncthreads();  // block j is in; every warp is done with block j - 1, whose buffer the next copy reuses
    load_kv(j + F::STAGES - 1);
    const T *kt = sk + (j % F::STAGES) * F::KV_ELEMS;
    const T *vt = sv + (j % F::STAGES) * F::KV_ELEMS;
    const int n0 = j * F::BLOCK_N;

    // S = Q·Kᵀ: K rows (keys) are the columns of B, read without transposing (as the GEMM engine's layout nt)
    float s[F::TILES_M][F::TILES_N][4];
    for (int i = 0; i < F::TILES_M; ++i)
      for (int n = 0; n < F::TILES_N; ++n)
        for (int e = 0; e < 4; ++e) s[i][n][e] = 0.f;
    for (int kk = 0; kk < F::D / 16; ++kk) {
      for (int n = 0; n < F::TILES_N; n += 2) {
        unsigned r[4];  // keys n·8.. and n·8 + 8.., head dims kk·16.. and kk·16 + 8..
        ldmatrix_x4(r, smem_address(kt + (n * 8 + lane % 8 + (lane / 16) * 8) * F::LD + kk * 16 +
                                    ((lane / 8) % 2) * 8));
        const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
        for (int i = 0; i < F::TILES_M; ++i) {
          mma_16x8<T>(s[i][n], qf[i][kk], b0);
          mma_16x8<T>(s[i][n + 1], qf[i][kk], b1);
        }
      }
    }

    // Scale into the log2 domain; mask where the block crosses the diagonal or the end of the keys.
    const bool masked = n0 + F::BLOCK_N > args.seq_k || (F::CAUSAL && n0 + F::BLOCK_N - 1 > m0 + offset);
    for (int i = 0; i < F::TILES_M; ++i)
      for (int n = 0; n < F::TILES_N; ++n)
        for (int e = 0; e < 4; ++e) {
          float x = s[i][n][e] * scale_log2;
          if (masked) {
            const int row = m0 + wm0 + i * 16 + g + 8 * (e / 2), col = n0 + n * 8 + 2 * t + e % 2;
            if (col >= args.seq_k || (F::CAUSAL && col > row + offset)) x = neg_inf;
          }
          s[i][n][e] = x;
        }

    // Online softmax: new row maxima, P = exp2(S - m), the running O and l rescaled.
    for (int i = 0; i < F::TILES_M; ++i)
      for (int h = 0; h < 2; ++h) {
        float mx = row_max[i][h];
        for (int n = 0; n < F::TILES_N; ++n) mx = fmaxf(mx, fmaxf(s[i][n][2 * h], s[i][n][2 * h + 1]));
        mx = quad_max(mx);
        const float base = mx == neg_inf ? 0.f : mx;  // a row with no visible key yet: keep everything at 0
        const float correction = exp2f(row_max[i][h] - base);
        row_max[i][h] = mx;
        float sum = 0.f;
        for (int n = 0; n < F::TILES_N; ++n)
          for (int e = 2 * h; e < 2 * h + 2; ++e) {
            const float p = exp2f(s[i][n][e] - base);
            s[i][n][e] = p;
            sum += p;
          }
        row_sum[i][h] = row_sum[i][h] * correction + sum;  // per-lane partial sums; the quad adds them at the end
        for (int d = 0; d < F::TILES_D; ++d) {
          o[i][d][2 * h] *= correction;
          o[i][d][2 * h + 1] *= correction;
        }
      }

    // O += P·V: two 8-key tiles of S are one 16-key A fragment; V rows (keys) are the K of B, read transposed.
    for (int kc = 0; kc < F::BLOCK_N / 16; ++kc) {
      unsigned pa[F::TILES_M][4];
      for (int i = 0; i < F::TILES_M; ++i) {
        pa[i][0] = pack_pair<T>(s[i][2 * kc][0], s[i][2 * kc][1]);
        pa[i][1] = pack_pair<T>(s[i][2 * kc][2], s[i][2 * kc][3]);
        pa[i][2] = pack_pair<T>(s[i][2 * kc + 1][0], s[i][2 * kc + 1][1]);
        pa[i][3] = pack_pair<T>(s[i][2 * kc + 1][2], s[i][2 * kc + 1][3]);
      }
      for (int d = 0; d < F::TILES_D; d += 2) {
        unsigned r[4];  // keys kc·16.. and kc·16 + 8.., head dims d·8.. and d·8 + 8..
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

  // ---- epilogue: O / l through the warp's own Q rows in shared memory, then 16-byte stores --------------------------
  T *so = sq + wm0 * F::LD;  // only this warp read these rows (its Q fragments), so a warp barrier suffices
  for (int i = 0; i < F::TILES_M; ++i)
    for (int h = 0; h < 2; ++h) {
      const float total = quad_sum(row_sum[i][h]);
      const float inv = total > 0.f ? 1.f / total : 0.f;
      const int r = i * 16 + g + 8 * h;
      for (int d = 0; d < F::TILES_D; ++d) {
        const unsigned pair = pack_pair<T>(o[i][d][2 * h] * inv, o[i][d][2 * h + 1] * inv);
        *reinterpret_cast<unsigned *>(so + r * F::LD + d * 8 + 2 * t) = pair;
      }
      if (F::LSE && t == 0) {
        const int row = m0 + wm0 + r;
        if (row < args.seq_q)
          args.lse[(static_cast<long long>(bh)) * args.seq_q + row] =
              (row_max[i][h] + log2f(total)) * 0.6931471805599453f;
      }
    }
  __syncwarp();
  T *go = static_cast<T *>(args.out) + batch * (long long)args.q_sb + head * (long long)args.q_sh;
  constexpr int CHUNKS = F::D / F::VEC;
  for (int c = lane; c < F::WARP_ROWS * CHUNKS; c += 32) {
    const int r = c / CHUNKS, col = (c % CHUNKS) * F::VEC;
    const int row = m0 + wm0 + r;
    if (row < args.seq_q)
      *reinterpret_cast<Chunk16 *>(go + row * (long long)args.q_sr + col) =
          *reinterpret_cast<const Chunk16 *>(so + r * F::LD + col);
  }
}

}  // namespace tracea
