// Implicit-GEMM forward convolution (cross-correlation, as torch computes it): Y = epilogue(conv(X, W)).
//
// Layouts (docs/conv2d.md): X is N x H x W x C (NHWC), the filter is K x R x S x C (KRSC), Y is N x P x Q x K.
// As a GEMM: M = N·P·Q rows (output pixels), N_gemm = K columns (output channels), a reduction over R·S·C taps. The
// filter is already that GEMM's B in layout nt (K rows of R·S·C taps); A, the unfolded activations im2col(X), is never
// built: each block gathers its A tile straight from X. Row m of A is output pixel (n, p, q) (fast divmod of m by P·Q
// and Q); its tap (r, s, c) reads X[n, p·stride_h − pad_h + r·dilation_h, q·stride_w − pad_w + s·dilation_w, c], zero
// outside the image (predication: the copy is skipped and zero-filled).
//
// The tiles, the pipeline, the fragments and the epilogue are the GEMM engine's (gemm_mma.cuh's MmaGemm traits and
// tile_mainloops.cuh's mma_mainloop for fp16/bf16/tf32, gemm_simt.cuh's SimtGemm traits and simt_mainloop for exact
// fp32), instantiated in layout nt; this file supplies what differs: where a pipeline step's A and B tiles come from.
//
// A pipeline step (BLOCK_K of the reduction) is, by iterator:
//   Analytic     one filter tap (r, s) and BLOCK_K channels c0 .. c0+BLOCK_K: steps run over (r, s, channel block),
//                R·S·ceil(C/BLOCK_K) of them; each load computes its input pixel from (p, q) and (r, s) and checks it
//                against the image. Vector loads of VEC channels (C a multiple of VEC).
//   Optimized    the same steps; each thread computes once, per row it loads, the offset of its receptive field's
//                corner and two bit masks of the filter rows and columns that fall inside the image, so that a step's
//                address is that offset plus one offset shared by the whole block, and its predicate two bit tests.
//   FewChannels  BLOCK_K consecutive taps of the flattened R·S·C reduction (ceil(R·S·C/BLOCK_K) steps), each element
//                decoded into (r, s, c) with fast divmod: for C smaller than a step (the first layer's C = 3), where
//                one tap per step would leave most of every step zero. A's elements are copied one by one.
// Geometry (stride, padding, dilation) is compile-time (ConvGeometry): the generated source fixes it per problem.
//
// TRACEA_HOST_EMULATION (tests) compiles this for the CPU as gemm_common.cuh describes.
#pragma once

#include "tile_mainloops.cuh"

#define TRACEA_CONV2D_PARAMS                                                                                        \
  const void *__restrict__ x, const void *__restrict__ filter, void *__restrict__ y, const void *__restrict__ bias, \
      const void *__restrict__ residual, float *__restrict__ workspace, int batch, int in_h, int in_w, int in_c,   \
      int out_c, int flt_r, int flt_s
#define TRACEA_CONV2D_ARGS \
  tracea::ConvArgs { x, filter, y, bias, residual, workspace, batch, in_h, in_w, in_c, out_c, flt_r, flt_s }
// dst[n][h][w][c] = src[n][c][h][w]: an input from NCHW, or a filter from KCRS (n: K, c: C, h: R, w: S)
#define TRACEA_NCHW_TO_NHWC_PARAMS \
  const void *__restrict__ src, void *__restrict__ dst, int n, int c, int h, int w

