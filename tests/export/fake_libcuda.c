/* A stand-in for libcuda.so.1, for testing the exported runtime on machines without a GPU.
 *
 * It implements cuGetProcAddress_v2 and the driver functions tracea_runtime.h asks for; memory is host memory;
 * kernels do not run: every driver call that matters is logged on stderr as one line ("cu: ..."), which the tests
 * read. The device it pretends to be comes from the environment:
 *   FAKE_CUDA_CC=9.0  FAKE_CUDA_DRIVER=13000  FAKE_CUDA_DEVICES=1  FAKE_CUDA_SMEM_OPTIN=232448
 *   FAKE_CUDA_MAX_THREADS=1024  FAKE_CUDA_FUNC_MAX_THREADS=1024  FAKE_CUDA_SMS=132
 *   FAKE_CUDA_BLOCKS_PER_SM=1  FAKE_CUDA_ACTIVE_CLUSTERS=<SMs / cluster size>   (occupancy answers)
 *   FAKE_CUDA_HIDE=cuTensorMapEncodeTiled,...   (symbols cuGetProcAddress reports missing, as an old driver would)
 *   FAKE_CUDA_ENCODE_FAIL=1                     (cuTensorMapEncodeTiled and cuTensorMapEncodeIm2col refuse every map)
 *
 * cuTensorMapEncodeTiled checks what the real one requires of a tiled map of rank 2 or 3 (16-byte aligned base and
 * strides, boxes of 1..256 elements whose inner extent is a multiple of 16 bytes and fits the swizzle span, traversal
 * strides of 1), cuTensorMapEncodeIm2col what it requires of a rank-4 im2col map (the same alignment, 1..256 channels
 * of a multiple of 16 bytes within the swizzle span, 1..1024 pixels, corners in [-128, 127], traversal strides 1..8);
 * both log every argument and write a recognisable map (magic, serial id, base) that launches of the TMA kernels
 * decode and log.
 */
#include <cuda.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int env_int(const char* name, int fallback) {
  const char* v = getenv(name);
  return v && *v ? atoi(v) : fallback;
}

static int cc_part(int which) {
  const char* v = getenv("FAKE_CUDA_CC");
  int major = 9, minor = 0;
  if (v) sscanf(v, "%d.%d", &major, &minor);
  return which == 0 ? major : minor;
}

static pthread_mutex_t log_mutex = PTHREAD_MUTEX_INITIALIZER;
#define LOG(...) do { pthread_mutex_lock(&log_mutex); fprintf(stderr, "cu: " __VA_ARGS__); fputc('\n', stderr); \
                      fflush(stderr); pthread_mutex_unlock(&log_mutex); } while (0)

struct fake_module { int id; };
struct fake_function { int module; char name[128]; };
static int next_module = 0;
static __thread int context_depth = 0;
static struct fake_context { int device; } contexts[8];

static CUresult f_init(unsigned int flags) { (void)flags; LOG("init"); return CUDA_SUCCESS; }
static CUresult f_driver_get_version(int* v) { *v = env_int("FAKE_CUDA_DRIVER", 13000); return CUDA_SUCCESS; }
static CUresult f_get_error_string(CUresult r, const char** s) { (void)r; *s = "fake error"; return CUDA_SUCCESS; }
static CUresult f_device_get_count(int* n) { *n = env_int("FAKE_CUDA_DEVICES", 1); return CUDA_SUCCESS; }
static CUresult f_device_get(CUdevice* d, int ordinal) {
  if (ordinal < 0 || ordinal >= env_int("FAKE_CUDA_DEVICES", 1)) return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}
