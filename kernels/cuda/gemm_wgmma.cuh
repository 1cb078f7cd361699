// Hopper GEMM family (sm_90a): C = epilogue(A·B) with wgmma, TMA and warp specialisation.
//
// One CTA computes TILE_M x TILE_N tiles of C. Warpgroup 0 is the producer: one thread streams A and B tiles into a
// ring of STAGES shared-memory slots with TMA (cp.async.bulk.tensor), each slot completing on its `full` mbarrier.
// Warpgroups 1..CONSUMERS are consumers: they multiply with wgmma straight from shared memory and hand each slot back
// through its `empty` mbarrier. Slot index and mbarrier parity run on across tiles, so with PERSISTENT the producer
// already fetches the next tile while consumers run the epilogue. Two schedules for two consumers:
//   cooperative  both consumers work on every tile, each on TILE_M/2 rows; their epilogues leave the tensor cores idle.
//   pingpong     consumers take turns at whole tiles: one runs its main loop while the other runs its epilogue, the
//                turn passed through a pair of mbarriers (which also keeps the shared ring's parities unambiguous).
// With CLUSTER_M = 2, two CTAs of a cluster take vertically adjacent tiles and share B: each loads half of the B
// tile and multicasts it to both, so a slot is free only when the consumers of both CTAs have released it.
//
// Configuration (the generated translation unit defines these before including this file):
//   WG_DTYPE      0 fp16, 1 bf16, 2 tf32 (operands and C); accumulation is always fp32
//   WG_TILE_M     64..256, a multiple of 64 * WG_CONSUMERS        WG_TILE_N  64, 128, 192 or 256
//   WG_STAGES     shared-memory ring depth                        WG_CONSUMERS  1 or 2 consumer warpgroups
//   WG_CLUSTER_M  1 or 2 (B multicast across the cluster)         WG_PERSISTENT 0: one tile per cluster, 1: loop
//   WG_GROUP_M    tile order: this many tile rows are walked column by column before moving on (L2 reuse)
//   WG_B_KMAJOR   1: B is N x K (layout nt), 0: B is K x N (layout nn, wgmma reads it transposed)
//   WG_EPILOGUE   0 none, 1 bias, 2 bias+ReLU, 3 bias+SiLU, 4 bias+GELU, 5 bias+residual
//   WG_STORE_TMA  0: registers -> global stores; 1: registers -> swizzled shared memory -> TMA store
//   WG_PINGPONG   0: cooperative, 1: pingpong (needs WG_CONSUMERS = 2)
//   WG_SPLIT_K    slices of K per output tile (default 1). Above 1 the work items are the slices of every tile; each
//                 adds its raw sums into an fp32 workspace (M x N, leading dimension N, zero before the launch) and
//                 gemm_wgmma_splitk (gemm_wgmma_splitk.cuh) then applies the epilogue, writes C and zeroes the
//                 workspace again. For problems whose tiles leave SMs idle (few tiles, a long K).
//
// ABI (docs/kernel-abi.md, "Hopper family"): tensor maps for A, B and C are passed by value as __grid_constant__
// parameters; every tile box is 128 bytes wide with the 128-byte swizzle, which the wgmma descriptors mirror.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "gemm_wgmma_mma.cuh"

#ifndef WG_HANG_CYCLES
#define WG_HANG_CYCLES (1ll << 32)  // ~2 s: a wait this long means a broken pipeline; trap rather than hang the GPU
#endif