namespace tracea {

struct ConvArgs {
  const void *x;       // N x H x W x C
  const void *filter;  // K x R x S x C
  void *y;             // N x P x Q x K
  const void *bias;    // K
  const void *residual;  // N x P x Q x K
  float *workspace;    // split-K partial sums, (N·P·Q) x K fp32
  int batch, in_h, in_w, in_c, out_c, flt_r, flt_s;
};

// n / d and n % d for 0 <= n < 2^31 by a multiply and a shift. With l = ceil(log2 d) − 1 (so 2^l < d <= 2^(l+1)) and
// mul = ceil(2^(32+l) / d) < 2^32, the error mul·d − 2^(32+l) is below d <= 2^(l+1), small enough for every n < 2^31:
// n / d = umulhi(n, mul) >> l. d = 1 is the one divisor without such an l.
//
// mul comes from a float estimate of the quotient, corrected once by the estimate of the remainder's quotient and
// then to the exact floor by at most a step or two: a 64-bit division would be a subroutine call on the GPU (a stack
// frame, a spilled register) in every kernel that makes a divisor.
struct FastDivmod {
  int d;
  unsigned mul;
  int shift;
  __device__ __forceinline__ explicit FastDivmod(int divisor) : d(divisor), mul(0), shift(0) {
    if (divisor > 1) {
      shift = 31 - __clz(static_cast<unsigned>(divisor - 1));  // floor(log2(d − 1)) = ceil(log2 d) − 1
      const long long num = 1ll << (32 + shift);
      const float inverse = __fdividef(1.0f, static_cast<float>(divisor));
      long long q = static_cast<long long>(static_cast<float>(num) * inverse);
      q += static_cast<long long>(static_cast<float>(num - q * divisor) * inverse);
      long long rem = num - q * divisor;
      while (rem < 0) --q, rem += divisor;
      while (rem >= divisor) ++q, rem -= divisor;
      mul = static_cast<unsigned>(q + (rem != 0));
    }
  }
  __device__ __forceinline__ int div(int n) const {
    return d == 1 ? n : static_cast<int>(__umulhi(static_cast<unsigned>(n), mul) >> shift);
  }
  // (quotient, remainder)
  __device__ __forceinline__ int2 divmod(int n) const {
    const int q = div(n);
    return make_int2(q, n - q * d);
  }
};

template <int STRIDE_H_, int STRIDE_W_, int PAD_H_, int PAD_W_, int DILATION_H_, int DILATION_W_> struct ConvGeometry {
  static constexpr int STRIDE_H = STRIDE_H_, STRIDE_W = STRIDE_W_, PAD_H = PAD_H_, PAD_W = PAD_W_;
  static constexpr int DILATION_H = DILATION_H_, DILATION_W = DILATION_W_;
  static __host__ __device__ constexpr int out_h(int h, int r) { return (h + 2 * PAD_H - DILATION_H * (r - 1) - 1) / STRIDE_H + 1; }
  static __host__ __device__ constexpr int out_w(int w, int s) { return (w + 2 * PAD_W - DILATION_W * (s - 1) - 1) / STRIDE_W + 1; }
};

enum class ConvIterator { Analytic, Optimized, FewChannels };

// The problem as the kernels see it: the sizes, the GEMM view, the divisors of the index arithmetic (the last two
// only for FewChannels, which decodes every element's tap).
struct ConvShape {
  int batch, h, w, c, k, r, s, p, q;
  int m, taps;   // the GEMM view: M = N·P·Q, K_gemm = R·S·C (N_gemm is k)
  int c_blocks;  // channel blocks of one tap (analytic and optimized steps)
  int steps;     // pipeline steps over the whole reduction
  FastDivmod pq_div, q_div, c_div, s_div;

  template <class Geo, int BLOCK_K, ConvIterator ITER>
  static __device__ __forceinline__ ConvShape of(const ConvArgs &a) {
    constexpr bool FEW = ITER == ConvIterator::FewChannels;
    const int p = Geo::out_h(a.in_h, a.flt_r), q = Geo::out_w(a.in_w, a.flt_s);
    const int taps = a.flt_r * a.flt_s * a.in_c;
    const int c_blocks = ceil_div(a.in_c, BLOCK_K);
    const int steps = FEW ? ceil_div(taps, BLOCK_K) : a.flt_r * a.flt_s * c_blocks;
    return ConvShape{a.batch, a.in_h, a.in_w, a.in_c, a.out_c, a.flt_r, a.flt_s, p, q, a.batch * p * q, taps,
                     c_blocks, steps, FastDivmod(p * q), FastDivmod(q), FastDivmod(FEW ? a.in_c : 1),
                     FastDivmod(FEW ? a.flt_s : 1)};
  }