static CUresult f_device_get_attribute(int* v, CUdevice_attribute a, CUdevice d) {
  (void)d;
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = cc_part(0); break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = cc_part(1); break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *v = env_int("FAKE_CUDA_SMEM_OPTIN", 232448); break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = env_int("FAKE_CUDA_MAX_THREADS", 1024); break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = env_int("FAKE_CUDA_SMS", 132); break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}
static CUresult f_primary_ctx_retain(CUcontext* c, CUdevice d) {
  contexts[d].device = d;
  *c = (CUcontext)&contexts[d];
  LOG("primary_ctx_retain device=%d", d);
  return CUDA_SUCCESS;
}
static CUresult f_primary_ctx_release(CUdevice d) { LOG("primary_ctx_release device=%d", d); return CUDA_SUCCESS; }
static __thread CUcontext current = NULL;
static __thread CUcontext stack[16];
static CUresult f_ctx_get_current(CUcontext* c) { *c = current; return CUDA_SUCCESS; }
static CUresult f_ctx_push_current(CUcontext c) { stack[context_depth++ & 15] = current; current = c; return CUDA_SUCCESS; }
static CUresult f_ctx_pop_current(CUcontext* c) {
  if (c) *c = current;
  current = stack[--context_depth & 15];
  return CUDA_SUCCESS;
}
static CUresult f_ctx_get_device(CUdevice* d) {
  if (!current) return CUDA_ERROR_INVALID_CONTEXT;
  *d = ((struct fake_context*)current)->device;
  return CUDA_SUCCESS;
}
static CUresult f_stream_get_ctx(CUstream s, CUcontext* c) { (void)s; *c = (CUcontext)&contexts[0]; return CUDA_SUCCESS; }
static CUresult f_module_load_data(CUmodule* m, const void* image) {
  const unsigned char* p = (const unsigned char*)image;
  struct fake_module* mod = (struct fake_module*)calloc(1, sizeof(*mod));
  if (!current) return CUDA_ERROR_INVALID_CONTEXT;
  pthread_mutex_lock(&log_mutex);
  mod->id = ++next_module;
  pthread_mutex_unlock(&log_mutex);
  if (memcmp(p, "\177ELF", 4) == 0) {
    uint32_t flags;
    memcpy(&flags, p + 0x30, 4);
    LOG("load module=%d kind=cubin sm=%u", mod->id, p[8] >= 8 ? (flags >> 8) & 0xff : flags & 0xff);
  } else {
    const char* target = strstr((const char*)image, ".target ");
    char name[32] = "?";
    if (target) sscanf(target + 8, "%31s", name);
    LOG("load module=%d kind=ptx target=%s", mod->id, name);
  }
  *m = (CUmodule)mod;
  return CUDA_SUCCESS;
}
static CUresult f_module_unload(CUmodule m) { LOG("unload module=%d", ((struct fake_module*)m)->id); free(m); return CUDA_SUCCESS; }
static CUresult f_module_get_function(CUfunction* f, CUmodule m, const char* name) {
  struct fake_function* fn = (struct fake_function*)calloc(1, sizeof(*fn));
  fn->module = ((struct fake_module*)m)->id;
  snprintf(fn->name, sizeof(fn->name), "%s", name);
  *f = (CUfunction)fn;
  return CUDA_SUCCESS;
}
static CUresult f_func_get_attribute(int* v, CUfunction_attribute a, CUfunction f) {
  (void)f;
  if (a != CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK) return CUDA_ERROR_INVALID_VALUE;
  *v = env_int("FAKE_CUDA_FUNC_MAX_THREADS", 1024);
  return CUDA_SUCCESS;
}
static CUresult f_func_set_attribute(CUfunction f, CUfunction_attribute a, int v) {
  struct fake_function* fn = (struct fake_function*)f;
  LOG("set_attribute module=%d name=%s attribute=%d value=%d", fn->module, fn->name, (int)a, v);
  return CUDA_SUCCESS;
}
static void log_launch(struct fake_function* fn, const char* api, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                       unsigned by, unsigned bz, unsigned smem, const char* cluster, void** params) {
  LOG("launch module=%d name=%s api=%s grid=%u,%u,%u block=%u,%u,%u smem=%u cluster=%s a=%llu b=%llu c=%llu bias=%llu "
      "residual=%llu workspace=%llu m=%d n=%d k=%d lda=%d ldb=%d ldc=%d",
      fn->module, fn->name, api, gx, gy, gz, bx, by, bz, smem, cluster, *(unsigned long long*)params[0],
      *(unsigned long long*)params[1], *(unsigned long long*)params[2], *(unsigned long long*)params[3],
      *(unsigned long long*)params[4], *(unsigned long long*)params[5], *(int*)params[6], *(int*)params[7],
      *(int*)params[8], *(int*)params[9], *(int*)params[10], *(int*)params[11]);
}

