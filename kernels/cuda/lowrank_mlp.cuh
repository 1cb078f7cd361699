// Low-rank MLP kernels: y = act(x·U·V + bias) + residual, with T = x·U the rank-r intermediate.
//
// The kernel ABI (docs/lowrank-mlp.md): x is M x K row-major (K = d_in), y and residual are M x N (N = d_out); U is
// K x R (layout nn) or R x K (nt, as torch.nn.Linear stores it), V is R x N (nn) or N x R (nt); bias has N entries.
// Every entry point takes TRACEA_LOWRANK_PARAMS. `t` (with leading dimension ldt) is global scratch for T, used by the
// two-GEMM family only (the fused kernel keeps T on chip and ignores it).
//
// LowrankFused (sm_80+, mma.sync, fp32 accumulation; fp16/bf16 on m16n8k16, fp32 as 3xTF32 on m16n8k8): a block owns
// BLOCK_M rows of x and y.
//   phase 1   T (BLOCK_M x R_PAD) = x rows · U over K, a STAGES-deep cp.async pipeline of BLOCK_K steps, the whole
//             rank in one tile; the warps form a grid over BLOCK_M x R_PAD
//   handover  T goes to shared memory in the input type (SPLIT_T: as hi + lo, both in the input type, hi + lo = T to
//             about 2^-22 for fp16, 2^-16 for bf16: "intermediate fp32"; fp32 problems keep T in fp32); the first
//             chunks of V start copying into the pipeline's buffers, free once every warp is past phase 1
//   phase 2   for each BLOCK_N-wide chunk of V (the same pipeline, now over chunks): y chunk = T · V chunk (K = R_K,
//             rank rounded up to the instruction's 16), with SPLIT_T a second product from the lo part, then the
//             epilogue on the accumulators and the store
//
// The two-GEMM family (ranks too wide for one tile, fp32): lowrank_xu then lowrank_tv, the GEMM engine's own kernels
// (gemm_mma.cuh, gemm_simt.cuh) over views of the problem:
//   lowrank_xu   T = x·U into the scratch `t` (rounded to the input type): a block per BLOCK_M rows (grid x) and
//                BLOCK_N-wide column block of the rank (grid y), one engine tile each
//   lowrank_tv   y = epilogue(T·V) over the engine's grid of output tiles, the epilogue fused into its store
//
// In LowrankFused, 16-bit fragments come from shared memory through the GEMM engine's loaders (gemm_mma.cuh:
// load_fragments, multiply, over the Phase1 / Phase2 views below) and products are its mma.sync; copies are its
// copy_tile (cp.async, zero-filled past the edges: T's columns past R and V's rows past R are zeros, so padding adds
// nothing). fp32 runs on TF32 tensor cores at fp32 accuracy: each value is split into big = tf32(v) and
// small = tf32(v - big), and a·b is accumulated as big·small + small·big + big·big (the small·small term, about 2^-22
// of the product, is left out): three m16n8k8 products per step instead of one.
#pragma once

#include "gemm_mma.cuh"
#include "gemm_simt.cuh"

#define TRACEA_LOWRANK_PARAMS                                                                                     \
  const void *__restrict__ x, const void *__restrict__ u, const void *__restrict__ v, const void *__restrict__ bias, \
      const void *__restrict__ residual, void *__restrict__ y, void *__restrict__ t, int m, int k, int r, int n,     \
      int ldt
#define TRACEA_LOWRANK_ARGS tracea::LowrankArgs{x, u, v, bias, residual, y, t, m, k, r, n, ldt}