namespace wg {

typedef unsigned int u32;
typedef unsigned long long u64;

#if WG_DTYPE == 0
typedef __half elem_t;
#elif WG_DTYPE == 1
typedef __nv_bfloat16 elem_t;
#else
typedef float elem_t;
#endif

// The driver's CUtensorMap: 128 opaque bytes, 64-byte aligned.
struct __align__(64) TensorMap {
  u64 opaque[16];
};

constexpr int kElemBytes = sizeof(elem_t);
constexpr int kTileM = WG_TILE_M;
constexpr int kTileN = WG_TILE_N;
constexpr int kTileK = 128 / kElemBytes;  // one 128-byte swizzle row of K per stage
constexpr int kMmaK = 32 / kElemBytes;    // K of one wgmma: 16 for 16-bit operands, 8 for tf32
constexpr int kStages = WG_STAGES;
constexpr int kConsumers = WG_CONSUMERS;
constexpr int kCluster = WG_CLUSTER_M;
constexpr bool kPingpong = WG_PINGPONG != 0;
#ifndef WG_SPLIT_K
#define WG_SPLIT_K 1
#endif
constexpr int kSplitK = WG_SPLIT_K;
constexpr int kThreads = 128 * (kConsumers + 1);
constexpr int kConsumerRows = kPingpong ? kTileM : kTileM / kConsumers;  // rows one consumer owns in a tile
constexpr int kStageUsers = kPingpong ? 1 : kConsumers;                   // consumer warpgroups reading one slot
constexpr int kSlabs = kConsumerRows / 64;          // m64 wgmmas per consumer and k-step
constexpr int kAcc = kTileN / 2;                    // fp32 accumulators per thread and slab
constexpr bool kBKMajor = WG_B_KMAJOR != 0;
constexpr int kChunkN = 128 / kElemBytes;           // columns of one 128-byte swizzle chunk (N-major B, C staging)

constexpr u32 kStageBytesA = kTileM * 128;
constexpr u32 kStageBytesB = kTileN * 128;
constexpr u32 kStageBytesC = WG_STORE_TMA ? kConsumers * kConsumerRows * kTileN * kElemBytes : 0;

static_assert(kConsumerRows % 64 == 0 && kConsumerRows * kConsumers >= kTileM, "each consumer owns whole m64 slabs");
static_assert(!kPingpong || kConsumers == 2, "pingpong alternates two consumer warpgroups");
static_assert(kTileN % 64 == 0 && kTileN <= 256, "wgmma N is 64..256 here");
static_assert(kSlabs * kAcc <= 128, "accumulators must fit the consumer's registers");
static_assert(kBKMajor || kElemBytes == 2, "tf32 wgmma reads B K-major only");
static_assert(kCluster == 1 || kCluster == 2, "clusters of 1 or 2 CTAs");
static_assert(kSplitK >= 1 && (kSplitK == 1 || !WG_STORE_TMA), "split-K's slices add into the workspace directly");

// ---- shared memory, mbarriers, proxies ------------------------------------------------------------------------------

__device__ __forceinline__ u32 smem_u32(const void* p) { return static_cast<u32>(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count));
}

__device__ __forceinline__ void mbar_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ bool mbar_try_wait(u32 bar, u32 parity) {
  u32 done;
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}

// Waits for the phase of parity `parity` to complete.
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
  if (mbar_try_wait(bar, parity)) return;
  const long long began = clock64();
  while (!mbar_try_wait(bar, parity)) {
    if (clock64() - began > WG_HANG_CYCLES) __trap();
  }
}

__device__ __forceinline__ void mbar_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

// Arrives on the mbarrier at the same shared-memory offset in CTA `cta` of this cluster. The slot it frees was read
// by wgmmas that have completed (wgmma.wait_group), so CTA-scope release ordering is enough; a cluster-scope release
// here also waits for the thread's outstanding memory operations (see docs/hopper-notes.md for what it cost).
__device__ __forceinline__ void mbar_arrive_in(u32 bar, u32 cta) {
  if (kCluster == 1) {
    mbar_arrive(bar);
  } else {
    asm volatile(
        "{\n.reg .b32 remote;\n"
        "mapa.shared::cluster.u32 remote, %0, %1;\n"
        "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(bar),
        "r"(cta)
        : "memory");
  }
}

__device__ __forceinline__ u32 cluster_rank() {
  u32 r = 0;
  if (kCluster > 1) asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

__device__ __forceinline__ void named_sync(u32 id) { asm volatile("bar.sync %0, 128;" ::"r"(id) : "memory"); }

// Generic-proxy shared-memory writes become visible to TMA (async proxy) reads.
__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// ---- TMA --------------------------------------------------------------------------------------------------------------

__device__ __forceinline__ void tma_load(u32 dst, const TensorMap* map, u32 bar, int c0, int c1) {
  if (kCluster == 1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(dst),
        "l"(map), "r"(bar), "r"(c0), "r"(c1)
        : "memory");
  } else {
    // Lands at the same offset, and completes on the same mbarrier, in every CTA of the cluster.
    const unsigned short all = (1u << kCluster) - 1;
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(dst),
        "l"(map), "r"(bar), "r"(c0), "r"(c1), "h"(all)
        : "memory");
  }
}