/* ---- tensor maps ---- */
#define FAKE_MAP_MAGIC 0x70614d6165636172ull /* "raceaMap" */
static int next_map = 0;

static unsigned elem_bytes_of(CUtensorMapDataType t) {
  switch (t) {
    case CU_TENSOR_MAP_DATA_TYPE_UINT8: return 1;
    case CU_TENSOR_MAP_DATA_TYPE_UINT16: case CU_TENSOR_MAP_DATA_TYPE_FLOAT16: case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16:
      return 2;
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT64: case CU_TENSOR_MAP_DATA_TYPE_INT64: case CU_TENSOR_MAP_DATA_TYPE_UINT64:
      return 8;
    default: return 4;
  }
}

/* "a,b,c" of n values */
static void list_u64(char* out, size_t size, const cuuint64_t* v, unsigned n) {
  unsigned i;
  size_t used = 0;
  out[0] = 0;
  for (i = 0; i < n && used < size; ++i) used += snprintf(out + used, size - used, i ? ",%llu" : "%llu", (unsigned long long)v[i]);
}
static void list_u32(char* out, size_t size, const cuuint32_t* v, unsigned n) {
  unsigned i;
  size_t used = 0;
  out[0] = 0;
  for (i = 0; i < n && used < size; ++i) used += snprintf(out + used, size - used, i ? ",%u" : "%u", v[i]);
}
static void list_int(char* out, size_t size, const int* v, unsigned n) {
  unsigned i;
  size_t used = 0;
  out[0] = 0;
  for (i = 0; i < n && used < size; ++i) used += snprintf(out + used, size - used, i ? ",%d" : "%d", v[i]);
}

static unsigned span_of(CUtensorMapSwizzle swizzle) {
  return swizzle == CU_TENSOR_MAP_SWIZZLE_128B ? 128u : swizzle == CU_TENSOR_MAP_SWIZZLE_64B ? 64u
         : swizzle == CU_TENSOR_MAP_SWIZZLE_32B ? 32u : 0u;
}

/* What both encoders require of the tensor: a 16-byte aligned base, sizes of 1..2^32, strides (rank - 1, bytes)
 * that are multiples of 16 and no smaller than the dimension below them spans. */
static int tensor_ok(cuuint32_t rank, void* base, const cuuint64_t* dims, const cuuint64_t* strides, unsigned elem) {
  cuuint32_t i;
  if (((uintptr_t)base % 16u) != 0) return 0;
  for (i = 0; i < rank; ++i) {
    if (dims[i] == 0 || dims[i] > (1ull << 32)) return 0;
  }
  for (i = 0; i + 1 < rank; ++i) {
    const cuuint64_t below = i == 0 ? dims[0] * elem : strides[i - 1] * dims[i];
    if (strides[i] % 16u != 0 || strides[i] < below) return 0;
  }
  return 1;
}

static int new_map(CUtensorMap* map, void* base) {
  int id;
  pthread_mutex_lock(&log_mutex);
  id = ++next_map;
  pthread_mutex_unlock(&log_mutex);
  memset(map, 0, sizeof(*map));
  map->opaque[0] = FAKE_MAP_MAGIC;
  map->opaque[1] = (cuuint64_t)id;
  map->opaque[2] = (cuuint64_t)(uintptr_t)base;
  return id;
}