  // The output as the GEMM epilogue writes it: Y is an M x K row-major matrix, the residual too.
  template <class Geo> static __device__ __forceinline__ GemmArgs output(const ConvArgs &a) {
    const int m = a.batch * Geo::out_h(a.in_h, a.flt_r) * Geo::out_w(a.in_w, a.flt_s);
    const int taps = a.flt_r * a.flt_s * a.in_c;
    return GemmArgs{a.x, a.filter, a.y, a.bias, a.residual, a.workspace, m, a.out_c, taps, 0, taps, a.out_c};
  }
};

// One pipeline step of the reduction: its filter tap and first channel (analytic, optimized), and the columns of the
// filter matrix (K x R·S·C) it covers: [col0, col_end), the tap's channels or, for FewChannels, up to R·S·C.
struct ConvStep {
  int r, s, c0;
  int col0, col_end;
};

// The steps of a block's slice in order, one per call of next() (the main loops load steps 0, 1, 2, ... once each):
// the tap and channel block advance by counting, with one division where the slice starts.
template <int BLOCK_K, ConvIterator ITER> struct StepCursor {
  int step, r, s, c0;
  __device__ __forceinline__ StepCursor(const ConvShape &cs, int first) : step(first), r(0), s(0), c0(0) {
    if constexpr (ITER != ConvIterator::FewChannels) {
      const int tap = first / cs.c_blocks;
      r = tap / cs.s, s = tap % cs.s, c0 = (first % cs.c_blocks) * BLOCK_K;
    }
  }
  __device__ __forceinline__ ConvStep next(const ConvShape &cs) {
    if constexpr (ITER == ConvIterator::FewChannels) {
      return ConvStep{0, 0, 0, BLOCK_K * step++, cs.taps};
    } else {
      const int first = (r * cs.s + s) * cs.c;
      const ConvStep out{r, s, c0, first + c0, first + cs.c};
      c0 += BLOCK_K;
      if (c0 >= cs.c) {
        c0 = 0;
        if (++s == cs.s) s = 0, ++r;
      }
      return out;
    }
  }
};

// Where one row of A (an output pixel (n, p, q)) reads X, by iterator. Each starts from the corner of the pixel's
// receptive field, h0 = p·stride_h − pad_h and w0 = q·stride_w − pad_w; tap (r, s) is X's pixel
// (n, h0 + r·dilation_h, w0 + s·dilation_w). A row outside the problem gets a corner no tap reaches (or empty masks).
//
// Analytic: n·H, h0, w0; each step checks its tap against the image and computes the address.
template <ConvIterator ITER> struct PixelRow {
  int nh, h0, w0;
  template <class Geo> __device__ __forceinline__ void init(const ConvShape &cs, int m, bool inside) {
    const int2 n_pq = cs.pq_div.divmod(inside ? m : 0);
    const int2 pq = cs.q_div.divmod(n_pq.y);
    nh = n_pq.x * cs.h;
    h0 = inside ? pq.x * Geo::STRIDE_H - Geo::PAD_H : -(1 << 28);
    w0 = pq.y * Geo::STRIDE_W - Geo::PAD_W;
  }
  template <class Geo> __device__ __forceinline__ bool valid(const ConvShape &cs, int r, int s) const {
    return static_cast<unsigned>(h0 + r * Geo::DILATION_H) < static_cast<unsigned>(cs.h) &&
           static_cast<unsigned>(w0 + s * Geo::DILATION_W) < static_cast<unsigned>(cs.w);
  }
  // Elements from X to channel 0 of tap (r, s) (only where valid).
  template <class Geo> __device__ __forceinline__ long long offset(const ConvShape &cs, int r, int s, long long) const {
    return (static_cast<long long>(nh + h0 + r * Geo::DILATION_H) * cs.w + (w0 + s * Geo::DILATION_W)) * cs.c;
  }
};

// Optimized: the corner's offset in X (negative where it lies in the padding) and the bit masks of the filter rows r
// and columns s whose taps fall inside the image (zero for a row outside the problem; R and S at most 32). A step's
// predicate is two bit tests; its address the corner plus the step's block-wide tap offset.
template <> struct PixelRow<ConvIterator::Optimized> {
  long long corner;
  unsigned rows, cols;
  template <class Geo> __device__ __forceinline__ void init(const ConvShape &cs, int m, bool inside) {
    const int2 n_pq = cs.pq_div.divmod(inside ? m : 0);
    const int2 pq = cs.q_div.divmod(n_pq.y);
    const int h0 = pq.x * Geo::STRIDE_H - Geo::PAD_H, w0 = pq.y * Geo::STRIDE_W - Geo::PAD_W;
    corner = (static_cast<long long>(n_pq.x * cs.h + h0) * cs.w + w0) * cs.c;
    rows = cols = 0;
    for (int r = 0; r < cs.r; ++r)
      rows |= (inside && static_cast<unsigned>(h0 + r * Geo::DILATION_H) < static_cast<unsigned>(cs.h)) ? 1u << r : 0u;
    for (int s = 0; s < cs.s; ++s)
      cols |= static_cast<unsigned>(w0 + s * Geo::DILATION_W) < static_cast<unsigned>(cs.w) ? 1u << s : 0u;
  }
  template <class Geo> __device__ __forceinline__ bool valid(const ConvShape &, int r, int s) const {
    return ((rows >> r) & (cols >> s) & 1u) != 0u;
  }
  template <class Geo> __device__ __forceinline__ long long offset(const ConvShape &, int, int, long long tap) const {
    return corner + tap;
  }
};

// FewChannels: the corner's offset and (h0, w0): an element's tap offset and its (r·dilation_h, s·dilation_w) are the
// same for every row a thread loads, so each row adds two compares and an add to the element's decode.
template <> struct PixelRow<ConvIterator::FewChannels> {
  long long corner;
  int h0, w0;
  template <class Geo> __device__ __forceinline__ void init(const ConvShape &cs, int m, bool inside) {
    const int2 n_pq = cs.pq_div.divmod(inside ? m : 0);
    const int2 pq = cs.q_div.divmod(n_pq.y);
    h0 = inside ? pq.x * Geo::STRIDE_H - Geo::PAD_H : -(1 << 28);
    w0 = pq.y * Geo::STRIDE_W - Geo::PAD_W;
    corner = (static_cast<long long>(n_pq.x * cs.h + (inside ? h0 : 0)) * cs.w + w0) * cs.c;
  }
};

// The block-wide offset in X from a pixel's corner to tap (r, s), channel c.
template <class Geo> __device__ __forceinline__ long long tap_offset(const ConvShape &cs, int r, int s, int c = 0) {
  return (static_cast<long long>(r * Geo::DILATION_H) * cs.w + s * Geo::DILATION_W) * cs.c + c;
}

// Copies VEC elements into shared memory: cp.async where that moves 4 bytes or more, else through a register.
template <class T, int VEC> __device__ __forceinline__ void copy_vector(T *to, const T *from, bool valid) {
  constexpr int BYTES = VEC * int(sizeof(T));
  if constexpr (BYTES >= 4) {
    cp_async<BYTES>(smem_address(to), from, valid);
  } else {  // a single 16-bit element
    *reinterpret_cast<unsigned short *>(to) = valid ? *reinterpret_cast<const unsigned short *>(from) : 0;
  }
}

// One thread's share of a ROWS x COLS tile of A (im2col(X)): load i is chunk tid + i·THREADS, VEC consecutive
// reduction elements of one row (the chunk -> (row, column) mapping of copy_tile in gemm_mma.cuh and of SimtGemm's
// loads). Every load of a thread is in the same columns (THREADS is a multiple of the chunks per row), so a step's
// per-column work (the channel, or FewChannels' tap decode) is done once for all its rows. Rows are set up once per
// block (PixelRow).
template <class T, int ROWS, int COLS, int VEC, int THREADS, class Geo, ConvIterator ITER> struct ActivationTile {
  static constexpr int PER_ROW = COLS / VEC, CHUNKS = ROWS * PER_ROW, LOADS = ceil_div(CHUNKS, THREADS);
  static constexpr int ROW_STEP = THREADS / PER_ROW;  // rows between a thread's loads
  static_assert(THREADS % PER_ROW == 0, "a thread's loads share their columns");
  static constexpr bool FEW = ITER == ConvIterator::FewChannels;
  PixelRow<ITER> rows[LOADS];
  int col;  // the thread's first column in a step

  static __device__ __forceinline__ bool has_load(int i) {
    return CHUNKS % THREADS == 0 || int(threadIdx.x) + i * THREADS < CHUNKS;
  }

  __device__ __forceinline__ void init(const ConvShape &cs, int m0) {
    col = (int(threadIdx.x) % PER_ROW) * VEC;
#pragma unroll
    for (int i = 0; i < LOADS; ++i) {
      const int m = m0 + int(threadIdx.x) / PER_ROW + i * ROW_STEP;
      rows[i].template init<Geo>(cs, m, has_load(i) && m < cs.m);
    }
  }

  // What a step's columns share across rows. Channel iterators: the first channel, whether the chunk lies inside C,
  // the tap offset (optimized). FewChannels: per element its tap's (r·dilation_h, s·dilation_w), offset, and whether
  // it lies inside R·S·C.
  struct Columns {
    int c;
    bool inside;
    long long tap;
    int dh[FEW ? VEC : 1], dw[FEW ? VEC : 1];
    long long offset[FEW ? VEC : 1];
    bool exists[FEW ? VEC : 1];
  };

  __device__ __forceinline__ Columns columns(const ConvShape &cs, const ConvStep &step) const {
    Columns k{};
    if constexpr (FEW) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const int t = step.col0 + col + e;
        k.exists[e] = t < cs.taps;
        const int2 rs_c = cs.c_div.divmod(k.exists[e] ? t : 0);
        const int2 rs = cs.s_div.divmod(rs_c.x);
        k.dh[e] = rs.x * Geo::DILATION_H, k.dw[e] = rs.y * Geo::DILATION_W;
        k.offset[e] = tap_offset<Geo>(cs, rs.x, rs.y, rs_c.y);
      }
    } else {
      k.c = step.c0 + col;
      k.inside = k.c < cs.c;
      k.tap = ITER == ConvIterator::Optimized ? tap_offset<Geo>(cs, step.r, step.s) : 0;
    }
    return k;
  }

  // Element e of a FewChannels load i: where it is in X and whether it exists.
  __device__ __forceinline__ const T *element(const T *x, const ConvShape &cs, const Columns &k, int i, int e,
                                              bool &valid) const {
    const PixelRow<ITER> &row = rows[i];
    valid = k.exists[e] && static_cast<unsigned>(row.h0 + k.dh[e]) < static_cast<unsigned>(cs.h) &&
            static_cast<unsigned>(row.w0 + k.dw[e]) < static_cast<unsigned>(cs.w);
    return valid ? x + row.corner + k.offset[e] : x;
  }

  // The VEC channels of a channel iterator's load i: where they are in X and whether they exist.
  __device__ __forceinline__ const T *vector(const T *x, const ConvShape &cs, const ConvStep &step, const Columns &k,
                                             int i, bool &valid) const {
    valid = k.inside && rows[i].template valid<Geo>(cs, step.r, step.s);
    return valid ? x + rows[i].template offset<Geo>(cs, step.r, step.s, k.tap) + k.c : x;
  }

  // Load i of the step in registers, zeros where it falls outside.
  __device__ __forceinline__ Vec<T, VEC> gather(const T *x, const ConvShape &cs, const ConvStep &step,
                                                const Columns &k, int i) const {
    Vec<T, VEC> out;
#pragma unroll
    for (int e = 0; e < VEC; ++e) out.v[e] = T(0);
    bool valid;
    if constexpr (FEW) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const T *from = element(x, cs, k, i, e, valid);
        if (valid) out.v[e] = *from;
      }
    } else {
      const T *from = vector(x, cs, step, k, i, valid);
      if (valid) out = *reinterpret_cast<const Vec<T, VEC> *>(from);
    }
    return out;
  }

  // The step's tile into shared memory (row stride LDS), zeros where its taps fall outside X or the problem.
  template <int LDS> __device__ __forceinline__ void copy(T *dst, const T *x, const ConvShape &cs, const ConvStep &step) const {
    const Columns k = columns(cs, step);
#pragma unroll
    for (int i = 0; i < LOADS; ++i) {
      if (!has_load(i)) break;
      T *to = dst + (int(threadIdx.x) / PER_ROW + i * ROW_STEP) * LDS + col;
      bool valid;
      if constexpr (FEW && sizeof(T) < 4) {
        // 16-bit taps: cp.async moves 4 bytes at least, so the load is gathered in registers and stored at once
        *reinterpret_cast<Vec<T, VEC> *>(to) = gather(x, cs, step, k, i);
      } else if constexpr (FEW) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const T *from = element(x, cs, k, i, e, valid);
          copy_vector<T, 1>(to + e, from, valid);
        }
      } else {
        const T *from = vector(x, cs, step, k, i, valid);
        copy_vector<T, VEC>(to, from, valid);
      }
    }
  }

  // The step's loads into registers (the SIMT main loop's fetch).
  __device__ __forceinline__ void read(Vec<T, VEC> (&out)[LOADS], const T *x, const ConvShape &cs,
                                       const ConvStep &step) const {
    const Columns k = columns(cs, step);
#pragma unroll
    for (int i = 0; i < LOADS; ++i) out[i] = gather(x, cs, step, k, i);
  }
};