__device__ __forceinline__ void tma_load_local(u32 dst, const TensorMap* map, u32 bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(dst),
      "l"(map), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}

__device__ __forceinline__ void tma_store(const TensorMap* map, u32 src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(map), "r"(src),
               "r"(c0), "r"(c1)
               : "memory");
}

__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
__device__ __forceinline__ void tma_store_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
__device__ __forceinline__ void tma_store_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

// ---- wgmma --------------------------------------------------------------------------------------------------------------

// Shared-memory matrix descriptor with the 128-byte swizzle. K-major tiles: rows of 128 bytes, 8-row groups 1024
// bytes apart (SBO); LBO is unused. N-major B: 64-column chunks `lbo` bytes apart, 8-row groups of K 1024 apart.
__device__ __forceinline__ u64 smem_desc(u32 addr, u32 lbo) {
  return static_cast<u64>((addr & 0x3FFFF) >> 4) | (static_cast<u64>(lbo >> 4) << 16) |
         (static_cast<u64>(1024 >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int Pending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(Pending) : "memory");
}

// Tells the compiler the accumulators may have changed (an async wgmma wrote them).
__device__ __forceinline__ void touch(float (&d)[kAcc]) {
#pragma unroll
  for (int i = 0; i < kAcc; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

__device__ __forceinline__ void mma(float (&d)[kAcc], u64 desc_a, u64 desc_b, int accumulate) {
#if WG_DTYPE == 0
  wgmma_f16<kBKMajor ? 0 : 1>(d, desc_a, desc_b, accumulate);
#elif WG_DTYPE == 1
  wgmma_bf16<kBKMajor ? 0 : 1>(d, desc_a, desc_b, accumulate);
#else
  wgmma_tf32(d, desc_a, desc_b, accumulate);
#endif
}

// ---- tile order and epilogue ----------------------------------------------------------------------------------------

// Work item t -> (cluster row, tile column). WG_GROUP_M cluster rows are walked column by column, so a wave of CTAs
// shares a few B column panels and a few A row panels in L2.
__device__ __forceinline__ void tile_of(int t, int cluster_rows, int tiles_n, int& crow, int& tn) {
  const int per_group = WG_GROUP_M * tiles_n;
  const int group = t / per_group;
  const int first = group * WG_GROUP_M;
  const int rows = min(WG_GROUP_M, cluster_rows - first);
  const int r = t - group * per_group;
  crow = first + r % rows;
  tn = r / rows;
}

// Work item t -> the output tile's work item and the K blocks [kb0, kb1) it multiplies. Split-K's slices of one tile
// are `tiles` items apart (slice-major), so a wave of CTAs walks the tiles of one slice in the order above. The host
// keeps every slice non-empty (wgmma_space: split_k's rules).
struct Slice {
  int item, kb0, kb1;
};
__device__ __forceinline__ Slice slice_of(int t, int tiles, int k_blocks) {
  if (kSplitK == 1) return {t, 0, k_blocks};
  const int s = t / tiles;
  const int per = (k_blocks + kSplitK - 1) / kSplitK;
  return {t - s * tiles, s * per, min(k_blocks, (s + 1) * per)};
}

__device__ __forceinline__ float to_float(elem_t x) {
#if WG_DTYPE == 2
  return x;
#else
  return static_cast<float>(x);
#endif
}

__device__ __forceinline__ elem_t to_elem(float x) {
#if WG_DTYPE == 0
  return __float2half_rn(x);
#elif WG_DTYPE == 1
  return __float2bfloat16_rn(x);
#else
  return x;
#endif
}

// Two adjacent elements as loaded (bias, residual) and as stored (C).
#if WG_DTYPE == 2
typedef float2 pair_t;
__device__ __forceinline__ pair_t pack(float a, float b) { return make_float2(a, b); }
__device__ __forceinline__ float2 unpack(pair_t v) { return v; }
#elif WG_DTYPE == 1
typedef u32 pair_t;
__device__ __forceinline__ pair_t pack(float a, float b) {
  __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<u32*>(&v);
}
__device__ __forceinline__ float2 unpack(pair_t v) { return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&v)); }
#else
typedef u32 pair_t;
__device__ __forceinline__ pair_t pack(float a, float b) {
  __half2 v = __floats2half2_rn(a, b);
  return *reinterpret_cast<u32*>(&v);
}
__device__ __forceinline__ float2 unpack(pair_t v) { return __half22float2(*reinterpret_cast<__half2*>(&v)); }
#endif

__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// erf by Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7): two special-function instructions and five FMAs,
// where erff's longer evaluation made ptxas spill beside 128 accumulators.
__device__ __forceinline__ float erf_short(float x) {
  const float ax = fabsf(x);
  const float t = __fdividef(1.0f, fmaf(0.3275911f, ax, 1.0f));
  const float poly = t * fmaf(t, fmaf(t, fmaf(t, fmaf(t, 1.061405429f, -1.453152027f), 1.421413741f), -0.284496736f),
                              0.254829592f);
  return copysignf(1.0f - poly * __expf(-ax * ax), x);
}

// The activation after the bias, kept to one or two special-function instructions per element (SiLU through tanh).
__device__ __forceinline__ float activation(float x) {
#if WG_EPILOGUE == 2
  return fmaxf(x, 0.0f);
#elif WG_EPILOGUE == 3
  const float h = 0.5f * x;
  return fmaf(h, tanh_approx(h), h);  // x * sigmoid(x) = x/2 * (1 + tanh(x/2))
#elif WG_EPILOGUE == 4
  return 0.5f * x * (1.0f + erf_short(x * 0.70710678118654752f));
#else
  return x;
#endif
}

// ---- the two roles ----------------------------------------------------------------------------------------------------

// The K pair. WG_CLUSTER_K 2 (default 1): the two CTAs of a cluster, launched as a (1, 2, 1) cluster over a
// (work, 2, 1) grid, take the same output tile and each half of its K blocks. Consumer warpgroup c owns the same rows
// in both CTAs, and those rows are finished in CTA c: the other CTA's consumer c sends its fp32 sums there through
// distributed shared memory (st.async, completing on the receiver's `pair` mbarrier), and the receiver adds them
// before the usual epilogue. No workspace and no second pass, unlike WG_SPLIT_K: for problems whose tiles fill too
// few SMs and whose K is long (ResNet-50's late layers at batch 32). Cooperative with two consumers, no B multicast
// (WG_CLUSTER_M 1), no WG_SPLIT_K, one tile per CTA (wgmma_space: cluster_k's rules).
#ifndef WG_CLUSTER_K
#define WG_CLUSTER_K 1
#endif
constexpr int kClusterK = WG_CLUSTER_K;
constexpr int kClusterCtas = kCluster * kClusterK;
constexpr u32 kPairBytes = kClusterK > 1 ? kConsumerRows * kTileN * 4 : 0;  // one consumer's sums in fp32
static_assert(kClusterK == 1 || (kClusterK == 2 && kCluster == 1 && kConsumers == 2 && !kPingpong && kSplitK == 1 &&
                                 !WG_PERSISTENT),
              "a K pair is two cooperative CTAs of two consumers each, one tile per CTA, without B multicast or split-K");

// This CTA's place in its K pair (0 without one).
__device__ __forceinline__ u32 pair_rank() {
  u32 r = 0;
  if (kClusterK > 1) asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// The K blocks this CTA multiplies for work item t: slice_of's, the first half in the pair's CTA 0, the rest in 1.
__device__ __forceinline__ Slice cta_slice(int t, int tiles, int k_blocks) {
  Slice sl = slice_of(t, tiles, k_blocks);
  if (kClusterK > 1) {
    const int half = (sl.kb1 - sl.kb0 + 1) / 2;
    const int kb0 = sl.kb0 + static_cast<int>(pair_rank()) * half;
    sl.kb1 = min(sl.kb1, kb0 + half);
    sl.kb0 = kb0;
  }
  return sl;
}

// Shared memory.
struct Ring {
  u32 a, b, c, x, full, empty, turn, pair;  // shared-window addresses: slot 0 of A and B, C staging, the K pair's
                                            // incoming sums, mbarrier arrays, the pair's mbarrier
  __device__ u32 full_bar(int s) const { return full + 8 * s; }
  __device__ u32 empty_bar(int s) const { return empty + 8 * s; }
  __device__ u32 turn_bar(int consumer) const { return turn + 8 * consumer; }
};

// The layout from `base` (1024-byte aligned: every slot starts on a swizzle period): the A ring, the B ring, C staging
// (TMA store), the K pair's buffer, then the mbarriers (wgmma_space.smem_bytes counts the same).
__device__ __forceinline__ Ring ring_at(u32 base) {
  Ring ring;
  ring.a = base;
  ring.b = base + kStages * kStageBytesA;
  ring.c = ring.b + kStages * kStageBytesB;
  ring.x = ring.c + kStageBytesC;
  ring.full = ring.x + kPairBytes;
  ring.empty = ring.full + 8 * kStages;
  ring.turn = ring.empty + 8 * kStages;
  ring.pair = ring.turn + 16;
  return ring;
}

// Thread 0 initialises the mbarriers, then every CTA of the cluster meets (peers multicast into our slots, arrive on
// our barriers and send into our pair buffer), or without a cluster the CTA's threads.
__device__ __forceinline__ void init_ring(const Ring& ring) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(ring.full_bar(s), 1);
      mbar_init(ring.empty_bar(s), kStageUsers * kCluster);
    }
    mbar_init(ring.turn_bar(0), 1);
    mbar_init(ring.turn_bar(1), 1);
    if (kClusterK > 1) mbar_init(ring.pair, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  if (kClusterCtas > 1) cluster_sync();
  else __syncthreads();
}

// The K pair's exchange. Thread tid's accumulators go four at a time to float4 (q * 128 + tid) of the buffer, q
// counting them slab by slab: a warp's 16-byte stores fill whole 512-byte runs.
__device__ __forceinline__ void send_sums(const Ring& ring, const float (&acc)[kSlabs][kAcc], int tid) {
  const u32 peer = 1 - pair_rank();
  u32 buf, bar;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(buf) : "r"(ring.x + tid * 16), "r"(peer));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(bar) : "r"(ring.pair), "r"(peer));