namespace tracea {

enum class Act { None, Relu, Silu, Gelu };

struct LowrankArgs {
  const void *x;
  const void *u;
  const void *v;
  const void *bias;
  const void *residual;
  void *y;
  void *t;  // the two-GEMM family's T, M x R with leading dimension ldt
  int m, k, r, n;
  int ldt;
};

// The activation: SiLU as x / (1 + e^-x) through the fast intrinsics (__expf: about 2 + 1.2|x| ulp; __fdividef: 2 ulp;
// 0 for x below about -87, where e^-x overflows: SiLU's limit), inside every dtype's bound, fp32's included (the
// IEEE division and expf of the GEMM engine's epilogue cost about as much as the rest of phase 2 on an H200); the
// others through the GEMM engine's epilogue math (gemm_common.cuh).
template <Act A> __device__ __forceinline__ float activation(float x) {
  if constexpr (A == Act::Silu) return __fdividef(x, 1.0f + __expf(-x));
  constexpr Epilogue E = A == Act::Relu   ? Epilogue::BiasRelu
                         : A == Act::Silu ? Epilogue::BiasSilu
                         : A == Act::Gelu ? Epilogue::BiasGelu
                                          : Epilogue::None;
  return activate<E, float>(x);
}

template <class T_, bool NT_, Act ACT_, bool BIAS_, bool RESIDUAL_, bool SPLIT_T_, int RANK_, int BLOCK_M_, int WARPS_,
          int WARPS_N1_, int BLOCK_K_, int BLOCK_N_, int WARPS_N2_, int STAGES_, int VEC_, bool STAGE_Y_ = false>
struct LowrankFused {
  using T = T_;
  static constexpr bool NT = NT_, BIAS = BIAS_, RESIDUAL = RESIDUAL_, SPLIT_T = SPLIT_T_;
  // STAGE_Y: phase 2 writes each finished chunk (bias and activation applied, rounded to T) to shared memory first, then the
  // block stores it row by row in 16-byte vectors (adding the residual, read the same way, in fp32).
  static constexpr bool STAGE_Y = STAGE_Y_;
  static constexpr Act ACT = ACT_;
  static constexpr int RANK = RANK_, BLOCK_M = BLOCK_M_, WARPS = WARPS_, BLOCK_K = BLOCK_K_, BLOCK_N = BLOCK_N_;
  static constexpr int STAGES = STAGES_, VEC = VEC_, THREADS = WARPS * 32;
  static constexpr bool FP32 = SameType<T, float>::value;  // 3xTF32
  static constexpr int MMA_K = FP32 ? 8 : 16;

  // Phase 1: the warps form a WARPS_M1 x WARPS_N1 grid over BLOCK_M x R_PAD (rank padded to whole 16-column pieces).
  static constexpr int WARPS_N1 = WARPS_N1_, WARPS_M1 = WARPS / WARPS_N1;
  static constexpr int R_PAD = ceil_div(RANK, 16 * WARPS_N1) * 16 * WARPS_N1;
  static constexpr int WM1 = BLOCK_M / WARPS_M1, WN1 = R_PAD / WARPS_N1;
  // Phase 2: a WARPS_M2 x WARPS_N2 grid over BLOCK_M x BLOCK_N, K = R_K (the rank in whole instruction steps).
  static constexpr int WARPS_N2 = WARPS_N2_, WARPS_M2 = WARPS / WARPS_N2;
  static constexpr int R_K = ceil_div(RANK, 16) * 16;
  static constexpr int WM2 = BLOCK_M / WARPS_M2, WN2 = BLOCK_N / WARPS_N2;

  // Shared memory, in elements, rows padded (16-bit: by 8, ldmatrix's eight row addresses on distinct banks; fp32:
  // rows along K by 8 floats and rows along N by 4, the GEMM engine's tf32 padding): STAGES pipeline buffers of STAGE
  // elements each, used by phase 1 (x and U steps) and then by phase 2 (V chunks), then T (and with SPLIT_T its lo
  // part).
  static constexpr int PAD_K_ROWS = 8, PAD_N_ROWS = FP32 ? 4 : 8;
  static constexpr int LDX_S = BLOCK_K + PAD_K_ROWS;
  static constexpr int U_ROWS = NT ? R_PAD : BLOCK_K, LDU_S = NT ? BLOCK_K + PAD_K_ROWS : R_PAD + PAD_N_ROWS;
  static constexpr int V_ROWS = NT ? BLOCK_N : R_K, LDV_S = NT ? R_K + PAD_K_ROWS : BLOCK_N + PAD_N_ROWS;
  static constexpr int STAGE_X = BLOCK_M * LDX_S, STAGE1 = STAGE_X + U_ROWS * LDU_S, STAGE2 = V_ROWS * LDV_S;
  static constexpr int STAGE = STAGE1 > STAGE2 ? STAGE1 : STAGE2;
  static constexpr int LDT_S = R_PAD + PAD_K_ROWS, T_ELEMS = BLOCK_M * LDT_S;
  static constexpr int LDY_S = BLOCK_N + PAD_N_ROWS, Y_ELEMS = STAGE_Y ? BLOCK_M * LDY_S : 0;
  static constexpr int Y_VEC = 16 / int(sizeof(T));  // elements per 16-byte store of a staged chunk
  static constexpr int SMEM_BYTES = (STAGES * STAGE + (SPLIT_T ? 2 : 1) * T_ELEMS + Y_ELEMS) * int(sizeof(T));

