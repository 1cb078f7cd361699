// FlashAttention-3-style attention forward for sm_90a: out = softmax(Q·Kᵀ·scale + mask)·V with TMA, mbarrier
// pipelines, wgmma and warp specialisation; fp16/bf16 in, fp32 accumulation and softmax statistics (docs/attention.md).
//
// The kernel ABI is the fa2 family's (attention_fa2.cuh: TRACEA_ATTENTION_PARAMS, lse, the bottom-right causal mask,
// grouped-query heads) behind three TMA tensor maps, passed by value as __grid_constant__ parameters:
//   map_q  Q as (D, seq_q, batch·heads), box (64, BLOCK_M, 1)       map_k, map_v  K, V as (D, seq_k, batch·kv_heads),
//          box (64, BLOCK_N, 1); 128-byte swizzle, zeros past the ends (so rows past seq_q / seq_k read 0)
// which read the layout (B, H, L, D) only (rows of one head contiguous; head b·H + h one head stride after b·H + h - 1).
//
// A CTA owns BLOCK_M = 64·CONSUMERS query rows of one (batch, head): blockIdx.x the query block (reversed for CAUSAL,
// so the blocks with the most keys start first), blockIdx.y batch·heads + head.
//   warpgroup 0 (producer)   one thread loads Q once (q_full), then for each key block the CTA needs (causal: none
//                            past its last row's diagonal) waits for the ring slot to be free (empty), and loads K
//                            (full_k) and V (full_v) with expect_tx: STAGES slots in flight
//   warpgroups 1..CONSUMERS  each owns 64 query rows (one m64 wgmma); per key block:
//     S = Q·Kᵀ          wgmma m64nBLOCK_Nk16 over D in k16 steps, both operands from shared memory (K-major: K's rows
//                       are keys with D contiguous, the GEMM family's layout nt)
//     softmax           in registers, log2 domain (scale·log2(e) folded in), masked entries -inf before the max; row
//                       statistics over the four lanes of a quad; O and l rescaled by exp2(m_old - m)
//     O += P·V          wgmma m64nDk16 with A = P from registers (the accumulator fragment of 16 columns of S is the
//                       A fragment of one k16 step), B = V (N-major: D contiguous, read transposed, as layout nn)
//     release           one thread of the warpgroup arrives on the slot's empty barrier
//                       (OVERLAP: block j's S and block j-1's P·V issued together, block j's softmax while P·V runs;
//                       fa3_consume)
//   epilogue            O / l to global memory in pairs (rows < seq_q), lse = (m + log2 l)·ln 2
//
// Shared memory (from a 1024-byte boundary: the swizzle repeats every 1024 bytes): Q as D/64 chunks of BLOCK_M rows x
// 128 bytes; STAGES K tiles and STAGES V tiles, each D/64 chunks of BLOCK_N rows x 128 bytes; the mbarriers.
//
// The translation unit defines the GEMM family's WG_* configuration (WG_DTYPE the element type, WG_TILE_M BLOCK_M,
// WG_TILE_N BLOCK_N, WG_B_KMAJOR 1, ...) and pastes gemm_wgmma.cuh without its entry point before this file: its
// mbarrier, TMA, descriptor and wgmma helpers (wg::) are this kernel's (tracea_cli/ops/attention/families/wgmma.py).
#pragma once

#include "attention_fa2.cuh"
#include "attention_wgmma_mma.cuh"