static CUresult f_tensor_map_encode_tiled(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank, void* base,
                                          const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                                          const cuuint32_t* element_strides, CUtensorMapInterleave interleave,
                                          CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2,
                                          CUtensorMapFloatOOBfill oob) {
  const unsigned elem = elem_bytes_of(type);
  const unsigned span = span_of(swizzle);
  char d[96], st[96], b[64];
  int id, ok = !env_int("FAKE_CUDA_ENCODE_FAIL", 0) && (rank == 2 || rank == 3) && map != NULL;
  cuuint32_t i;
  if (ok) ok = tensor_ok(rank, base, dims, strides, elem);
  for (i = 0; ok && i < rank; ++i) {
    if (box[i] == 0 || box[i] > 256 || element_strides[i] != 1) ok = 0;
  }
  if (ok && ((box[0] * elem) % 16u != 0 || (span != 0 && box[0] * elem > span))) ok = 0;
  list_u64(d, sizeof d, dims, rank);
  list_u64(st, sizeof st, strides, rank - 1);
  list_u32(b, sizeof b, box, rank);
  if (!ok) {
    LOG("tensor_map error base=%llu stride=%s box=%s", (unsigned long long)(uintptr_t)base, st, b);
    return CUDA_ERROR_INVALID_VALUE;
  }
  id = new_map(map, base);
  LOG("tensor_map id=%d type=%d base=%llu dims=%s stride=%s box=%s interleave=%d swizzle=%d l2=%d oob=%d", id,
      (int)type, (unsigned long long)(uintptr_t)base, d, st, b, (int)interleave, (int)swizzle, (int)l2, (int)oob);
  return CUDA_SUCCESS;
}

static CUresult f_tensor_map_encode_im2col(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank, void* base,
                                           const cuuint64_t* dims, const cuuint64_t* strides, const int* lower,
                                           const int* upper, cuuint32_t channels, cuuint32_t pixels,
                                           const cuuint32_t* element_strides, CUtensorMapInterleave interleave,
                                           CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2,
                                           CUtensorMapFloatOOBfill oob) {
  const unsigned elem = elem_bytes_of(type);
  const unsigned span = span_of(swizzle);
  char d[96], st[96], lo[32], up[32], es[48];
  int id, ok = !env_int("FAKE_CUDA_ENCODE_FAIL", 0) && rank == 4 && map != NULL;
  cuuint32_t i;
  if (ok) ok = tensor_ok(rank, base, dims, strides, elem);
  if (ok && (channels == 0 || channels > 256 || pixels == 0 || pixels > 1024 || (channels * elem) % 16u != 0 ||
             (span != 0 && channels * elem > span))) ok = 0;
  for (i = 0; ok && i < rank - 2; ++i) {
    if (lower[i] < -128 || lower[i] > 127 || upper[i] < -128 || upper[i] > 127) ok = 0;
  }
  for (i = 0; ok && i < rank; ++i) {
    if (element_strides[i] == 0 || element_strides[i] > 8) ok = 0;
  }
  list_u64(d, sizeof d, dims, rank);
  list_u64(st, sizeof st, strides, rank - 1);
  list_int(lo, sizeof lo, lower, rank - 2);
  list_int(up, sizeof up, upper, rank - 2);
  list_u32(es, sizeof es, element_strides, rank);
  if (!ok) {
    LOG("tensor_map error kind=im2col base=%llu stride=%s channels=%u pixels=%u", (unsigned long long)(uintptr_t)base,
        st, channels, pixels);
    return CUDA_ERROR_INVALID_VALUE;
  }
  id = new_map(map, base);
  LOG("tensor_map id=%d kind=im2col type=%d base=%llu dims=%s stride=%s lower=%s upper=%s channels=%u pixels=%u "
      "element_strides=%s interleave=%d swizzle=%d l2=%d oob=%d", id, (int)type, (unsigned long long)(uintptr_t)base,
      d, st, lo, up, channels, pixels, es, (int)interleave, (int)swizzle, (int)l2, (int)oob);
  return CUDA_SUCCESS;
}