// ---- tensor cores (fp16, bf16, tf32): G = MmaGemm<T, Layout::NT, ...> ------------------------------------------------

template <class G, class Geo, ConvIterator ITER> __device__ void conv2d_mma(const ConvArgs &args) {
  using T = typename G::T;
  static_assert(G::LAYOUT == Layout::NT && G::SLICE_K == 1 && G::CLUSTER_K == 1, "conv2d tiles are plain nt tiles");
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T *smem = reinterpret_cast<T *>(smem_raw);
  const T *X = static_cast<const T *>(args.x);
  const T *F = static_cast<const T *>(args.filter);

  const ConvShape cs = ConvShape::of<Geo, G::BLOCK_K, ITER>(args);
  const int2 tile = tile_coords(blockIdx.x, ceil_div(cs.m, G::BLOCK_M), ceil_div(cs.k, G::BLOCK_N), G::GROUP_M);
  const int m0 = tile.x * G::BLOCK_M, n0 = tile.y * G::BLOCK_N;
  const KSlice slice = k_slice<1, G::SPLIT_K>(cs.steps, blockIdx.z);  // in pipeline steps

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm0 = (warp % G::WARPS_M) * G::WARP_M, wn0 = (warp / G::WARPS_M) * G::WARP_N;

  float acc[G::TILES_M][G::TILES_N][4];
  clear<G>(acc);

  // A's chunks: VEC channels, or for FewChannels 16 bytes of taps gathered one by one (B's width VEC must divide
  // R·S·C there, often 1: A's chunks are wider so that a thread keeps few rows).
  constexpr int A_CHUNK = ITER != ConvIterator::FewChannels ? G::VEC
                          : (16 / int(sizeof(T)) < G::BLOCK_K ? 16 / int(sizeof(T)) : G::BLOCK_K);
  ActivationTile<T, G::BLOCK_M, G::BLOCK_K, A_CHUNK, G::THREADS, Geo, ITER> a_tile;
  a_tile.init(cs, m0);
  StepCursor<G::BLOCK_K, ITER> cursor(cs, slice.begin);
  auto load_step = [&](int, T *sa, T *sb) {  // called for the steps in order
    const ConvStep step = cursor.next(cs);
    a_tile.template copy<G::LDA_S>(sa, X, cs, step);
    copy_tile<T, G::BLOCK_N, G::BLOCK_K, G::LDB_S, G::VEC, G::THREADS>(sb, F, cs.taps, n0, step.col0, cs.k, step.col_end);
  };
  mma_mainloop<G>(acc, smem, slice.tiles, load_step, 0, wm0, wn0, lane);
  store_tile<G>(acc, ConvShape::output<Geo>(args), m0, n0, wm0, wn0, lane);
}