namespace tracea {

template <int HEAD_DIM_, int BLOCK_N_, int STAGES_, int CONSUMERS_, bool OVERLAP_, bool CAUSAL_, bool LSE_>
struct Fa3 {
  using T = wg::elem_t;
  static constexpr int D = HEAD_DIM_, BLOCK_N = BLOCK_N_, STAGES = STAGES_, CONSUMERS = CONSUMERS_;
  static constexpr bool OVERLAP = OVERLAP_, CAUSAL = CAUSAL_, LSE = LSE_;
  static constexpr int ROWS = 64;  // query rows of one consumer warpgroup: one m64 wgmma
  static constexpr int BLOCK_M = ROWS * CONSUMERS;
  static constexpr int THREADS = 128 * (CONSUMERS + 1);
  static constexpr int CHUNK = 64;  // elements of one 128-byte swizzle row: a TMA box's width
  static constexpr int CHUNKS = D / CHUNK;
  static constexpr int S_REGS = BLOCK_N / 2, O_REGS = D / 2;  // fp32 accumulators per thread
  static constexpr unsigned Q_CHUNK_BYTES = BLOCK_M * 128, KV_CHUNK_BYTES = BLOCK_N * 128;
  static constexpr unsigned Q_BYTES = Q_CHUNK_BYTES * CHUNKS, KV_BYTES = KV_CHUNK_BYTES * CHUNKS;
  static constexpr int BARRIERS = 1 + 3 * STAGES;  // q_full, then full_k, full_v and empty per slot
  // 1024 bytes of slack to align the base, Q, the K and V rings, the barriers
  static constexpr int SMEM_BYTES = 1024 + int(Q_BYTES) + 2 * STAGES * int(KV_BYTES) + 8 * BARRIERS;

  static_assert(sizeof(T) == 2, "the wgmma attention kernel runs fp16 and bf16");
  static_assert(D == 64 || D == 128, "head dims 64 and 128 (one wgmma N for O)");
  static_assert(BLOCK_N == 64 || BLOCK_N == 128, "key blocks of 64 or 128 (one wgmma N for S)");
  static_assert(CONSUMERS == 1 || CONSUMERS == 2, "one or two consumer warpgroups");
  static_assert(STAGES >= 2, "two stages at least");
  static_assert(WG_TILE_M == BLOCK_M && WG_TILE_N == BLOCK_N && WG_STAGES == STAGES && WG_CONSUMERS == CONSUMERS &&
                    WG_B_KMAJOR == 1 && WG_CLUSTER_M == 1 && wg::kAcc == S_REGS && wg::kThreads == THREADS,
                "the GEMM header's configuration differs from the tile");
};

// A 3-D TMA load (one box of rows x 128 bytes) into this CTA's shared memory, completing on `bar`.
__device__ __forceinline__ void tma_load_rows(unsigned dst, const wg::TensorMap *map, unsigned bar, int col, int row,
                                              int head) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];" ::"r"(
          dst),
      "l"(map), "r"(bar), "r"(col), "r"(row), "r"(head)
      : "memory");
}

// O += P·V for one k16 step: A = P (four registers), B = 16 keys of V read N-major (transposed).
template <int N> __device__ __forceinline__ void mma_pv(float (&o)[N], const unsigned (&p)[4], unsigned long long v) {
#if WG_DTYPE == 0
  wgmma_rs_f16<1>(o, p, v, 1);
#else
  wgmma_rs_bf16<1>(o, p, v, 1);
#endif
}

// 2^x by the special-function unit (ex2.approx.ftz: relative error about 2^-22; exp2(-inf) = +0).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Pins registers at this point of the program: after a wait, the compiler takes them as changed (an asynchronous
// wgmma wrote them); before wgmma.fence, it has to have computed them (the fence orders register writes before the
// asynchronous reads of the wgmmas after it; CUTLASS's warpgroup_fence_operand).
template <int N> __device__ __forceinline__ void touch_regs(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int N> __device__ __forceinline__ void touch_regs(unsigned (&a)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(a[i][j])::"memory");
}

struct Fa3Ring {
  unsigned q, k, v, bars;  // shared-window addresses: Q, slot 0 of K and of V, the mbarriers
  __device__ unsigned q_full() const { return bars; }
  __device__ unsigned full_k(int s) const { return bars + 8 * (1 + s); }
  template <class F> __device__ unsigned full_v(int s) const { return bars + 8 * (1 + F::STAGES + s); }
  template <class F> __device__ unsigned empty(int s) const { return bars + 8 * (1 + 2 * F::STAGES + s); }
};