static long long map_id(void* param) {
  const CUtensorMap* map = (const CUtensorMap*)param;
  return map->opaque[0] == FAKE_MAP_MAGIC ? (long long)map->opaque[1] : -1;
}

/* The Hopper family's parameters: (map_a, map_b, map_c, C, bias, residual, workspace, M, N, K, ldc),
 * docs/kernel-abi.md; a ragged-N variant takes no map_c (its third parameter is C, a pointer, which map_id reads as no
 * map: logged -1). */
static void log_launch_tma(struct fake_function* fn, const CUlaunchConfig* c, const char* cluster, void** params) {
  const long long c_map = map_id(params[2]);
  void** rest = params + (c_map >= 0 ? 3 : 2);
  LOG("launch module=%d name=%s api=ex grid=%u,%u,%u block=%u,%u,%u smem=%u cluster=%s map_a=%lld map_b=%lld "
      "map_c=%lld c=%llu bias=%llu residual=%llu workspace=%llu m=%d n=%d k=%d ldc=%d",
      fn->module, fn->name, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ,
      c->sharedMemBytes, cluster, map_id(params[0]), map_id(params[1]), c_map,
      *(unsigned long long*)rest[0], *(unsigned long long*)rest[1], *(unsigned long long*)rest[2],
      *(unsigned long long*)rest[3], *(int*)rest[4], *(int*)rest[5], *(int*)rest[6], *(int*)rest[7]);
}

/* Kernels whose first three parameters are tensor maps, then pointers, then ints: fa3 attention (q, k, v, out, lse;
 * seq, seq_k, heads, kv_heads, q_sb, q_sh, q_sr, kv_sb, kv_sh, kv_sr) and conv2d's TMA im2col kernel (Y, bias,
 * residual, workspace; M, N, C, ldc, P, Q, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w). */
static int mapped_kernel(const char* name, int* pointers, int* ints) {
  if (strcmp(name, "attention_fa3") == 0) { *pointers = 5; *ints = 10; return 1; }
  if (strcmp(name, "conv2d_wgmma_im2col") == 0) { *pointers = 4; *ints = 12; return 1; }
  return 0;
}

/* The Hopper family's split-K second pass: (workspace, C, bias, residual, M, N, ldc), docs/kernel-abi.md. */
static void log_launch_splitk(struct fake_function* fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                              unsigned by, unsigned bz, unsigned smem, void** params) {
  LOG("launch module=%d name=%s api=plain grid=%u,%u,%u block=%u,%u,%u smem=%u workspace=%llu c=%llu bias=%llu "
      "residual=%llu m=%d n=%d ldc=%d",
      fn->module, fn->name, gx, gy, gz, bx, by, bz, smem, *(unsigned long long*)params[0],
      *(unsigned long long*)params[1], *(unsigned long long*)params[2], *(unsigned long long*)params[3],
      *(int*)params[4], *(int*)params[5], *(int*)params[6]);
}
static void log_launch_mapped(struct fake_function* fn, const char* api, unsigned gx, unsigned gy, unsigned gz,
                              unsigned bx, unsigned by, unsigned bz, unsigned smem, const char* cluster, void** params) {
  char ptrs[256], ints[256];
  int n_ptrs = 0, n_ints = 0, i;
  size_t used = 0;
  mapped_kernel(fn->name, &n_ptrs, &n_ints);
  ptrs[0] = ints[0] = 0;
  for (i = 0; i < n_ptrs; ++i) used += snprintf(ptrs + used, sizeof ptrs - used, i ? ",%llu" : "%llu", *(unsigned long long*)params[3 + i]);
  used = 0;
  for (i = 0; i < n_ints; ++i) used += snprintf(ints + used, sizeof ints - used, i ? ",%d" : "%d", *(int*)params[3 + n_ptrs + i]);
  LOG("launch module=%d name=%s api=%s grid=%u,%u,%u block=%u,%u,%u smem=%u cluster=%s maps=%lld,%lld,%lld "
      "pointers=%s ints=%s", fn->module, fn->name, api, gx, gy, gz, bx, by, bz, smem, cluster, map_id(params[0]),
      map_id(params[1]), map_id(params[2]), ptrs, ints);
}