#pragma unroll
  for (int j = 0; j < kSlabs; ++j)
#pragma unroll
    for (int q = 0; q < kAcc / 4; ++q)  // one address register (this thread's), a constant offset per float4
      asm volatile(
          "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(
              buf + (j * (kAcc / 4) + q) * 128 * 16),
          "r"(__float_as_uint(acc[j][4 * q])),
          "r"(__float_as_uint(acc[j][4 * q + 1])), "r"(__float_as_uint(acc[j][4 * q + 2])),
          "r"(__float_as_uint(acc[j][4 * q + 3])), "r"(bar)
          : "memory");
}

// Waits for the peer's sums of these rows (the only exchange of this CTA: one tile each) and adds them.
__device__ __forceinline__ void add_received(const Ring& ring, float (&acc)[kSlabs][kAcc], int tid, bool signaller) {
  if (signaller) mbar_expect_tx(ring.pair, kPairBytes);
  mbar_wait(ring.pair, 0);
  const u32 mine = ring.x + tid * 16;
#pragma unroll
  for (int j = 0; j < kSlabs; ++j)
#pragma unroll
    for (int q = 0; q < kAcc / 4; ++q) {
      float4 v;
      asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                   : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                   : "r"(mine + (j * (kAcc / 4) + q) * 128 * 16)
                   : "memory");
      acc[j][4 * q] += v.x;
      acc[j][4 * q + 1] += v.y;
      acc[j][4 * q + 2] += v.z;
      acc[j][4 * q + 3] += v.w;
    }
}