// Where a CTA works: its (batch, head), K/V head, first query row and the key blocks it needs.
struct Fa3Block {
  int bh, batch, head, kv_bh, m0, blocks_n;
};

template <class F> __device__ __forceinline__ Fa3Block fa3_block(const AttentionArgs &args) {
  Fa3Block b;
  const int blocks_m = static_cast<int>(gridDim.x);
  const int block_m = F::CAUSAL ? blocks_m - 1 - static_cast<int>(blockIdx.x) : static_cast<int>(blockIdx.x);
  b.bh = static_cast<int>(blockIdx.y);
  b.batch = b.bh / args.heads;
  b.head = b.bh % args.heads;
  b.kv_bh = b.batch * args.kv_heads + b.head / (args.heads / args.kv_heads);
  b.m0 = block_m * F::BLOCK_M;
  // causal: row i sees keys j <= i + (seq_k - seq_q); the block stops after its last row's last key
  const int keys = F::CAUSAL ? min(args.seq_k, b.m0 + F::BLOCK_M + args.seq_k - args.seq_q) : args.seq_k;
  b.blocks_n = keys > 0 ? (keys + F::BLOCK_N - 1) / F::BLOCK_N : 0;
  return b;
}

template <class F>
__device__ __forceinline__ void fa3_produce(const Fa3Ring &ring, const Fa3Block &b, const wg::TensorMap *map_q,
                                            const wg::TensorMap *map_k, const wg::TensorMap *map_v) {
  wg::mbar_expect_tx(ring.q_full(), F::Q_BYTES);
#pragma unroll
  for (int c = 0; c < F::CHUNKS; ++c)
    tma_load_rows(ring.q + c * F::Q_CHUNK_BYTES, map_q, ring.q_full(), c * F::CHUNK, b.m0, b.bh);
  int slot = 0;
  unsigned phase = 0;
  for (int j = 0; j < b.blocks_n; ++j) {
    wg::mbar_wait(ring.empty<F>(slot), phase ^ 1);  // the first pass through the ring finds every slot free
    const int n0 = j * F::BLOCK_N;
    const unsigned k_slot = ring.k + slot * F::KV_BYTES, v_slot = ring.v + slot * F::KV_BYTES;
    wg::mbar_expect_tx(ring.full_k(slot), F::KV_BYTES);
#pragma unroll
    for (int c = 0; c < F::CHUNKS; ++c)
      tma_load_rows(k_slot + c * F::KV_CHUNK_BYTES, map_k, ring.full_k(slot), c * F::CHUNK, n0, b.kv_bh);
    wg::mbar_expect_tx(ring.full_v<F>(slot), F::KV_BYTES);
#pragma unroll
    for (int c = 0; c < F::CHUNKS; ++c)
      tma_load_rows(v_slot + c * F::KV_CHUNK_BYTES, map_v, ring.full_v<F>(slot), c * F::CHUNK, n0, b.kv_bh);
    if (++slot == F::STAGES) {
      slot = 0;
      phase ^= 1;
    }
  }
}