/* The Hopper family's staging kernels: (src, dst, rows, cols, ld_src, ld_dst), docs/kernel-abi.md ("Staging"). */
static void log_launch_stage(struct fake_function* fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                             unsigned bz, unsigned smem, void** params) {
  LOG("launch module=%d name=%s api=plain grid=%u,%u,%u block=%u,%u,%u smem=%u src=%llu dst=%llu rows=%d cols=%d "
      "ld_src=%d ld_dst=%d",
      fn->module, fn->name, gx, gy, gz, bx, by, bz, smem, *(unsigned long long*)params[0],
      *(unsigned long long*)params[1], *(int*)params[2], *(int*)params[3], *(int*)params[4], *(int*)params[5]);
}

/* conv2d's transposes: (src, dst, n, c, h, w), docs/conv2d.md ("Export"). */
static void log_launch_transpose(struct fake_function* fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                 unsigned by, unsigned bz, unsigned smem, void** params) {
  LOG("launch module=%d name=%s api=plain grid=%u,%u,%u block=%u,%u,%u smem=%u src=%llu dst=%llu n=%d c=%d h=%d w=%d",
      fn->module, fn->name, gx, gy, gz, bx, by, bz, smem, *(unsigned long long*)params[0],
      *(unsigned long long*)params[1], *(int*)params[2], *(int*)params[3], *(int*)params[4], *(int*)params[5]);
}

/* The lowrank-mlp kernels' parameters: (x, u, v, bias, residual, y, t, m, k, r, n, ldt), docs/lowrank-mlp.md. */
static void log_launch_lowrank(struct fake_function* fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                               unsigned by, unsigned bz, unsigned smem, void** params) {
  LOG("launch module=%d name=%s api=plain grid=%u,%u,%u block=%u,%u,%u smem=%u x=%llu u=%llu v=%llu bias=%llu "
      "residual=%llu y=%llu t=%llu m=%d k=%d r=%d n=%d ldt=%d",
      fn->module, fn->name, gx, gy, gz, bx, by, bz, smem, *(unsigned long long*)params[0],
      *(unsigned long long*)params[1], *(unsigned long long*)params[2], *(unsigned long long*)params[3],
      *(unsigned long long*)params[4], *(unsigned long long*)params[5], *(unsigned long long*)params[6],
      *(int*)params[7], *(int*)params[8], *(int*)params[9], *(int*)params[10], *(int*)params[11]);
}

static CUresult f_launch_kernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                unsigned bz, unsigned smem, CUstream s, void** params, void** extra) {
  struct fake_function* fn = (struct fake_function*)f;
  int gx_unused;
  (void)s; (void)extra;
  if (!current) return CUDA_ERROR_INVALID_CONTEXT;
  if (strncmp(fn->name, "gemm_stage_", 11) == 0) {
    log_launch_stage(fn, gx, gy, gz, bx, by, bz, smem, params);
  } else if (strcmp(fn->name, "conv2d_nchw_to_nhwc") == 0) {
    log_launch_transpose(fn, gx, gy, gz, bx, by, bz, smem, params);
  } else if (strcmp(fn->name, "gemm_wgmma_splitk") == 0) {
    log_launch_splitk(fn, gx, gy, gz, bx, by, bz, smem, params);
  } else if (strncmp(fn->name, "lowrank_", 8) == 0) {
    log_launch_lowrank(fn, gx, gy, gz, bx, by, bz, smem, params);
  } else if (mapped_kernel(fn->name, &gx_unused, &gx_unused)) {
    log_launch_mapped(fn, "plain", gx, gy, gz, bx, by, bz, smem, "0", params);
  } else {
    log_launch(fn, "plain", gx, gy, gz, bx, by, bz, smem, "0", params);
  }
  return CUDA_SUCCESS;
}