  // The GEMM engine's view of each phase's shared tiles (what load_step_fragments and multiply_step read; fp32 as
  // 3xTF32).
  struct Phase1 {
    using T = T_;
    static constexpr bool TF32 = FP32, SPLIT = FP32, B_K_ROWS = !NT;
    static constexpr int TILES_M = WM1 / 16, TILES_N = WN1 / 8, LDA_S = LDX_S, LDB_S = LDU_S;
  };
  struct Phase2 {
    using T = T_;
    static constexpr bool TF32 = FP32, SPLIT = FP32, B_K_ROWS = !NT;
    static constexpr int TILES_M = WM2 / 16, TILES_N = WN2 / 8, LDA_S = LDT_S, LDB_S = LDV_S;
  };

  static_assert(!SameType<T, double>::value, "the fused kernel runs fp16, bf16 and fp32");
  static_assert(!(FP32 && SPLIT_T), "fp32 keeps T in fp32: there is nothing to split");
  static_assert(WARPS % WARPS_N1 == 0 && WARPS % WARPS_N2 == 0, "warp grids must use every warp");
  static_assert(WM1 % 16 == 0 && WM2 % 16 == 0 && WN1 % 16 == 0 && WN2 % 16 == 0,
                "a warp tile is made of 16 x 16 pieces");
  static_assert(BLOCK_M % WARPS_M1 == 0 && BLOCK_M % WARPS_M2 == 0 && BLOCK_N % WARPS_N2 == 0, "warps divide tiles");
  static_assert(BLOCK_K % 16 == 0 && STAGES >= 2, "whole instruction steps; two stages at least");
  static_assert(VEC * sizeof(T) <= 16 && BLOCK_K % VEC == 0 && BLOCK_N % VEC == 0 && R_K % VEC == 0,
                "bad vector width");
  static_assert(BLOCK_N % Y_VEC == 0, "a staged chunk's rows are whole 16-byte vectors");
};

// One step of either phase: acc += A·B from shared memory, in the problem's type.
template <class F, class G>
__device__ __forceinline__ void product_step(float (&acc)[G::TILES_M][G::TILES_N][4], const typename F::T *sa,
                                             const typename F::T *sb, int kk, int wm0, int wn0, int lane) {
  StepFragments<G> f;
  load_step_fragments<G>(f, sa, sb, kk, wm0, wn0, lane);
  multiply_step<G>(acc, f);
}

// bias[col] widened (0 past N, and without a bias): phase 2 reads a thread's columns once per chunk, before the chunk's
// product, so that the loads are in flight while the tensor cores work.
template <class F> __device__ __forceinline__ float bias_at(const LowrankArgs &a, int col) {
  using T = typename F::T;
  if constexpr (F::BIAS) return col < a.n ? Element<T>::widen(static_cast<const T *>(a.bias)[col]) : 0.f;
  return 0.f;
}

// The finished y[row, col] from its product and bias (bias, activation, residual in that order).
template <class F>
__device__ __forceinline__ float finish(float acc, float bias, const LowrankArgs &a, int row, int col) {
  using T = typename F::T;
  float value = activation<F::ACT>(acc + bias);
  if constexpr (F::RESIDUAL)
    value += Element<T>::widen(static_cast<const T *>(a.residual)[static_cast<size_t>(row) * a.n + col]);
  return value;
}

// STAGE_Y: the block's staged chunk (BLOCK_M x BLOCK_N of act(product + bias) in T, rows LDY_S apart, starting at
// y's row m0 and column n0) stored to y, the residual added in fp32: 16-byte vectors along each row where N allows
// them, single elements at the edges.
template <class F> __device__ __forceinline__ void store_staged(const LowrankArgs &a, const typename F::T *sy, int m0, int n0) {
  using T = typename F::T;
  constexpr int W = F::Y_VEC, PER_ROW = F::BLOCK_N / W;
  T *y = static_cast<T *>(a.y);
  const T *res = static_cast<const T *>(a.residual);
  const bool whole = a.n % W == 0;
  for (int idx = threadIdx.x; idx < F::BLOCK_M * PER_ROW; idx += F::THREADS) {
    const int r = idx / PER_ROW, c = (idx % PER_ROW) * W, row = m0 + r, col = n0 + c;
    if (row >= a.m || col >= a.n) continue;
    const size_t at = static_cast<size_t>(row) * a.n + col;
    Vec<T, W> out = *reinterpret_cast<const Vec<T, W> *>(sy + r * F::LDY_S + c);
    if (whole) {  // col + W <= N: N and col are multiples of W
      if constexpr (F::RESIDUAL) {
        const Vec<T, W> add = *reinterpret_cast<const Vec<T, W> *>(res + at);
#pragma unroll
        for (int e = 0; e < W; ++e)
          out.v[e] = Element<T>::narrow(Element<T>::widen(out.v[e]) + Element<T>::widen(add.v[e]));
      }
      *reinterpret_cast<Vec<T, W> *>(y + at) = out;
    } else {
      for (int e = 0; e < W && col + e < a.n; ++e) {
        float value = Element<T>::widen(out.v[e]);
        if constexpr (F::RESIDUAL) value += Element<T>::widen(res[at + e]);
        y[at + e] = Element<T>::narrow(value);
      }
    }
  }
}

// Stores the two finished values of y[row, col..col+1] (the caller checked row < M): one 4-byte store where both
// columns exist and the pair is aligned (N even), else one element at a time.
template <class F>
__device__ __forceinline__ void store_pair(const LowrankArgs &a, int row, int col, float v0, float v1, float b0,
                                           float b1) {
  using T = typename F::T;
  T *out = static_cast<T *>(a.y) + static_cast<size_t>(row) * a.n + col;
  if (col + 1 < a.n && a.n % 2 == 0) {
    Vec<T, 2> pair;
    pair.v[0] = Element<T>::narrow(finish<F>(v0, b0, a, row, col));
    pair.v[1] = Element<T>::narrow(finish<F>(v1, b1, a, row, col + 1));
    *reinterpret_cast<Vec<T, 2> *>(out) = pair;
  } else {
    if (col < a.n) out[0] = Element<T>::narrow(finish<F>(v0, b0, a, row, col));
    if (col + 1 < a.n) out[1] = Element<T>::narrow(finish<F>(v1, b1, a, row, col + 1));
  }
}

template <class F> __device__ void lowrank_fused(const LowrankArgs &a) {
  using T = typename F::T;
  using P1 = typename F::Phase1;
  using P2 = typename F::Phase2;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T *smem = reinterpret_cast<T *>(smem_raw);
  T *t_hi = smem + F::STAGES * F::STAGE;
  T *t_lo = t_hi + F::T_ELEMS;                            // SPLIT_T only
  T *s_y = t_hi + (F::SPLIT_T ? 2 : 1) * F::T_ELEMS;     // STAGE_Y only
  const T *X = static_cast<const T *>(a.x);
  const T *U = static_cast<const T *>(a.u);
  const T *V = static_cast<const T *>(a.v);
  const int m0 = blockIdx.x * F::BLOCK_M;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, tq = lane % 4;
  auto stage = [&](int s) { return smem + s * F::STAGE; };

  // ---- phase 1: T = x[m0 : m0 + BLOCK_M] · U ---------------------------------------------------------------------
  const int wm1 = (warp % F::WARPS_M1) * F::WM1, wn1 = (warp / F::WARPS_M1) * F::WN1;
  float acc1[P1::TILES_M][P1::TILES_N][4];
  clear<P1>(acc1);

  const int k_steps = ceil_div(a.k, F::BLOCK_K);
  auto load_step = [&](int kt, int s) {
    const int k0 = kt * F::BLOCK_K;
    T *sx = stage(s), *su = stage(s) + F::STAGE_X;
    copy_tile<T, F::BLOCK_M, F::BLOCK_K, F::LDX_S, F::VEC, F::THREADS>(sx, X, a.k, m0, k0, a.m, a.k);
    if constexpr (F::NT)  // U stored R x K: rows are the rank's columns
      copy_tile<T, F::R_PAD, F::BLOCK_K, F::LDU_S, F::VEC, F::THREADS>(su, U, a.k, 0, k0, a.r, a.k);
    else
      copy_tile<T, F::BLOCK_K, F::R_PAD, F::LDU_S, F::VEC, F::THREADS>(su, U, a.r, k0, 0, a.k, a.r);
  };
  // Every step commits one group (empty ones too): "at most STAGES-2 groups pending" means "the next one landed".
#pragma unroll
  for (int s = 0; s < F::STAGES - 1; ++s) {
    if (s < k_steps) load_step(s, s);
    cp_async_commit();
  }
  cp_async_wait<F::STAGES - 2>();
  __syncthreads();
  int read = 0;
  for (int kt = 0; kt < k_steps; ++kt) {
    const int fill = kt + F::STAGES - 1;  // into the stage step kt-1 used: every warp is past that step's barrier
    if (fill < k_steps) load_step(fill, read == 0 ? F::STAGES - 1 : read - 1);
    cp_async_commit();
    if constexpr (F::FP32) {
      // Each stage sums into a fresh fragment, added to T in IEEE fp32 (see MmaGemm::SPLIT in gemm_mma.cuh).
      float part[P1::TILES_M][P1::TILES_N][4];
      clear<P1>(part);
#pragma unroll
      for (int kk = 0; kk < F::BLOCK_K; kk += F::MMA_K)
        product_step<F, P1>(part, stage(read), stage(read) + F::STAGE_X, kk, wm1, wn1, lane);
      add_into<P1>(acc1, part);
    } else {
#pragma unroll
      for (int kk = 0; kk < F::BLOCK_K; kk += F::MMA_K)
        product_step<F, P1>(acc1, stage(read), stage(read) + F::STAGE_X, kk, wm1, wn1, lane);
    }
    cp_async_wait<F::STAGES - 2>();
    __syncthreads();
    read = read + 1 == F::STAGES ? 0 : read + 1;
  }
  cp_async_wait<0>();
  __syncthreads();  // the pipeline's buffers are free for V

  // ---- handover: V's first chunks start copying; T goes to shared memory -----------------------------------------
  // The grid's y dimension splits d_out: block (x, y) takes the y-th share of V's chunks (each share at least one
  // chunk, the launch plan guarantees it), having computed the whole T of its rows (the blocks sharing rows read the
  // same x, mostly from L2).
  const int all_chunks = ceil_div(a.n, F::BLOCK_N), shares = static_cast<int>(gridDim.y);
  const int c_begin = static_cast<int>(blockIdx.y) * all_chunks / shares;
  const int chunks = (static_cast<int>(blockIdx.y) + 1) * all_chunks / shares - c_begin;
  auto chunk_n0 = [&](int c) { return (c_begin + c) * F::BLOCK_N; };
  auto load_chunk = [&](int c, int s) {
    const int n0 = chunk_n0(c);
    if constexpr (F::NT)  // V stored N x R
      copy_tile<T, F::BLOCK_N, F::R_K, F::LDV_S, F::VEC, F::THREADS>(stage(s), V, a.r, n0, 0, a.n, a.r);
    else
      copy_tile<T, F::R_K, F::BLOCK_N, F::LDV_S, F::VEC, F::THREADS>(stage(s), V, a.n, 0, n0, a.r, a.n);
  };
#pragma unroll
  for (int s = 0; s < F::STAGES - 1; ++s) {
    if (s < chunks) load_chunk(s, s);
    cp_async_commit();
  }
  // accumulator e of tile (i, j) holds T(g + 8·(e/2), 2·tq + e%2) of that 16 x 8 tile
#pragma unroll
  for (int i = 0; i < P1::TILES_M; ++i)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = wm1 + i * 16 + g + half * 8;
#pragma unroll
      for (int j = 0; j < P1::TILES_N; ++j) {
        const int col = wn1 + j * 8 + 2 * tq;
        Vec<T, 2> hi;
        hi.v[0] = Element<T>::narrow(acc1[i][j][2 * half]);
        hi.v[1] = Element<T>::narrow(acc1[i][j][2 * half + 1]);
        *reinterpret_cast<Vec<T, 2> *>(t_hi + row * F::LDT_S + col) = hi;
        if constexpr (F::SPLIT_T) {  // what hi missed, rounded once more
          Vec<T, 2> lo;
          lo.v[0] = Element<T>::narrow(acc1[i][j][2 * half] - Element<T>::widen(hi.v[0]));
          lo.v[1] = Element<T>::narrow(acc1[i][j][2 * half + 1] - Element<T>::widen(hi.v[1]));
          *reinterpret_cast<Vec<T, 2> *>(t_lo + row * F::LDT_S + col) = lo;
        }
      }
    }
  cp_async_wait<F::STAGES - 2>();
  __syncthreads();  // T is whole in shared memory and chunk 0 has landed