// ---- CUDA cores, exact fp32: G = SimtGemm<float, Layout::NT, ...> ---------------------------------------------------

template <class G, class Geo, ConvIterator ITER> __device__ void conv2d_simt(const ConvArgs &args) {
  using T = typename G::T;
  using V = Vec<T, G::VEC>;
  static_assert(G::LAYOUT == Layout::NT, "conv2d tiles are nt tiles");
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T *smem = reinterpret_cast<T *>(smem_raw);
  const T *X = static_cast<const T *>(args.x);
  const T *F = static_cast<const T *>(args.filter);

  const ConvShape cs = ConvShape::of<Geo, G::BLOCK_K, ITER>(args);
  const int2 tile = tile_coords(blockIdx.x, ceil_div(cs.m, G::BLOCK_M), ceil_div(cs.k, G::BLOCK_N), G::GROUP_M);
  const int m0 = tile.x * G::BLOCK_M, n0 = tile.y * G::BLOCK_N;
  const KSlice slice = k_slice<1, G::SPLIT_K>(cs.steps, blockIdx.z);

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wm0 = (warp % G::WARPS_M) * G::WARP_M, wn0 = (warp / G::WARPS_M) * G::WARP_N;
  const int lm = lane / G::LANES_N, ln = lane % G::LANES_N;

  T acc[G::ROWS][G::COLS];
#pragma unroll
  for (int i = 0; i < G::ROWS; ++i)
#pragma unroll
    for (int j = 0; j < G::COLS; ++j) acc[i][j] = T(0);

  using Tile = ActivationTile<T, G::BLOCK_M, G::BLOCK_K, G::VEC, G::THREADS, Geo, ITER>;
  static_assert(Tile::LOADS == G::LOADS_A, "the activation loads are SimtGemm's loads of A");
  Tile a_tile;
  a_tile.init(cs, m0);
  // The filter rows this thread loads (chunk / (BLOCK_K / VEC)), and its column inside a step.
  constexpr int B_PER_ROW = G::BLOCK_K / G::VEC;
  const T *b_row[G::LOADS_B];
  int b_col[G::LOADS_B];
#pragma unroll
  for (int i = 0; i < G::LOADS_B; ++i) {
    const int chunk = tid + i * G::THREADS, n = n0 + chunk / B_PER_ROW;
    b_col[i] = (chunk % B_PER_ROW) * G::VEC;
    b_row[i] = G::has_chunk_b(chunk) && n < cs.k ? F + static_cast<size_t>(n) * cs.taps : nullptr;
  }

  V ra[G::LOADS_A], rb[G::LOADS_B];
  StepCursor<G::BLOCK_K, ITER> cursor(cs, slice.begin);
  auto fetch = [&](int) {  // called for the steps in order
    const ConvStep step = cursor.next(cs);
    a_tile.read(ra, X, cs, step);
#pragma unroll
    for (int i = 0; i < G::LOADS_B; ++i) {
      const int col = step.col0 + b_col[i];
#pragma unroll
      for (int e = 0; e < G::VEC; ++e) rb[i].v[e] = T(0);
      if (b_row[i] != nullptr && col < step.col_end) rb[i] = *reinterpret_cast<const V *>(b_row[i] + col);
    }
  };
  simt_mainloop<G>(acc, smem, slice.tiles, fetch, ra, rb, wm0, wn0, lm, ln);
  simt_store_tile<G>(acc, ConvShape::output<Geo>(args), m0, n0, wm0, wn0, lm, ln);
}