__device__ __forceinline__ void produce(const Ring& ring, const TensorMap* map_a, const TensorMap* map_b, int work,
                                        int first, int stride, int cluster_rows, int tiles_n, int k_blocks, u32 rank) {
  int slot = 0;
  u32 phase = 0;
  for (int t = first; t < work; t += stride) {
    const Slice sl = cta_slice(t, work / kSplitK, k_blocks);
    int crow, tn;
    tile_of(sl.item, cluster_rows, tiles_n, crow, tn);
    const int m0 = (crow * kCluster + static_cast<int>(rank)) * kTileM;
    const int n0 = tn * kTileN;
    for (int kb = sl.kb0; kb < sl.kb1; ++kb) {
      mbar_wait(ring.empty_bar(slot), phase ^ 1);  // the first pass through the ring finds every slot free
      const u32 bar = ring.full_bar(slot);
      mbar_expect_tx(bar, kStageBytesA + kStageBytesB);
      const int k0 = kb * kTileK;
      tma_load_local(ring.a + slot * kStageBytesA, map_a, bar, k0, m0);
      const u32 b_slot = ring.b + slot * kStageBytesB;
      if constexpr (kBKMajor) {
        // B tile = TILE_N rows of 128 bytes; this CTA fetches its share of the rows for the whole cluster.
        constexpr int rows = kTileN / kCluster;
        tma_load(b_slot + rank * rows * 128, map_b, bar, k0, n0 + static_cast<int>(rank) * rows);
      } else {
        // B tile = TILE_N/64 chunks, each TILE_K rows (of K) x 64 columns; this CTA fetches its share of the K rows.
        constexpr int rows = kTileK / kCluster;
#pragma unroll
        for (int c = 0; c < kTileN / kChunkN; ++c)
          tma_load(b_slot + c * (kTileK * 128) + rank * rows * 128, map_b, bar, n0 + c * kChunkN,
                   k0 + static_cast<int>(rank) * rows);
      }
      if (++slot == kStages) {
        slot = 0;
        phase ^= 1;
      }
    }
  }
}

