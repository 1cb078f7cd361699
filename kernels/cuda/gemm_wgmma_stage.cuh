// Operand staging for the Hopper GEMM family (sm_90a): copies that run before gemm_wgmma, on the same stream, where
// TMA cannot read an operand in place (docs/kernel-abi.md, "Staging"). Both entries write a row-major destination
// whose leading dimension the host rounded up to a multiple of 128 bytes, so that every row starts on a 16-byte (in
// fact 128-byte) boundary as TMA requires; the source may have any leading dimension and any element alignment.
//
//   WG_STAGE_A  1: gemm_stage_a copies A (M x K) into scratch.
//   WG_STAGE_B  0: none; 1: gemm_stage_b copies B into scratch in its own layout (N x K in nt, K x N in nn);
//               2: gemm_stage_b transposes B (K x N, layout nn) into scratch as N x K (the kernel then reads it K-major).
//
// Entry parameters, in the destination's terms: (const T* src, T* dst, int rows, int cols, int ld_src, int ld_dst);
// dst is rows x cols; the source is rows x cols (copy) or cols x rows (transpose). Columns from cols up to the
// padded leading dimension are left as they are (copy: zeros within the last 16 bytes): the tensor maps keep the true
// K as their size, so TMA never reads them. Blocks of 256 threads; grids (x over rows, y over columns):
//   copy       ceil(rows / 8) x ceil(cols / (512 / sizeof(T)))   one warp per row, 512 bytes of columns per warp
//   transpose  ceil(rows / 64) x ceil(cols / 64)                  a 64 x 64 tile through shared memory
#pragma once

namespace wg_stage {

constexpr int kThreads = 256;

// Copies move bits: the element type is only its width.
#if WG_DTYPE == 2
typedef unsigned int bits_t;
#else
typedef unsigned short bits_t;
#endif

constexpr int kVec = 16 / sizeof(bits_t);         // elements per 16-byte store
constexpr int kCopyRows = kThreads / 32;          // rows per block: one warp each
constexpr int kCopyCols = 32 * kVec;              // columns per block: one 16-byte chunk per lane
constexpr int kTile = 64;                         // transpose tile (64 x 64 elements)

// dst[r][c] = src[r][c]. Each lane reads kVec elements spread over the warp's 512 bytes (every load instruction
// reads 32 consecutive elements), passes them through the warp's line in shared memory, and stores its own 16 bytes.
__device__ __forceinline__ void copy_rows(const bits_t* __restrict__ src, bits_t* __restrict__ dst, int rows, int cols,
                                          int ld_src, int ld_dst) {
  __shared__ __align__(16) bits_t line[kCopyRows][kCopyCols];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = blockIdx.x * kCopyRows + warp;
  const int c0 = blockIdx.y * kCopyCols;
  if (row >= rows) return;  // the whole warp leaves together
  const bits_t* from = src + static_cast<long long>(row) * ld_src + c0;
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    const int c = lane + 32 * j;
    line[warp][c] = c0 + c < cols ? from[c] : bits_t(0);
  }
  __syncwarp();
  const int c = c0 + lane * kVec;  // a multiple of kVec, so the chunk ends within the padded leading dimension
  if (c < cols)
    *reinterpret_cast<uint4*>(dst + static_cast<long long>(row) * ld_dst + c) =
        *reinterpret_cast<const uint4*>(&line[warp][lane * kVec]);
}

#if WG_STAGE_B == 2
// dst[r][c] = src[c][r] through a 64 x 64 tile: reads run along the source's rows and writes along the
// destination's, 128 contiguous bytes per warp instruction both ways; the odd row pitch of the tile keeps both
// shared-memory passes free of bank conflicts.
__device__ __forceinline__ void transpose(const bits_t* __restrict__ src, bits_t* __restrict__ dst, int rows, int cols,
                                          int ld_src, int ld_dst) {
  static_assert(sizeof(bits_t) == 4, "the transpose stages tf32 B only");
  __shared__ bits_t tile[kTile][kTile + 1];
  const int tx = threadIdx.x % kTile, ty = threadIdx.x / kTile;
  constexpr int kStep = kThreads / kTile;
  const int r0 = blockIdx.x * kTile;  // destination rows = source columns
  const int c0 = blockIdx.y * kTile;  // destination columns = source rows
#pragma unroll
  for (int i = ty; i < kTile; i += kStep) {
    const int c = c0 + i, r = r0 + tx;
    tile[i][tx] = c < cols && r < rows ? src[static_cast<long long>(c) * ld_src + r] : 0u;
  }
  __syncthreads();
#pragma unroll
  for (int i = ty; i < kTile; i += kStep) {
    const int r = r0 + i, c = c0 + tx;
    if (r < rows && c < cols) dst[static_cast<long long>(r) * ld_dst + c] = tile[tx][i];
  }
}
#endif

}  // namespace wg_stage

#if WG_STAGE_A
extern "C" __global__ void __launch_bounds__(wg_stage::kThreads)
    gemm_stage_a(const wg::elem_t* __restrict__ src, wg::elem_t* __restrict__ dst, int rows, int cols, int ld_src,
                 int ld_dst) {
  wg_stage::copy_rows(reinterpret_cast<const wg_stage::bits_t*>(src), reinterpret_cast<wg_stage::bits_t*>(dst), rows,
                      cols, ld_src, ld_dst);
}
#endif

#if WG_STAGE_B
extern "C" __global__ void __launch_bounds__(wg_stage::kThreads)
    gemm_stage_b(const wg::elem_t* __restrict__ src, wg::elem_t* __restrict__ dst, int rows, int cols, int ld_src,
                 int ld_dst) {
#if WG_STAGE_B == 2
  wg_stage::transpose(reinterpret_cast<const wg_stage::bits_t*>(src), reinterpret_cast<wg_stage::bits_t*>(dst), rows,
                      cols, ld_src, ld_dst);
#else
  wg_stage::copy_rows(reinterpret_cast<const wg_stage::bits_t*>(src), reinterpret_cast<wg_stage::bits_t*>(dst), rows,
                      cols, ld_src, ld_dst);
#endif
}
#endif