// One consumer warpgroup's state and steps: its 64 query rows' O accumulators and row statistics, the S tile of
// the current key block (P in place after the softmax) and P's A fragments.
//
// The m64nN accumulator fragment: thread (warp, lane) holds rows warp·16 + lane/4 (+8) and, per 8-column group i,
// columns 8i + 2·(lane%4) (+1): register 4i + 2h + e is (row r + 8h, column 8i + 2·(lane%4) + e).
template <class F> struct Fa3Consumer {
  using T = typename F::T;
  const Fa3Ring &ring;
  const AttentionArgs &args;
  int lane, r, row0, offset;
  unsigned q_slab;
  float scale_log2;
  float o[F::O_REGS];
  float s[F::S_REGS];
  unsigned pa[F::BLOCK_N / 16][4];
  float row_max[2], row_sum[2];  // rows r and r + 8, log2 domain; per-lane partial sums

  __device__ Fa3Consumer(const Fa3Ring &ring_, const Fa3Block &b, const AttentionArgs &args_, int consumer)
      : ring(ring_), args(args_) {
    const int tid = threadIdx.x % 128, warp = tid / 32;
    lane = tid % 32;
    row0 = b.m0 + consumer * F::ROWS;  // this warpgroup's first query row
    r = row0 + warp * 16 + lane / 4;
    offset = args.seq_k - args.seq_q;  // causal: row i sees keys j <= i + offset
    q_slab = ring.q + consumer * F::ROWS * 128;
    scale_log2 = 1.4426950408889634f / sqrtf(float(F::D));  // 1/sqrt(D) · log2(e)
#pragma unroll
    for (int i = 0; i < F::O_REGS; ++i) o[i] = 0.f;
    const float neg_inf = __uint_as_float(0xff800000u);
    row_max[0] = row_max[1] = neg_inf;
    row_sum[0] = row_sum[1] = 0.f;
  }

  // S = Q·Kᵀ issued (not waited for) once slot's K is in: a k16 step moves 32 bytes along the swizzled 128-byte rows;
  // every 4 steps the next 64-column chunk. The caller fences and commits.
  __device__ __forceinline__ void issue_s(int slot) {
    const unsigned k_slot = ring.k + slot * F::KV_BYTES;
#pragma unroll
    for (int kk = 0; kk < F::D / 16; ++kk) {
      const unsigned at = (kk % 4) * 32;
      wg::mma(s, wg::smem_desc(q_slab + (kk / 4) * F::Q_CHUNK_BYTES + at, 16),
              wg::smem_desc(k_slot + (kk / 4) * F::KV_CHUNK_BYTES + at, 16), kk != 0);
    }
  }

  // O += P·V issued once slot's V is in: a k16 step is 16 rows (keys) of 128 bytes; V's 64-column chunks are one
  // tile chunk (lbo) apart. The caller fences and commits.
  __device__ __forceinline__ void issue_pv(int slot) {
    const unsigned v_slot = ring.v + slot * F::KV_BYTES;
#pragma unroll
    for (int kk = 0; kk < F::BLOCK_N / 16; ++kk)
      mma_pv(o, pa[kk], wg::smem_desc(v_slot + kk * 16 * 128, F::KV_CHUNK_BYTES));
  }

  // Masks S of the key block at n0 where it crosses the diagonal or the end of the keys (-inf, before the max), then
  // the online softmax in the log2 domain (the scale folded into one FMA): m = max(m, rowmax S · scale·log2 e),
  // P = exp2(S · scale·log2 e - m) in place, l = l · exp2(m_old - m) + rowsum P. Returns O's factor exp2(m_old - m)
  // per row in `correction` (O itself may still be in a wgmma's hands).
  __device__ __forceinline__ void softmax(int n0, float (&correction)[2]) {
    const float neg_inf = __uint_as_float(0xff800000u);
    const bool masked = n0 + F::BLOCK_N > args.seq_k || (F::CAUSAL && n0 + F::BLOCK_N - 1 > row0 + offset);
    if (masked) {
#pragma unroll
      for (int i = 0; i < F::BLOCK_N / 8; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int row = r + 8 * h, col = n0 + 8 * i + 2 * (lane % 4) + e;
            if (col >= args.seq_k || (F::CAUSAL && col > row + offset)) s[4 * i + 2 * h + e] = neg_inf;
          }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = neg_inf;
#pragma unroll
      for (int i = 0; i < F::BLOCK_N / 8; ++i) mx = fmaxf(mx, fmaxf(s[4 * i + 2 * h], s[4 * i + 2 * h + 1]));
      mx = fmaxf(row_max[h], quad_max(mx) * scale_log2);
      const float base = mx == neg_inf ? 0.f : mx;  // a row with no visible key yet: keep everything at 0
      correction[h] = fast_exp2(row_max[h] - base);
      row_max[h] = mx;
      float sum = 0.f;
#pragma unroll
      for (int i = 0; i < F::BLOCK_N / 8; ++i)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float p = fast_exp2(fmaf(s[4 * i + 2 * h + e], scale_log2, -base));
          s[4 * i + 2 * h + e] = p;
          sum += p;
        }
      row_sum[h] = row_sum[h] * correction[h] + sum;  // the quad adds the lanes' partial sums at the end
    }
  }

  __device__ __forceinline__ void rescale(const float (&correction)[2]) {
#pragma unroll
    for (int i = 0; i < F::D / 8; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        o[4 * i + 2 * h] *= correction[h];
        o[4 * i + 2 * h + 1] *= correction[h];
      }
  }

  // P as the A fragments of the k16 steps: step kk is S's column groups 2kk (a0: row r, a1: row r + 8) and 2kk + 1
  // (a2, a3), each register a pair of adjacent columns rounded to T.
  __device__ __forceinline__ void convert() {
#pragma unroll
    for (int kk = 0; kk < F::BLOCK_N / 16; ++kk)
#pragma unroll
      for (int a = 0; a < 4; ++a) pa[kk][a] = pack_pair<T>(s[8 * kk + 2 * a], s[8 * kk + 2 * a + 1]);
  }

  __device__ __forceinline__ void release(int slot) {
    if (threadIdx.x % 128 == 0) wg::mbar_arrive(ring.empty<F>(slot));  // K and V read: the producer may refill it
  }

  // O / l (0 for a row that sees no key), pairs of adjacent columns straight to global memory; lse.
  __device__ __forceinline__ void store(const Fa3Block &b) {
    T *go = static_cast<T *>(args.out) + b.batch * (long long)args.q_sb + b.head * (long long)args.q_sh;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float total = quad_sum(row_sum[h]);
      const float inv = total > 0.f ? 1.f / total : 0.f;
      const int row = r + 8 * h;
      if (row < args.seq_q) {
        T *dst = go + row * (long long)args.q_sr + 2 * (lane % 4);
#pragma unroll
        for (int i = 0; i < F::D / 8; ++i)
          *reinterpret_cast<unsigned *>(dst + 8 * i) =
              pack_pair<T>(o[4 * i + 2 * h] * inv, o[4 * i + 2 * h + 1] * inv);
        if (F::LSE && lane % 4 == 0)
          args.lse[static_cast<long long>(b.bh) * args.seq_q + row] =
              (row_max[h] + log2f(total)) * 0.6931471805599453f;
      }
    }
  }
};

