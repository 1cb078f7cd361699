// Ragged N for the Hopper GEMM family (sm_90a): C's rows (N elements) are not a multiple of 16 bytes, so TMA cannot
// store C and a pair of adjacent columns may start at an odd address. The family (families/wgmma.py, headers_text)
// pastes this text into gemm_wgmma.cuh's, inside namespace wg before its epilogue, and points the epilogue's bias and
// residual loads and its store of C here; the kernel then takes no tensor map over C (its entry loses map_c). Only
// ragged-N problems get this text, so every other problem's source, and its cache key, stays as it was.
// A pair is columns (col, col + 1) with col < N; col + 1 may be N, and is then neither read nor written.

static_assert(!WG_STORE_TMA, "a ragged N has no tensor map over C to store through (store=direct)");

// bias[col], bias[col + 1], each clamped to the last column (columns past N are computed, never stored).
__device__ __forceinline__ pair_t ragged_bias_pair(const elem_t* bias, int col, int N) {
  return pack(to_float(__ldg(bias + min(col, N - 1))), to_float(__ldg(bias + min(col + 1, N - 1))));
}

// The residual's pair at p (column col < N); its second element is 0 past N.
__device__ __forceinline__ pair_t ragged_residual_pair(const elem_t* p, int col, int N) {
  return pack(to_float(__ldg(p)), col + 1 < N ? to_float(__ldg(p + 1)) : 0.0f);
}

// C's pair at p (column col < N), one element at a time.
__device__ __forceinline__ void ragged_store(elem_t* p, int col, int N, float v0, float v1) {
  p[0] = to_elem(v0);
  if (col + 1 < N) p[1] = to_elem(v1);
}