/* The cluster dimensions of a launch configuration: "x,y,z", or "none" without the attribute. */
static int cluster_of(const CUlaunchConfig* c, unsigned dims[3], char* text, size_t size) {
  unsigned i;
  dims[0] = dims[1] = dims[2] = 1;
  snprintf(text, size, "none");
  for (i = 0; i < c->numAttrs; ++i) {
    if (c->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
      dims[0] = c->attrs[i].value.clusterDim.x;
      dims[1] = c->attrs[i].value.clusterDim.y;
      dims[2] = c->attrs[i].value.clusterDim.z;
      snprintf(text, size, "%u,%u,%u", dims[0], dims[1], dims[2]);
      return 1;
    }
  }
  return 0;
}

static CUresult f_launch_kernel_ex(const CUlaunchConfig* c, CUfunction f, void** params, void** extra) {
  struct fake_function* fn = (struct fake_function*)f;
  unsigned dims[3];
  char cluster[48];
  int unused;
  (void)extra;
  if (!current) return CUDA_ERROR_INVALID_CONTEXT;
  cluster_of(c, dims, cluster, sizeof(cluster));
  if (c->gridDimX % dims[0] || c->gridDimY % dims[1] || c->gridDimZ % dims[2]) {
    LOG("launch error name=%s grid=%u,%u,%u is no whole number of clusters %s", fn->name, c->gridDimX, c->gridDimY,
        c->gridDimZ, cluster);
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (strcmp(fn->name, "gemm_wgmma") == 0) {
    log_launch_tma(fn, c, cluster, params);
  } else if (mapped_kernel(fn->name, &unused, &unused)) {
    log_launch_mapped(fn, "ex", c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ,
                      c->sharedMemBytes, cluster, params);
  } else {
    log_launch(fn, "ex", c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ,
               c->sharedMemBytes, cluster, params);
  }
  return CUDA_SUCCESS;
}

static CUresult f_occupancy_blocks(int* n, CUfunction f, int block, size_t smem) {
  struct fake_function* fn = (struct fake_function*)f;
  *n = env_int("FAKE_CUDA_BLOCKS_PER_SM", 1);
  LOG("occupancy_blocks name=%s block=%d smem=%zu blocks=%d", fn->name, block, smem, *n);
  return CUDA_SUCCESS;
}

static CUresult f_occupancy_clusters(int* n, CUfunction f, const CUlaunchConfig* c) {
  struct fake_function* fn = (struct fake_function*)f;
  unsigned dims[3];
  char cluster[48];
  if (!cluster_of(c, dims, cluster, sizeof(cluster))) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
  *n = env_int("FAKE_CUDA_ACTIVE_CLUSTERS", env_int("FAKE_CUDA_SMS", 132) / (int)(dims[0] * dims[1] * dims[2]));
  LOG("occupancy_clusters name=%s cluster=%s block=%u smem=%u clusters=%d", fn->name, cluster, c->blockDimX,
      c->sharedMemBytes, *n);
  return CUDA_SUCCESS;
}
static CUresult f_memset_d8_async(CUdeviceptr p, unsigned char v, size_t n, CUstream s) {
  (void)s;
  memset((void*)(uintptr_t)p, v, n);
  LOG("memset ptr=%llu value=%u bytes=%zu", (unsigned long long)p, v, n);
  return CUDA_SUCCESS;
}
static CUresult f_mem_alloc(CUdeviceptr* p, size_t n) { *p = (CUdeviceptr)(uintptr_t)aligned_alloc(256, (n + 255) / 256 * 256); return CUDA_SUCCESS; }
static CUresult f_mem_free(CUdeviceptr p) { free((void*)(uintptr_t)p); return CUDA_SUCCESS; }
static CUresult f_memcpy_htod_async(CUdeviceptr d, const void* h, size_t n, CUstream s) { (void)s; memcpy((void*)(uintptr_t)d, h, n); return CUDA_SUCCESS; }
static CUresult f_memcpy_dtoh_async(void* h, CUdeviceptr d, size_t n, CUstream s) { (void)s; memcpy(h, (void*)(uintptr_t)d, n); return CUDA_SUCCESS; }
static CUresult f_stream_create(CUstream* s, unsigned int flags) { (void)flags; *s = (CUstream)malloc(1); return CUDA_SUCCESS; }
static CUresult f_stream_destroy(CUstream s) { free(s); return CUDA_SUCCESS; }
static CUresult f_stream_synchronize(CUstream s) { (void)s; return CUDA_SUCCESS; }

static const struct { const char* name; void* fn; } table[] = {
  {"cuInit", (void*)f_init}, {"cuDriverGetVersion", (void*)f_driver_get_version},
  {"cuGetErrorString", (void*)f_get_error_string}, {"cuDeviceGetCount", (void*)f_device_get_count},
  {"cuDeviceGet", (void*)f_device_get}, {"cuDeviceGetAttribute", (void*)f_device_get_attribute},
  {"cuDevicePrimaryCtxRetain", (void*)f_primary_ctx_retain}, {"cuDevicePrimaryCtxRelease", (void*)f_primary_ctx_release},
  {"cuCtxGetCurrent", (void*)f_ctx_get_current}, {"cuCtxPushCurrent", (void*)f_ctx_push_current},
  {"cuCtxPopCurrent", (void*)f_ctx_pop_current}, {"cuCtxGetDevice", (void*)f_ctx_get_device},
  {"cuStreamGetCtx", (void*)f_stream_get_ctx}, {"cuModuleLoadData", (void*)f_module_load_data},
  {"cuModuleUnload", (void*)f_module_unload}, {"cuModuleGetFunction", (void*)f_module_get_function},
  {"cuFuncGetAttribute", (void*)f_func_get_attribute}, {"cuFuncSetAttribute", (void*)f_func_set_attribute},
  {"cuLaunchKernel", (void*)f_launch_kernel}, {"cuLaunchKernelEx", (void*)f_launch_kernel_ex},
  {"cuMemsetD8Async", (void*)f_memset_d8_async}, {"cuMemAlloc", (void*)f_mem_alloc}, {"cuMemFree", (void*)f_mem_free},
  {"cuMemcpyHtoDAsync", (void*)f_memcpy_htod_async}, {"cuMemcpyDtoHAsync", (void*)f_memcpy_dtoh_async},
  {"cuStreamCreate", (void*)f_stream_create}, {"cuStreamDestroy", (void*)f_stream_destroy},
  {"cuStreamSynchronize", (void*)f_stream_synchronize}, {"cuTensorMapEncodeTiled", (void*)f_tensor_map_encode_tiled},
  {"cuTensorMapEncodeIm2col", (void*)f_tensor_map_encode_im2col},
  {"cuOccupancyMaxActiveBlocksPerMultiprocessor", (void*)f_occupancy_blocks},
  {"cuOccupancyMaxActiveClusters", (void*)f_occupancy_clusters},
};

static int hidden(const char* symbol) {
  const char* list = getenv("FAKE_CUDA_HIDE");
  size_t n = strlen(symbol);
  while (list && *list) {
    const char* end = strchr(list, ',');
    size_t len = end ? (size_t)(end - list) : strlen(list);
    if (len == n && strncmp(list, symbol, n) == 0) return 1;
    list = end ? end + 1 : NULL;
  }
  return 0;
}

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* status) {
  size_t i;
  (void)version; (void)flags;
  for (i = 0; i < sizeof(table) / sizeof(table[0]) && !hidden(symbol); ++i) {
    if (strcmp(table[i].name, symbol) == 0) {
      *pfn = table[i].fn;
      if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
      return CUDA_SUCCESS;
    }
  }
  *pfn = NULL;
  if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_ERROR_NOT_FOUND;
}