// The ring position of key block j's slot, and its full barriers' parity: both advance together.
struct RingCursor {
  int slot = 0;
  unsigned phase = 0;
  template <int STAGES> __device__ __forceinline__ void advance() {
    if (++slot == STAGES) {
      slot = 0;
      phase ^= 1;
    }
  }
};

// Without OVERLAP, each key block in turn: S, wait, softmax, P·V, wait (the other consumer warpgroup keeps the
// tensor cores busy meanwhile). With OVERLAP (FlashAttention-3's intra-warpgroup overlap), block j's S = Q·K_jᵀ and
// block j - 1's O += P·V_{j-1} are issued together, and block j's softmax runs while P·V_{j-1} is still on the tensor
// cores; O is rescaled and P_j converted once that wgmma group has completed.
template <class F>
__device__ __forceinline__ void fa3_consume(const Fa3Ring &ring, const Fa3Block &b, const AttentionArgs &args,
                                            int consumer) {
  Fa3Consumer<F> c(ring, b, args, consumer);
  float correction[2];
  RingCursor at;
  wg::mbar_wait(ring.q_full(), 0);
  if (!F::OVERLAP) {
    for (int j = 0; j < b.blocks_n; ++j) {
#pragma unroll
      for (int i = 0; i < F::S_REGS; ++i) c.s[i] = 0.f;
      touch_regs(c.s);
      wg::mbar_wait(ring.full_k(at.slot), at.phase);
      wg::wgmma_fence();
      c.issue_s(at.slot);
      wg::wgmma_commit();
      wg::wgmma_wait<0>();
      touch_regs(c.s);
      c.softmax(j * F::BLOCK_N, correction);
      c.rescale(correction);
      c.convert();
      touch_regs(c.o);  // the rescaled O and P are written before the fence
      touch_regs(c.pa);
      wg::mbar_wait(ring.full_v<F>(at.slot), at.phase);
      wg::wgmma_fence();
      c.issue_pv(at.slot);
      wg::wgmma_commit();
      wg::wgmma_wait<0>();
      touch_regs(c.o);
      c.release(at.slot);
      at.template advance<F::STAGES>();
    }
  } else if (b.blocks_n > 0) {
    // block 0: S, softmax, P (O is still 0)
    wg::mbar_wait(ring.full_k(at.slot), at.phase);
    wg::wgmma_fence();
    c.issue_s(at.slot);
    wg::wgmma_commit();
    wg::wgmma_wait<0>();
    touch_regs(c.s);
    c.softmax(0, correction);
    c.convert();
    RingCursor previous = at;
    at.template advance<F::STAGES>();
    for (int j = 1; j < b.blocks_n; ++j) {
      touch_regs(c.s);  // read into P: the next S may overwrite it
      touch_regs(c.o);
      touch_regs(c.pa);
      wg::mbar_wait(ring.full_k(at.slot), at.phase);
      wg::mbar_wait(ring.full_v<F>(previous.slot), previous.phase);
      wg::wgmma_fence();
      c.issue_s(at.slot);  // S_j first: its softmax starts while P·V_{j-1} runs
      wg::wgmma_commit();
      c.issue_pv(previous.slot);
      wg::wgmma_commit();
      wg::wgmma_wait<1>();  // S_j has completed (groups complete in order)
      touch_regs(c.s);
      c.softmax(j * F::BLOCK_N, correction);
      wg::wgmma_wait<0>();  // P·V_{j-1} has completed: O and P's registers are free, slot j - 1 is read
      touch_regs(c.o);
      touch_regs(c.pa);
      touch_regs(c.s);  // P_j's conversion (from S) stays after the wait, as O's rescaling does
      c.release(previous.slot);
      c.rescale(correction);
      c.convert();
      previous = at;
      at.template advance<F::STAGES>();
    }
    touch_regs(c.o);
    touch_regs(c.pa);
    wg::mbar_wait(ring.full_v<F>(previous.slot), previous.phase);
    wg::wgmma_fence();
    c.issue_pv(previous.slot);
    wg::wgmma_commit();
    wg::wgmma_wait<0>();
    touch_regs(c.o);
    c.release(previous.slot);
  }
  c.store(b);
}