// ---- split-K: Y = epilogue(workspace) -----------------------------------------------------------------------------

template <class T, Epilogue E, class Geo> __device__ void conv2d_splitk_reduce(const ConvArgs &args) {
  splitk_reduce<T, E>(ConvShape::output<Geo>(args));
}

// ---- NCHW -> NHWC: the exported call's copy of an input (or filter) given in torch's default layout --------------

// X[n][hw][c] = X_nchw[n][c][hw], through 32 x 32 tiles in shared memory (dynamic, 32 x 33 elements: the padding
// column keeps the transposed reads on distinct banks), 256 threads a block, the grid striding over the tiles.
template <class T> __device__ void nchw_to_nhwc(const T *src, T *dst, int batch, int c, int h, int w) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T *tile = reinterpret_cast<T *>(smem_raw);
  const int hw = h * w, tiles_c = ceil_div(c, 32), tiles_hw = ceil_div(hw, 32);
  const long long tiles = static_cast<long long>(batch) * tiles_c * tiles_hw;
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  for (long long t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int n = static_cast<int>(t / (tiles_c * tiles_hw)), rest = static_cast<int>(t % (tiles_c * tiles_hw));
    const int c0 = (rest / tiles_hw) * 32, p0 = (rest % tiles_hw) * 32;
    for (int i = ty; i < 32; i += 8)
      if (c0 + i < c && p0 + tx < hw) tile[i * 33 + tx] = src[(static_cast<size_t>(n) * c + c0 + i) * hw + p0 + tx];
    __syncthreads();
    for (int i = ty; i < 32; i += 8)
      if (p0 + i < hw && c0 + tx < c) dst[(static_cast<size_t>(n) * hw + p0 + i) * c + c0 + tx] = tile[tx * 33 + i];
    __syncthreads();
  }
}

}  // namespace tracea