__device__ __forceinline__ void release(const Ring& ring, int slot, bool signaller) {
  if (signaller) {
#pragma unroll
    for (u32 cta = 0; cta < kCluster; ++cta) mbar_arrive_in(ring.empty_bar(slot), cta);
  }
}

// Stores one pair of outputs: to the swizzled staging tile (TMA store) or straight to C.
__device__ __forceinline__ void store_pair(u32 staging, elem_t* C, int r, int col_in_tile, int row, int col, int M,
                                           int N, long long at, float v0, float v1) {
#if WG_STORE_TMA
  // 128-byte swizzle: the 16-byte unit index within a row is XORed with the row index mod 8.
  const int chunk = col_in_tile / kChunkN;
  const int byte = (col_in_tile % kChunkN) * kElemBytes;
  const u32 addr = staging + chunk * (kConsumerRows * 128) + r * 128 + (((byte >> 4) ^ (r & 7)) << 4) + (byte & 15);
#if WG_DTYPE == 2
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(addr), "f"(v0), "f"(v1) : "memory");
#else
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(pack(v0, v1)) : "memory");
#endif
#else
  if (row < M && col < N) *reinterpret_cast<pair_t*>(C + at) = pack(v0, v1);
#endif
}

// Adds a pair of sums into two adjacent fp32 words, 8-byte aligned: one vector reduction (sm_90), so that a warp's
// adds fill each 32-byte sector of the workspace instead of half of two.
__device__ __forceinline__ void red_add_pair(float* at, float x, float y) {
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(at), "f"(x), "f"(y) : "memory");
}

// Split-K: adds this consumer's raw sums (no epilogue) into the fp32 workspace, M x N with leading dimension N. A
// thread's pairs start at even columns; with N even they are 8-byte aligned and go as one vector add each.
__device__ __forceinline__ void add_partial(float* workspace, const float (&acc)[kSlabs][kAcc], int row0, int n0, int M,
                                            int N, int warp, int lane) {
  const bool pairs = (N & 1) == 0;
#pragma unroll
  for (int i = 0; i < kTileN / 8; ++i) {
    const int col = n0 + 8 * i + 2 * (lane % 4);
#pragma unroll
    for (int j = 0; j < kSlabs; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row0 + j * 64 + warp * 16 + lane / 4 + 8 * h;
        if (row >= M || col >= N) continue;
        float* at = workspace + static_cast<long long>(row) * N + col;
        const float x = acc[j][4 * i + 2 * h], y = acc[j][4 * i + 2 * h + 1];
        if (pairs) {
          red_add_pair(at, x, y);
        } else {
          atomicAdd(at, x);
          if (col + 1 < N) atomicAdd(at + 1, y);
        }
      }
    }
  }
}