  // ---- phase 2: y = epilogue(T · V), chunk by chunk ---------------------------------------------------------------
  const int wm2 = (warp % F::WARPS_M2) * F::WM2, wn2 = (warp / F::WARPS_M2) * F::WN2;
  read = 0;
  for (int c = 0; c < chunks; ++c) {
    const int fill = c + F::STAGES - 1;
    if (fill < chunks) load_chunk(fill, read == 0 ? F::STAGES - 1 : read - 1);
    cp_async_commit();
    float acc2[P2::TILES_M][P2::TILES_N][4];
    clear<P2>(acc2);
    const int n0 = chunk_n0(c);
    float bias2[P2::TILES_N][2];  // this thread's columns of the chunk: the same for all its rows
#pragma unroll
    for (int j = 0; j < P2::TILES_N; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) bias2[j][e] = bias_at<F>(a, n0 + wn2 + j * 8 + 2 * tq + e);
#pragma unroll
    for (int kk = 0; kk < F::R_K; kk += F::MMA_K) {
      product_step<F, P2>(acc2, t_hi, stage(read), kk, wm2, wn2, lane);
      if constexpr (F::SPLIT_T) product_step<F, P2>(acc2, t_lo, stage(read), kk, wm2, wn2, lane);
    }
    if constexpr (F::STAGE_Y) {
#pragma unroll
      for (int i = 0; i < P2::TILES_M; ++i)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int r = wm2 + i * 16 + g + half * 8;
#pragma unroll
          for (int j = 0; j < P2::TILES_N; ++j) {
            const int c2 = wn2 + j * 8 + 2 * tq, col = n0 + c2;
            Vec<T, 2> pair;  // columns past N hold values nobody stores
            pair.v[0] = Element<T>::narrow(activation<F::ACT>(acc2[i][j][2 * half] + bias2[j][0]));
            pair.v[1] = Element<T>::narrow(activation<F::ACT>(acc2[i][j][2 * half + 1] + bias2[j][1]));
            *reinterpret_cast<Vec<T, 2> *>(s_y + r * F::LDY_S + c2) = pair;
          }
        }
      __syncthreads();  // the chunk is whole in shared memory
      store_staged<F>(a, s_y, m0, n0);
    } else {
#pragma unroll
      for (int i = 0; i < P2::TILES_M; ++i)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int row = m0 + wm2 + i * 16 + g + half * 8;
          if (row >= a.m) continue;
#pragma unroll
          for (int j = 0; j < P2::TILES_N; ++j)
            store_pair<F>(a, row, n0 + wn2 + j * 8 + 2 * tq, acc2[i][j][2 * half], acc2[i][j][2 * half + 1],
                          bias2[j][0], bias2[j][1]);
        }
    }
    cp_async_wait<F::STAGES - 2>();
    __syncthreads();  // chunk c+1 landed; every warp is done with chunk c's stage (and the staged chunk)
    read = read + 1 == F::STAGES ? 0 : read + 1;
  }
}