template <class F>
__device__ void fa3_forward(const wg::TensorMap *map_q, const wg::TensorMap *map_k, const wg::TensorMap *map_v,
                            const AttentionArgs &args) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  Fa3Ring ring;
  ring.q = (wg::smem_u32(smem_raw) + 1023) & ~1023u;
  ring.k = ring.q + F::Q_BYTES;
  ring.v = ring.k + F::STAGES * F::KV_BYTES;
  ring.bars = ring.v + F::STAGES * F::KV_BYTES;
  const Fa3Block b = fa3_block<F>(args);

  if (threadIdx.x == 0) {
    wg::mbar_init(ring.q_full(), 1);
    for (int s = 0; s < F::STAGES; ++s) {
      wg::mbar_init(ring.full_k(s), 1);
      wg::mbar_init(ring.full_v<F>(s), 1);
      wg::mbar_init(ring.empty<F>(s), F::CONSUMERS);  // one thread of each consumer warpgroup arrives
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  // the warpgroup index through a shuffle: warp-uniform as ptxas sees it, so each role's code is its own
  // register-allocation region under its setmaxnreg
  const int warpgroup = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);
  if (warpgroup == 0) {
    if (F::CONSUMERS > 1) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (threadIdx.x == 0) fa3_produce<F>(ring, b, map_q, map_k, map_v);
  } else {
    if (F::CONSUMERS > 1) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    fa3_consume<F>(ring, b, args, warpgroup - 1);
  }
}

}  // namespace tracea