__device__ __forceinline__ void consume(const Ring& ring, const TensorMap* map_c, elem_t* C, const elem_t* bias,
                                        const elem_t* residual, float* workspace, int M, int N, int ldc, int work,
                                        int first, int stride, int cluster_rows, int tiles_n, int k_blocks, u32 rank,
                                        int consumer) {
  const int tid = threadIdx.x % 128;
  const int warp = tid / 32, lane = tid % 32;
  const bool signaller = tid == 0;
  float acc[kSlabs][kAcc];
#pragma unroll
  for (int j = 0; j < kSlabs; ++j)
#pragma unroll
    for (int i = 0; i < kAcc; ++i) acc[j][i] = 0.0f;

  int slot = 0;    // ring position and the parity of its current pass
  u32 phase = 0;
  int mine = 0;    // tiles this consumer has multiplied (pingpong turns taken)
  for (int local = 0, t = first; t < work; ++local, t += stride) {
    const Slice sl = cta_slice(t, work / kSplitK, k_blocks);
    if (kPingpong && (local & 1) != consumer) {  // the other consumer's tile: skip its k-blocks in the ring
      const int ahead = slot + (sl.kb1 - sl.kb0);
      phase ^= static_cast<u32>(ahead / kStages) & 1;
      slot = ahead % kStages;
      continue;
    }
    int crow, tn;
    tile_of(sl.item, cluster_rows, tiles_n, crow, tn);
    const int m0 = (crow * kCluster + static_cast<int>(rank)) * kTileM;
    const int n0 = tn * kTileN;
    if (kPingpong && (consumer == 1 || mine > 0))  // wait for our turn at the tensor cores
      mbar_wait(ring.turn_bar(consumer), (consumer == 1 ? mine : mine - 1) & 1);

    // Main loop: wgmmas of slot k run while slot k-1 is handed back; one wgmma group stays in flight.
    int previous = 0;
    for (int kb = sl.kb0; kb < sl.kb1; ++kb) {
      mbar_wait(ring.full_bar(slot), phase);
      const u32 a_slot = ring.a + slot * kStageBytesA + (kPingpong ? 0 : consumer * kConsumerRows * 128);
      const u32 b_slot = ring.b + slot * kStageBytesB;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kTileK / kMmaK; ++kk) {
        // A k-step moves 32 bytes along a swizzled K-major row; an N-major B k-step moves 16 rows of 128 bytes.
        const u64 desc_b = kBKMajor ? smem_desc(b_slot + kk * 32, 16) : smem_desc(b_slot + kk * kMmaK * 128, kTileK * 128);
#pragma unroll
        for (int j = 0; j < kSlabs; ++j)
          mma(acc[j], smem_desc(a_slot + j * 64 * 128 + kk * 32, 16), desc_b, kb != sl.kb0 || kk != 0);
      }
      wgmma_commit();
      if (kb > sl.kb0) {
        wgmma_wait<1>();
        release(ring, previous, signaller);
      }
      previous = slot;
      if (++slot == kStages) {
        slot = 0;
        phase ^= 1;
      }
    }
    if (kPingpong && signaller) mbar_arrive(ring.turn_bar(1 - consumer));  // the other consumer may start
    ++mine;
    wgmma_wait<0>();
    release(ring, previous, signaller);
#pragma unroll
    for (int j = 0; j < kSlabs; ++j) touch(acc[j]);

    // Epilogue. Thread (warp, lane) holds, per slab j and 8-column group i, rows warp*16 + lane/4 (+8) and columns
    // 8i + 2*(lane%4) (+1): acc[j][4i + 2h + {0,1}] for h = 0, 1.
    const int row0 = m0 + (kPingpong ? 0 : consumer * kConsumerRows);
    if (row0 >= M) continue;  // a cluster's spare tile past the last row
    if (kClusterK > 1) {  // the K pair: these rows are finished in CTA `consumer`
      if (consumer != static_cast<int>(pair_rank())) {
        send_sums(ring, acc, tid);
        continue;
      }
      add_received(ring, acc, tid, signaller);
    }
    if (kSplitK > 1) {  // the slice's sums go to the workspace; gemm_wgmma_splitk applies the epilogue
      add_partial(workspace, acc, row0, n0, M, N, warp, lane);
      continue;
    }
    u32 staging = 0;
#if WG_STORE_TMA
    staging = ring.c + consumer * (kConsumerRows * kTileN * kElemBytes);
    if (signaller) tma_store_wait_read();  // the previous tile's store has left shared memory
    named_sync(1 + consumer);
#endif
    // Columns in batches of 8 groups: the batch's bias pairs are fetched together before any arithmetic, and only
    // 8 registers hold them (the accumulators leave little room). Columns past N read a valid pair, never stored.
    constexpr int kGroups = kTileN / 8, kBatch = kGroups < 8 ? kGroups : 8;
#pragma unroll
    for (int i0 = 0; i0 < kGroups; i0 += kBatch) {
#if WG_EPILOGUE >= 1
      pair_t bias_pair[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b)
        bias_pair[b] = __ldg(reinterpret_cast<const pair_t*>(bias + min(n0 + 8 * (i0 + b) + 2 * (lane % 4), N - 2)));
#endif
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int i = i0 + b;
        const int col_in_tile = 8 * i + 2 * (lane % 4);
        const int col = n0 + col_in_tile;
#pragma unroll
        for (int j = 0; j < kSlabs; ++j) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = j * 64 + warp * 16 + lane / 4 + 8 * h;  // row within this consumer's share
            const int row = row0 + r;
            const long long at = static_cast<long long>(row) * ldc + col;
            float v0 = acc[j][4 * i + 2 * h], v1 = acc[j][4 * i + 2 * h + 1];
#if WG_EPILOGUE >= 1
            const float2 bv = unpack(bias_pair[b]);
            v0 = activation(v0 + bv.x);
            v1 = activation(v1 + bv.y);
#endif
#if WG_EPILOGUE == 5
            if (row < M && col < N) {
              const float2 res = unpack(__ldg(reinterpret_cast<const pair_t*>(residual + at)));
              v0 += res.x;
              v1 += res.y;
            }
#endif
            store_pair(staging, C, r, col_in_tile, row, col, M, N, at, v0, v1);
          }
        }
      }
    }