// ---- the two-GEMM family ---------------------------------------------------------------------------------------------

// T = x·U with the engine kernel `run` (its configuration G covers BLOCK_N columns of the rank per call): the grid has
// one block per BLOCK_M rows of x, and each block takes the rank's column blocks in turn. U's column block c starts
// c·BLOCK_N columns in (nn) or rows down (nt); T's at column c·BLOCK_N of row-major M x R storage (leading dimension
// ldt).
template <class G, bool NT, class Run> __device__ void lowrank_xu(const LowrankArgs &a, Run run) {
  using T = typename G::T;
  const int c0 = blockIdx.y * G::BLOCK_N;  // this block's column block of the rank (the engine tile reads blockIdx.x)
  if (c0 >= a.r) return;                   // a grid built for a wider rank (export: the kernel serves narrower ones)
  const T *u = static_cast<const T *>(a.u) + (NT ? static_cast<size_t>(c0) * a.k : c0);
  const int n = a.r - c0 < G::BLOCK_N ? a.r - c0 : G::BLOCK_N;
  run(GemmArgs{a.x, u, static_cast<T *>(a.t) + c0, nullptr, nullptr, nullptr, a.m, n, a.k, a.k, NT ? a.k : a.r,
               a.ldt});
}

// y = epilogue(T·V) with the engine kernel `run`, its epilogue (bias, activation or residual) fused into the store.
template <bool NT, class Run> __device__ void lowrank_tv(const LowrankArgs &a, Run run) {
  run(GemmArgs{a.t, a.v, a.y, a.bias, a.residual, nullptr, a.m, a.n, a.r, a.ldt, NT ? a.r : a.n, a.n});
}

}  // namespace tracea