#if WG_STORE_TMA
    fence_async_shared();
    named_sync(1 + consumer);
    if (signaller) {
#pragma unroll
      for (int c = 0; c < kTileN / kChunkN; ++c) tma_store(map_c, staging + c * (kConsumerRows * 128), n0 + c * kChunkN, row0);
      tma_store_commit();
    }
#endif
  }
#if WG_STORE_TMA
  if (signaller) tma_store_wait_all();
#endif
}

}  // namespace wg

extern "C" __global__ void __launch_bounds__(wg::kThreads, 1)
    gemm_wgmma(const __grid_constant__ wg::TensorMap map_a, const __grid_constant__ wg::TensorMap map_b,
               const __grid_constant__ wg::TensorMap map_c, wg::elem_t* __restrict__ C,
               const wg::elem_t* __restrict__ bias, const wg::elem_t* __restrict__ residual,
               float* __restrict__ workspace, int M, int N, int K, int ldc) {
  using namespace wg;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // The 128-byte swizzle repeats every 1024 bytes: every slot starts on such a boundary.
  const u32 raw = smem_u32(smem_raw);
  const u32 base = (raw + 1023) & ~1023u;
  const Ring ring = ring_at(base);

  const int tiles_m = (M + kTileM - 1) / kTileM;
  const int tiles_n = (N + kTileN - 1) / kTileN;
  const int cluster_rows = (tiles_m + kCluster - 1) / kCluster;
  const int work = cluster_rows * tiles_n * kSplitK;  // one work item = a K slice of kCluster vertically adjacent tiles
  const int k_blocks = (K + kTileK - 1) / kTileK;
  const u32 rank = cluster_rank();
  const int first = blockIdx.x / kCluster;
  const int stride = WG_PERSISTENT ? gridDim.x / kCluster : work;

  init_ring(ring);

  if (threadIdx.x < 128) {
    if (kConsumers > 1) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (threadIdx.x == 0)
      produce(ring, &map_a, &map_b, work, first, stride, cluster_rows, tiles_n, k_blocks, rank);
  } else {
    if (kConsumers > 1) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    consume(ring, &map_c, C, bias, residual, workspace, M, N, ldc, work, first, stride, cluster_rows, tiles_n, k_blocks,
            rank, threadIdx.x / 128 - 1);
  }
  if (kClusterCtas > 1) {
    __syncwarp();
    cluster_sync();  // no CTA leaves while a peer may still signal its barriers or send into its shared memory
  }
}
