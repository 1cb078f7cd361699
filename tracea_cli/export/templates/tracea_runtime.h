/* tracea_runtime.h: the CUDA driver glue shared by every Tracea export of any op (tracea @VERSION@). Generated; do
 * not edit.
 *
 * The driver is found at run time with dlopen("libcuda.so.1") and cuGetProcAddress, so programs that include this
 * header build and link on machines without a GPU or a driver: compile with cuda.h on the include path (CUDA 12.0 or
 * later; no CUDA library is linked) and link with -ldl -lpthread. Linux only.
 *
 * Binaries load into each device's primary context (the one the CUDA runtime API and PyTorch use), lazily at the
 * first launch and under a mutex, so launches from several threads are safe. Streams must belong to that context
 * (streams of the runtime API and of PyTorch do). Every call returns a tracea_status; when it is
 * TRACEA_ERROR_DRIVER, tracea_last_driver_error() gives the CUresult and the driver call that failed.
 *
 * Kernels that read their operands through TMA (the Hopper families, sm_90a) get their tensor maps encoded here at
 * each launch (cuTensorMapEncodeTiled for the 2-D and 3-D tiled maps, cuTensorMapEncodeIm2col for im2col maps: host-only
 * calls) and passed by value as kernel parameters; thread-block
 * clusters and persistent grids are launched with cuLaunchKernelEx, the grid sized by the device's occupancy. Where
 * TMA cannot read an operand in place, staging kernels first copy it into scratch in the caller's workspace, and the
 * maps read the copy.
 *
 * The runtime knows no op. A call is a set of named values in slots (tracea_call: device pointers, int sizes and
 * leading dimensions); each op's header (tracea_<op>.h) fills them from its own argument struct and says where its
 * tensors, workspace and sizes live (tracea_abi). Launch tables name kernel parameters by slot.
 */
#ifndef TRACEA_RUNTIME_H_V2
#define TRACEA_RUNTIME_H_V2

#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if !defined(CUDA_VERSION) || CUDA_VERSION < 12000
#error "Tracea exports need cuda.h from CUDA 12.0 or later on the include path."
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tracea_status {
  TRACEA_OK = 0,
  TRACEA_ERROR_DRIVER_NOT_FOUND = 1, /* libcuda.so.1 could not be opened: no NVIDIA driver here */
  TRACEA_ERROR_DRIVER_TOO_OLD = 2,   /* older than the export's requires.min_driver (manifest.json) */
  TRACEA_ERROR_DRIVER = 3,           /* a driver call failed: see tracea_last_driver_error() */
  TRACEA_ERROR_NO_DEVICE = 4,        /* no CUDA device, or the device ordinal does not exist */
  TRACEA_ERROR_UNSUPPORTED_ARCH = 5, /* no cubin or PTX of this export runs on the device's architecture */
  TRACEA_ERROR_DEVICE_LIMITS = 6,    /* the device has less shared memory or fewer threads than a kernel needs */
  TRACEA_ERROR_INVALID_ARGUMENT = 7, /* null pointer, size <= 0, leading dimension too small, missing bias/residual */
  TRACEA_ERROR_MISALIGNED = 8,       /* pointers or leading dimensions lack the alignment every fitting kernel needs */
  TRACEA_ERROR_UNSUPPORTED_SHAPE = 9,/* no tuned shape of this export is valid for (M, N, K) */
  TRACEA_ERROR_WORKSPACE = 10,       /* the kernels need a workspace of <prefix>_workspace_bytes...(...) bytes */
  TRACEA_ERROR_NOT_EXPORTED = 11,    /* C++: no included export matches the call (op, dtype, its options) */
  TRACEA_ERROR_UNSUPPORTED_LAYOUT = 12 /* no kernel that fits the sizes reads the tensors in this layout (strides) */
} tracea_status;

typedef enum tracea_dtype {
  TRACEA_DTYPE_FP32 = 0, TRACEA_DTYPE_TF32 = 1, TRACEA_DTYPE_FP16 = 2, TRACEA_DTYPE_BF16 = 3, TRACEA_DTYPE_FP64 = 4
} tracea_dtype;

/* The driver functions the runtime uses, plus a few for host programs (memory, copies, streams), so that they need
 * not link libcuda either. Versions as of CUDA 12.0 (cuGetProcAddress is asked for those). */
typedef struct tracea_driver {
  int version; /* cuDriverGetVersion: 13000 for CUDA 13.0 */
  CUresult (*init)(unsigned int);
  CUresult (*driver_get_version)(int*);
  CUresult (*get_error_string)(CUresult, const char**);
  CUresult (*device_get_count)(int*);
  CUresult (*device_get)(CUdevice*, int);
  CUresult (*device_get_attribute)(int*, CUdevice_attribute, CUdevice);
  CUresult (*primary_ctx_retain)(CUcontext*, CUdevice);
  CUresult (*primary_ctx_release)(CUdevice);
  CUresult (*ctx_get_current)(CUcontext*);
  CUresult (*ctx_push_current)(CUcontext);
  CUresult (*ctx_pop_current)(CUcontext*);
  CUresult (*ctx_get_device)(CUdevice*);
  CUresult (*stream_get_ctx)(CUstream, CUcontext*);
  CUresult (*module_load_data)(CUmodule*, const void*);
  CUresult (*module_unload)(CUmodule);
  CUresult (*module_get_function)(CUfunction*, CUmodule, const char*);
  CUresult (*func_get_attribute)(int*, CUfunction_attribute, CUfunction);
  CUresult (*func_set_attribute)(CUfunction, CUfunction_attribute, int);
  CUresult (*launch_kernel)(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
                            unsigned int, unsigned int, CUstream, void**, void**);
  CUresult (*launch_kernel_ex)(const CUlaunchConfig*, CUfunction, void**, void**);
  /* Used by TMA / cluster / persistent kernels only; NULL when the driver lacks them. */
  CUresult (*tensor_map_encode_tiled)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                      const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                      CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  CUresult (*tensor_map_encode_im2col)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                       const cuuint64_t*, const int*, const int*, cuuint32_t, cuuint32_t,
                                       const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                       CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  CUresult (*occupancy_max_active_blocks)(int*, CUfunction, int, size_t);
  CUresult (*occupancy_max_active_clusters)(int*, CUfunction, const CUlaunchConfig*);
  CUresult (*memset_d8_async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*mem_alloc)(CUdeviceptr*, size_t);
  CUresult (*mem_free)(CUdeviceptr);
  CUresult (*memcpy_htod_async)(CUdeviceptr, const void*, size_t, CUstream);
  CUresult (*memcpy_dtoh_async)(void*, CUdeviceptr, size_t, CUstream);
  CUresult (*stream_create)(CUstream*, unsigned int);
  CUresult (*stream_destroy)(CUstream);
  CUresult (*stream_synchronize)(CUstream);
} tracea_driver;

/* ---- launch tables (written by tracea export; see docs/kernel-abi.md) ---- */
#define TRACEA_MAX_DEVICES 64
#define TRACEA_MAX_KERNELS @MAX_KERNELS@
#define TRACEA_DEFAULT_SMEM_LIMIT 49152u
#define TRACEA_MAX_TENSOR_MAPS @MAX_TENSOR_MAPS@
#define TRACEA_MAX_PARAMS @MAX_PARAMS@
#define TRACEA_MAX_SCRATCH @MAX_SCRATCH@

/* Grid rules of docs/kernel-abi.md. The cluster rules' value is cluster_m; with
 * work = ceil(ceil(M/tile_m)/cluster_m) * ceil(N/tile_n): WORK_CLUSTERS = work * cluster_m,
 * PERSISTENT_CLUSTERS = min(work, resident clusters on the device) * cluster_m. MN_DIV, M_DIV, N_DIV, K_DIV:
 * ceil(M*N / value), ceil(M / value), ceil(N / value), ceil(K / value). */
enum { TRACEA_GRID_CONST = 0, TRACEA_GRID_TILES = 1, TRACEA_GRID_TILES_M = 2, TRACEA_GRID_TILES_N = 3,
       TRACEA_GRID_SPLIT_K = 4, TRACEA_GRID_MN_DIV = 5, TRACEA_GRID_WORK_CLUSTERS = 6,
       TRACEA_GRID_PERSISTENT_CLUSTERS = 7, TRACEA_GRID_M_DIV = 8, TRACEA_GRID_N_DIV = 9, TRACEA_GRID_K_DIV = 10 };
enum { TRACEA_STEP_MEMSET = 0, TRACEA_STEP_KERNEL = 1 };

#define TRACEA_MAX_POINTERS 16
#define TRACEA_MAX_INTS 32
#define TRACEA_MAX_DISPATCH 8
#define TRACEA_MAX_FIELDS 8

/* A kernel parameter, in the order of the kernel's signature: pointer slot i (i), int slot i (TRACEA_PARAM_INT + i),
 * or the variant's i-th tensor map (TRACEA_PARAM_MAP + i, passed by value). Which value each slot holds is the op's
 * (its header names them: TRACEA_<OP>_<NAME>). */
#define TRACEA_PARAM_INT 64
#define TRACEA_PARAM_MAP 128

/* One call's named values: what the op's header fills from its arguments, and the runtime places scratch into. */
typedef struct tracea_call {
  CUdeviceptr pointers[TRACEA_MAX_POINTERS];
  int ints[TRACEA_MAX_INTS];
  size_t workspace_bytes;           /* bytes at the workspace pointer */
} tracea_call;

/* A tensor the caller passes: its pointer slot and the int slot of its leading dimension (-1: none). Its base and
 * row stride must be aligned as the chosen kernel needs. */
typedef struct tracea_tensor_arg { int pointer; int ld; } tracea_tensor_arg;

/* Where an op's values live (written by its header): the workspace's pointer slot, the int slots of the sizes M, N and
 * K that grid rules read, of the sizes a variant serves and the nearest tuned shape is measured in (dispatch), the
 * tensors whose alignment is checked, and the int slots by which a call asks for a pre-pass (requests: a variant
 * serves a call that sets one only if one of its steps runs `when` that slot). */
typedef struct tracea_abi {
  const char* op;
  int workspace;
  int grid_sizes[3];
  const int* dispatch;
  int n_dispatch;
  const tracea_tensor_arg* tensors;
  int n_tensors;
  const int* requests;              /* NULL (0 of them) for most ops */
  int n_requests;
} tracea_abi;

typedef struct tracea_grid_rule { int kind; unsigned int value; } tracea_grid_rule;

/* Tensor-map kinds (docs/kernel-abi.md, "Map kinds"): 2-D tiled (rank 2), 3-D tiled (rank 3), im2col (rank 4). */
enum { TRACEA_MAP_TILED = 0, TRACEA_MAP_TILED3D = 1, TRACEA_MAP_IM2COL = 2 };

/* A TMA tensor map, encoded at launch over the call's memory (docs/kernel-abi.md, "Tensor maps"). */
typedef struct tracea_tensor_map {
  int tensor;                       /* pointer slot: whose memory it maps */
  int dims[4];                      /* int slots: its sizes, innermost first (2, 3 or 4 of them, by kind) */
  int row_stride;                   /* int slot: elements between entries of dimension 1 (per row) */
  unsigned int box[4];              /* tiled kinds: elements one copy moves, innermost first (im2col: none) */
  unsigned int elem_bytes;
  int data_type;                    /* CUtensorMapDataType */
  int interleave;                   /* CUtensorMapInterleave */
  int swizzle;                      /* CUtensorMapSwizzle */
  int l2_promotion;                 /* CUtensorMapL2promotion */
  int oob_fill;                     /* CUtensorMapFloatOOBfill */
  int kind;                         /* TRACEA_MAP_TILED, TRACEA_MAP_TILED3D, TRACEA_MAP_IM2COL */
  int outer_strides[2];             /* int slots: elements between entries of dimensions 2 and 3 (-1: none) */
  int lower[2], upper[2];           /* im2col: the pixel box's corners over dimensions 1 and 2 */
  unsigned int element_strides[4];  /* im2col: the traversal stride per dimension (tiled kinds: 1) */
  unsigned int channels_per_pixel;  /* im2col: elements of dimension 0 per row a load fills */
  unsigned int pixels_per_column;   /* im2col: rows a load fills */
} tracea_tensor_map;

/* A relation between a call's ints that a variant's tensor maps assume: ints[value] == ints[of[0]] * ints[of[1]]
 * (-1: a factor of 1). A call that breaks it is not served by that variant (TRACEA_ERROR_UNSUPPORTED_LAYOUT). */
typedef struct tracea_requirement {
  int value;
  int of[2];
} tracea_requirement;

typedef struct tracea_step {
  int kind;                         /* TRACEA_STEP_MEMSET (zero the workspace) or TRACEA_STEP_KERNEL */
  int kernel;                       /* kernel steps: index into the variant's kernel names */
  tracea_grid_rule grid[3];
  unsigned int block[3];
  unsigned int cluster[3];          /* {0, 0, 0}: cuLaunchKernel; else cuLaunchKernelEx, with the cluster attribute
                                       when it has more than one block */
  unsigned int dynamic_smem_bytes;
  unsigned int memset_bytes_per_mn; /* memset steps: bytes per element of C */
  const int* params;                /* kernel steps with their own parameters (staging kernels); NULL: the variant's */
  int n_params;
  int when;                         /* -1: always; else an int slot: the step runs only when that value is not 0 */
} tracea_step;

/* A scratch buffer of the staging pre-pass (docs/kernel-abi.md, "Staging"): rows x cols elements, row-major, with
 * leading dimension ld = cols rounded up to ld_multiple. Buffers lie in the workspace after its M*N part
 * (workspace_bytes_per_mn), in table order, each at the next multiple of align_bytes. */
typedef struct tracea_scratch {
  int buffer;                       /* pointer slot the buffer's address goes to */
  int source;                       /* pointer slot of the operand a staging kernel copies there, which then needs
                                       only element alignment (no kernel reads it through TMA); -1 for an
                                       intermediate that one kernel writes and the next reads */
  int rows, cols;                   /* int slots of its sizes */
  int ld;                           /* int slot its leading dimension goes to */
  unsigned int ld_multiple;
  unsigned int elem_bytes;
  unsigned int align_bytes;
} tracea_scratch;

typedef struct tracea_variant {
  int sizes[TRACEA_MAX_DISPATCH];   /* the tuned shape: its dispatch sizes, in the op's order */
  int valid[TRACEA_MAX_DISPATCH][3];/* the sizes it serves: multiples of [2] within [[0], [1]], per dispatch size */
  unsigned int alignment_bytes;     /* of every tensor pointer and leading dimension (in bytes) */
  unsigned int tile_m, tile_n, split_k;
  unsigned int workspace_bytes_per_mn;
  unsigned int shared_bytes;        /* the most static + dynamic shared memory one kernel needs */
  unsigned int threads;             /* the largest block */
  const unsigned char* image;       /* cubin, or PTX text ending in 0 */
  size_t image_bytes;
  const char* const* kernel_names;
  int n_kernels;
  const tracea_step* steps;
  int n_steps;
  const int* params;                /* slots (and maps) in the kernels' parameter order */
  int n_params;
  const tracea_tensor_map* maps;    /* encoded at each launch; none for kernels that take plain pointers */
  int n_maps;
  const tracea_scratch* scratch;    /* staged operands; none for most variants */
  int n_scratch;
  const tracea_requirement* requirements; /* what its tensor maps assume of the call's strides; none for most */
  int n_requirements;
  unsigned int element_aligned;     /* bit p: pointer slot p (and its leading dimension) needs only its element's
                                       alignment, the kernels moving it one element at a time */
} tracea_variant;

typedef struct tracea_image_set {
  const char* arch;                 /* "sm_90", "sm_90a", "compute_80" */
  int major, minor;
  int arch_specific;                /* sm_90a: runs on compute capability 9.0 only */
  int is_ptx;
  const tracea_variant* variants;
  int n_variants;
} tracea_image_set;

typedef struct tracea_device_state {
  int tried;                        /* loading was attempted; `status` says how it went */
  tracea_status status;
  CUresult result;
  const char* call;
  CUdevice device;
  CUcontext ctx;                    /* the retained primary context */
  int set;                          /* index of the image set in use */
} tracea_device_state;

typedef struct tracea_export {
  const char* name;
  const tracea_abi* abi;
  tracea_dtype dtype;
  int fields[TRACEA_MAX_FIELDS];    /* the op's other problem fields (a layout, an epilogue), as its header codes them */
  int n_fields;
  unsigned int elem_bytes;
  int min_driver_version;
  const tracea_image_set* sets;
  int n_sets;
  int max_variants;
  int n_shapes;
  pthread_mutex_t* mutex;
  tracea_device_state* devices;     /* [TRACEA_MAX_DEVICES] */
  CUmodule* modules;                /* [TRACEA_MAX_DEVICES][max_variants] */
  CUfunction* functions;            /* [TRACEA_MAX_DEVICES][max_variants][TRACEA_MAX_KERNELS] */
  unsigned int* resident;           /* same shape: clusters (or blocks) of a persistent kernel the device holds at once */
} tracea_export;

/* ---- the driver ---- */
static tracea_driver tracea__drv;
static tracea_status tracea__drv_status = TRACEA_ERROR_DRIVER_NOT_FOUND;
static CUresult tracea__drv_result = CUDA_SUCCESS;
static pthread_once_t tracea__drv_once = PTHREAD_ONCE_INIT;
static __thread CUresult tracea__last_result = CUDA_SUCCESS;
static __thread const char* tracea__last_call = "";

static inline tracea_status tracea__fail(CUresult result, const char* call) {
  tracea__last_result = result;
  tracea__last_call = call;
  return TRACEA_ERROR_DRIVER;
}

typedef CUresult (*tracea__get_proc_fn)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

static void tracea__drv_load(void) {
  static const struct { const char* name; size_t offset; int required; } symbols[] = {
    {"cuInit", offsetof(tracea_driver, init), 1},
    {"cuDriverGetVersion", offsetof(tracea_driver, driver_get_version), 1},
    {"cuGetErrorString", offsetof(tracea_driver, get_error_string), 1},
    {"cuDeviceGetCount", offsetof(tracea_driver, device_get_count), 1},
    {"cuDeviceGet", offsetof(tracea_driver, device_get), 1},
    {"cuDeviceGetAttribute", offsetof(tracea_driver, device_get_attribute), 1},
    {"cuDevicePrimaryCtxRetain", offsetof(tracea_driver, primary_ctx_retain), 1},
    {"cuDevicePrimaryCtxRelease", offsetof(tracea_driver, primary_ctx_release), 1},
    {"cuCtxGetCurrent", offsetof(tracea_driver, ctx_get_current), 1},
    {"cuCtxPushCurrent", offsetof(tracea_driver, ctx_push_current), 1},
    {"cuCtxPopCurrent", offsetof(tracea_driver, ctx_pop_current), 1},
    {"cuCtxGetDevice", offsetof(tracea_driver, ctx_get_device), 1},
    {"cuStreamGetCtx", offsetof(tracea_driver, stream_get_ctx), 1},
    {"cuModuleLoadData", offsetof(tracea_driver, module_load_data), 1},
    {"cuModuleUnload", offsetof(tracea_driver, module_unload), 1},
    {"cuModuleGetFunction", offsetof(tracea_driver, module_get_function), 1},
    {"cuFuncGetAttribute", offsetof(tracea_driver, func_get_attribute), 1},
    {"cuFuncSetAttribute", offsetof(tracea_driver, func_set_attribute), 1},
    {"cuLaunchKernel", offsetof(tracea_driver, launch_kernel), 1},
    {"cuLaunchKernelEx", offsetof(tracea_driver, launch_kernel_ex), 0},
    {"cuTensorMapEncodeTiled", offsetof(tracea_driver, tensor_map_encode_tiled), 0},
    {"cuTensorMapEncodeIm2col", offsetof(tracea_driver, tensor_map_encode_im2col), 0},
    {"cuOccupancyMaxActiveBlocksPerMultiprocessor", offsetof(tracea_driver, occupancy_max_active_blocks), 0},
    {"cuOccupancyMaxActiveClusters", offsetof(tracea_driver, occupancy_max_active_clusters), 0},
    {"cuMemsetD8Async", offsetof(tracea_driver, memset_d8_async), 1},
    {"cuMemAlloc", offsetof(tracea_driver, mem_alloc), 1},
    {"cuMemFree", offsetof(tracea_driver, mem_free), 1},
    {"cuMemcpyHtoDAsync", offsetof(tracea_driver, memcpy_htod_async), 1},
    {"cuMemcpyDtoHAsync", offsetof(tracea_driver, memcpy_dtoh_async), 1},
    {"cuStreamCreate", offsetof(tracea_driver, stream_create), 1},
    {"cuStreamDestroy", offsetof(tracea_driver, stream_destroy), 1},
    {"cuStreamSynchronize", offsetof(tracea_driver, stream_synchronize), 1},
  };
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  void* symbol;
  tracea__get_proc_fn get_proc;
  CUresult r;
  size_t i;
  if (lib == NULL) {
    tracea__drv_status = TRACEA_ERROR_DRIVER_NOT_FOUND;
    return;
  }
  /* cuGetProcAddress_v2 (CUDA 12.0) reports whether a symbol exists; older drivers lack it. */
  symbol = dlsym(lib, "cuGetProcAddress_v2");
  if (symbol == NULL) {
    tracea__drv_status = TRACEA_ERROR_DRIVER_TOO_OLD;
    return;
  }
  memcpy(&get_proc, &symbol, sizeof(symbol)); /* POSIX: dlsym's object pointer holds the function's address */
  for (i = 0; i < sizeof(symbols) / sizeof(symbols[0]); ++i) {
    void* fn = NULL;
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    r = get_proc(symbols[i].name, &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &found);
    if (r != CUDA_SUCCESS || found != CU_GET_PROC_ADDRESS_SUCCESS || fn == NULL) {
      if (symbols[i].required) {
        tracea__drv_status = TRACEA_ERROR_DRIVER_TOO_OLD;
        return;
      }
      fn = NULL;
    }
    memcpy((char*)&tracea__drv + symbols[i].offset, &fn, sizeof(fn));
  }
  r = tracea__drv.init(0);
  if (r != CUDA_SUCCESS) {
    tracea__drv_result = r;
    tracea__drv_status = r == CUDA_ERROR_NO_DEVICE ? TRACEA_ERROR_NO_DEVICE : TRACEA_ERROR_DRIVER;
    return;
  }
  r = tracea__drv.driver_get_version(&tracea__drv.version);
  if (r != CUDA_SUCCESS) {
    tracea__drv_result = r;
    tracea__drv_status = TRACEA_ERROR_DRIVER;
    return;
  }
  tracea__drv_status = TRACEA_OK;
}

/* The driver's function table, loaded once (thread-safe). */
static inline tracea_status tracea_driver_get(const tracea_driver** driver) {
  pthread_once(&tracea__drv_once, tracea__drv_load);
  if (tracea__drv_status == TRACEA_ERROR_DRIVER) {
    tracea__fail(tracea__drv_result, "cuInit");
  }
  if (driver != NULL) {
    *driver = tracea__drv_status == TRACEA_OK ? &tracea__drv : NULL;
  }
  return tracea__drv_status;
}

static inline const char* tracea_status_string(tracea_status status) {
  switch (status) {
    case TRACEA_OK: return "ok";
    case TRACEA_ERROR_DRIVER_NOT_FOUND: return "the CUDA driver (libcuda.so.1) was not found";
    case TRACEA_ERROR_DRIVER_TOO_OLD: return "the CUDA driver is older than this export needs";
    case TRACEA_ERROR_DRIVER: return "a CUDA driver call failed";
    case TRACEA_ERROR_NO_DEVICE: return "no such CUDA device";
    case TRACEA_ERROR_UNSUPPORTED_ARCH: return "no binary of this export runs on the device's architecture";
    case TRACEA_ERROR_DEVICE_LIMITS: return "the device lacks the shared memory or threads a kernel needs";
    case TRACEA_ERROR_INVALID_ARGUMENT: return "invalid argument";
    case TRACEA_ERROR_MISALIGNED: return "pointers or leading dimensions are not aligned as the kernels need";
    case TRACEA_ERROR_UNSUPPORTED_SHAPE: return "no tuned shape of this export is valid for this shape";
    case TRACEA_ERROR_WORKSPACE: return "the workspace is missing or too small";
    case TRACEA_ERROR_NOT_EXPORTED: return "no included export has this op, dtype and options (layout, epilogue, geometry)";
    case TRACEA_ERROR_UNSUPPORTED_LAYOUT:
      return "no kernel of this export that fits the sizes reads the tensors in this layout (their strides; see the "
             "manifest's launch[].description.requires and the op's guide)";
  }
  return "unknown status";
}

/* The CUresult and the driver call behind the calling thread's last TRACEA_ERROR_DRIVER. */
static inline CUresult tracea_last_driver_error(const char** call) {
  if (call != NULL) {
    *call = tracea__last_call;
  }
  return tracea__last_result;
}

/* ---- choosing binaries and variants ---- */

/* The image set for compute capability major.minor: the exact architecture (arch-specific first), else the same
 * major version with the highest lower minor, else PTX of the highest architecture the device is at least. */
static inline int tracea__pick_set(const tracea_export* e, int major, int minor) {
  int best = -1, best_rank = -1, i;
  for (i = 0; i < e->n_sets; ++i) {
    const tracea_image_set* s = &e->sets[i];
    int rank = -1;
    if (!s->is_ptx && s->major == major && s->minor == minor) {
      rank = s->arch_specific ? 3000 : 2999;
    } else if (!s->is_ptx && !s->arch_specific && s->major == major && s->minor < minor) {
      rank = 2000 + s->minor;
    } else if (s->is_ptx && (s->major < major || (s->major == major && s->minor <= minor))) {
      rank = 1000 + s->major * 10 + s->minor;
    }
    if (rank > best_rank) {
      best = i;
      best_rank = rank;
    }
  }
  return best;
}

static inline void tracea__unload_device(const tracea_export* e, const tracea_driver* d, int ordinal) {
  tracea_device_state* st = &e->devices[ordinal];
  CUmodule* modules = e->modules + (size_t)ordinal * e->max_variants;
  const size_t per_device = (size_t)e->max_variants * TRACEA_MAX_KERNELS;
  CUcontext popped;
  int v;
  if (st->ctx != NULL) {
    if (d->ctx_push_current(st->ctx) == CUDA_SUCCESS) {
      for (v = 0; v < e->max_variants; ++v) {
        if (modules[v] != NULL) {
          d->module_unload(modules[v]);
        }
      }
      d->ctx_pop_current(&popped);
    }
    d->primary_ctx_release(st->device);
  }
  memset(modules, 0, sizeof(CUmodule) * (size_t)e->max_variants);
  memset(e->functions + (size_t)ordinal * per_device, 0, sizeof(CUfunction) * per_device);
  memset(e->resident + (size_t)ordinal * per_device, 0, sizeof(unsigned int) * per_device);
  memset(st, 0, sizeof(*st));
}

/* The launch configuration of a kernel step (cuLaunchKernelEx); the cluster attribute only for clusters of more
 * than one block. `attribute` must outlive `config`. */
static inline void tracea__launch_config(const tracea_step* s, unsigned int gx, unsigned int gy, unsigned int gz,
                                         CUstream stream, CUlaunchConfig* config, CUlaunchAttribute* attribute) {
  memset(config, 0, sizeof(*config));
  memset(attribute, 0, sizeof(*attribute));
  config->gridDimX = gx; config->gridDimY = gy; config->gridDimZ = gz;
  config->blockDimX = s->block[0]; config->blockDimY = s->block[1]; config->blockDimZ = s->block[2];
  config->sharedMemBytes = s->dynamic_smem_bytes;
  config->hStream = stream;
  if (s->cluster[0] * s->cluster[1] * s->cluster[2] > 1) {
    attribute->id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attribute->value.clusterDim.x = s->cluster[0];
    attribute->value.clusterDim.y = s->cluster[1];
    attribute->value.clusterDim.z = s->cluster[2];
    config->attrs = attribute;
    config->numAttrs = 1;
  }
}

static inline int tracea__is_persistent(const tracea_step* s) {
  return s->grid[0].kind == TRACEA_GRID_PERSISTENT_CLUSTERS || s->grid[1].kind == TRACEA_GRID_PERSISTENT_CLUSTERS ||
         s->grid[2].kind == TRACEA_GRID_PERSISTENT_CLUSTERS;
}

/* Clusters (blocks, for clusters of one) of a persistent kernel's step that are resident on the device at once:
 * cuOccupancyMaxActiveClusters, or blocks per SM times the SM count (docs/kernel-abi.md). */
static inline tracea_status tracea__resident(const tracea_driver* d, CUfunction f, const tracea_step* s, int sm_count,
                                             unsigned int* resident) {
  const unsigned int cluster = s->cluster[0] == 0 ? 1u : s->cluster[0] * s->cluster[1] * s->cluster[2];
  int n = 0;
  CUresult r;
  if (cluster > 1) {
    CUlaunchConfig config;
    CUlaunchAttribute attribute;
    if (d->occupancy_max_active_clusters == NULL) {
      return TRACEA_ERROR_DRIVER_TOO_OLD;
    }
    tracea__launch_config(s, (unsigned int)sm_count * cluster, 1u, 1u, NULL, &config, &attribute);
    if ((r = d->occupancy_max_active_clusters(&n, f, &config)) != CUDA_SUCCESS) {
      return tracea__fail(r, "cuOccupancyMaxActiveClusters");
    }
  } else {
    if (d->occupancy_max_active_blocks == NULL) {
      return TRACEA_ERROR_DRIVER_TOO_OLD;
    }
    r = d->occupancy_max_active_blocks(&n, f, (int)(s->block[0] * s->block[1] * s->block[2]), s->dynamic_smem_bytes);
    if (r != CUDA_SUCCESS) {
      return tracea__fail(r, "cuOccupancyMaxActiveBlocksPerMultiprocessor");
    }
    n *= sm_count;
  }
  if (n < 1) {
    return TRACEA_ERROR_DEVICE_LIMITS; /* not one cluster of this kernel fits on the device */
  }
  *resident = (unsigned int)n;
  return TRACEA_OK;
}

/* Load one variant's module and functions into the current context; check what the device allows per kernel. */
static inline tracea_status tracea__load_variant(const tracea_driver* d, const tracea_variant* v, int sm_count,
                                                 CUmodule* module, CUfunction* functions, unsigned int* resident) {
  CUresult r;
  int i, j;
  for (j = 0; j < v->n_steps; ++j) {
    if (v->steps[j].kind == TRACEA_STEP_KERNEL && v->steps[j].cluster[0] != 0 && d->launch_kernel_ex == NULL) {
      return TRACEA_ERROR_DRIVER_TOO_OLD;
    }
  }
  for (j = 0; j < v->n_maps; ++j) {
    const int im2col = v->maps[j].kind == TRACEA_MAP_IM2COL;
    if ((im2col && d->tensor_map_encode_im2col == NULL) || (!im2col && d->tensor_map_encode_tiled == NULL)) {
      return TRACEA_ERROR_DRIVER_TOO_OLD; /* cuTensorMapEncodeTiled or cuTensorMapEncodeIm2col is missing */
    }
  }
  r = d->module_load_data(module, v->image);
  if (r != CUDA_SUCCESS) {
    return tracea__fail(r, "cuModuleLoadData");
  }
  for (i = 0; i < v->n_kernels; ++i) {
    int max_threads = 0;
    unsigned int dynamic_smem = 0, threads = 0;
    r = d->module_get_function(&functions[i], *module, v->kernel_names[i]);
    if (r != CUDA_SUCCESS) {
      return tracea__fail(r, "cuModuleGetFunction");
    }
    for (j = 0; j < v->n_steps; ++j) {
      const tracea_step* s = &v->steps[j];
      if (s->kind == TRACEA_STEP_KERNEL && s->kernel == i) {
        unsigned int t = s->block[0] * s->block[1] * s->block[2];
        threads = t > threads ? t : threads;
        dynamic_smem = s->dynamic_smem_bytes > dynamic_smem ? s->dynamic_smem_bytes : dynamic_smem;
      }
    }
    /* Registers decide how many threads a block of this kernel may have on this device. */
    r = d->func_get_attribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, functions[i]);
    if (r != CUDA_SUCCESS) {
      return tracea__fail(r, "cuFuncGetAttribute");
    }
    if ((unsigned int)max_threads < threads) {
      return TRACEA_ERROR_DEVICE_LIMITS;
    }
    if (dynamic_smem > TRACEA_DEFAULT_SMEM_LIMIT) {
      r = d->func_set_attribute(functions[i], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)dynamic_smem);
      if (r != CUDA_SUCCESS) {
        return tracea__fail(r, "cuFuncSetAttribute");
      }
    }
    /* A persistent kernel's grid is what the device holds at once (asked after the shared memory limit is raised). */
    for (j = 0; j < v->n_steps; ++j) {
      const tracea_step* s = &v->steps[j];
      if (s->kind == TRACEA_STEP_KERNEL && s->kernel == i && tracea__is_persistent(s)) {
        tracea_status status = tracea__resident(d, functions[i], s, sm_count, &resident[i]);
        if (status != TRACEA_OK) {
          return status;
        }
        break;
      }
    }
  }
  return TRACEA_OK;
}

/* Called with the export's mutex held. */
static inline tracea_status tracea__load_device(const tracea_export* e, const tracea_driver* d, CUdevice device,
                                                int ordinal) {
  tracea_device_state* st = &e->devices[ordinal];
  int major = 0, minor = 0, smem_optin = 0, max_threads = 0, sm_count = 0, v;
  CUcontext popped;
  CUresult r;
  tracea_status status = TRACEA_OK;
  const tracea_image_set* set;
  st->device = device;
  if (d->version < e->min_driver_version) {
    return TRACEA_ERROR_DRIVER_TOO_OLD;
  }
  if ((r = d->device_get_attribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device)) != CUDA_SUCCESS ||
      (r = d->device_get_attribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device)) != CUDA_SUCCESS ||
      (r = d->device_get_attribute(&smem_optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device)) !=
          CUDA_SUCCESS ||
      (r = d->device_get_attribute(&max_threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, device)) != CUDA_SUCCESS ||
      (r = d->device_get_attribute(&sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device)) != CUDA_SUCCESS) {
    return tracea__fail(r, "cuDeviceGetAttribute");
  }
  st->set = tracea__pick_set(e, major, minor);
  if (st->set < 0) {
    return TRACEA_ERROR_UNSUPPORTED_ARCH;
  }
  set = &e->sets[st->set];
  for (v = 0; v < set->n_variants; ++v) {
    if (set->variants[v].shared_bytes > (unsigned int)smem_optin || set->variants[v].threads > (unsigned int)max_threads) {
      return TRACEA_ERROR_DEVICE_LIMITS;
    }
  }
  r = d->primary_ctx_retain(&st->ctx, device);
  if (r != CUDA_SUCCESS) {
    st->ctx = NULL;
    return tracea__fail(r, "cuDevicePrimaryCtxRetain");
  }
  r = d->ctx_push_current(st->ctx);
  if (r != CUDA_SUCCESS) {
    return tracea__fail(r, "cuCtxPushCurrent");
  }
  for (v = 0; v < set->n_variants && status == TRACEA_OK; ++v) {
    const size_t slot = (size_t)ordinal * e->max_variants + v;
    status = tracea__load_variant(d, &set->variants[v], sm_count, &e->modules[slot],
                                  &e->functions[slot * TRACEA_MAX_KERNELS], &e->resident[slot * TRACEA_MAX_KERNELS]);
  }
  d->ctx_pop_current(&popped);
  return status;
}

/* Load for `device` unless that was tried already; the outcome is kept (until unload) and returned. */
static inline tracea_status tracea__ensure_loaded(const tracea_export* e, const tracea_driver* d, CUdevice device,
                                                  tracea_device_state** state) {
  int ordinal = (int)device;
  tracea_status status;
  if (ordinal < 0 || ordinal >= TRACEA_MAX_DEVICES) {
    return TRACEA_ERROR_NO_DEVICE;
  }
  pthread_mutex_lock(e->mutex);
  *state = &e->devices[ordinal];
  if (!(*state)->tried) {
    const char* call = "";
    status = tracea__load_device(e, d, device, ordinal);
    if (status != TRACEA_OK) {
      CUresult result = status == TRACEA_ERROR_DRIVER ? tracea_last_driver_error(&call) : CUDA_SUCCESS;
      tracea__unload_device(e, d, ordinal);
      (*state)->result = result;
      (*state)->call = call;
    }
    (*state)->tried = 1;
    (*state)->status = status;
  }
  status = (*state)->status;
  if (status == TRACEA_ERROR_DRIVER) {
    tracea__fail((*state)->result, (*state)->call);
  }
  pthread_mutex_unlock(e->mutex);
  return status;
}

static inline tracea_status tracea__load_ordinal(const tracea_export* e, int ordinal) {
  const tracea_driver* d;
  tracea_device_state* st;
  CUdevice device;
  int count = 0;
  CUresult r;
  tracea_status status = tracea_driver_get(&d);
  if (status != TRACEA_OK) {
    return status;
  }
  if ((r = d->device_get_count(&count)) != CUDA_SUCCESS) {
    return tracea__fail(r, "cuDeviceGetCount");
  }
  if (ordinal < 0 || ordinal >= count) {
    return TRACEA_ERROR_NO_DEVICE;
  }
  if ((r = d->device_get(&device, ordinal)) != CUDA_SUCCESS) {
    return tracea__fail(r, "cuDeviceGet");
  }
  return tracea__ensure_loaded(e, d, device, &st);
}

/* The device `stream` belongs to; for the default stream, the current context's device, else device 0. */
static inline tracea_status tracea__stream_device(const tracea_driver* d, CUstream stream, CUdevice* device) {
  CUcontext ctx = NULL, popped;
  CUresult r;
  int count = 0;
  if (stream != NULL && stream != CU_STREAM_LEGACY && stream != CU_STREAM_PER_THREAD) {
    r = d->stream_get_ctx(stream, &ctx);
    if (r != CUDA_SUCCESS) {
      return tracea__fail(r, "cuStreamGetCtx");
    }
  } else if ((r = d->ctx_get_current(&ctx)) != CUDA_SUCCESS) {
    return tracea__fail(r, "cuCtxGetCurrent");
  }
  if (ctx == NULL) {
    if ((r = d->device_get_count(&count)) != CUDA_SUCCESS) {
      return tracea__fail(r, "cuDeviceGetCount");
    }
    if (count == 0) {
      return TRACEA_ERROR_NO_DEVICE;
    }
    r = d->device_get(device, 0);
    return r == CUDA_SUCCESS ? TRACEA_OK : tracea__fail(r, "cuDeviceGet");
  }
  if ((r = d->ctx_push_current(ctx)) != CUDA_SUCCESS) {
    return tracea__fail(r, "cuCtxPushCurrent");
  }
  r = d->ctx_get_device(device);
  d->ctx_pop_current(&popped);
  return r == CUDA_SUCCESS ? TRACEA_OK : tracea__fail(r, "cuCtxGetDevice");
}

static inline int tracea__misaligned(CUdeviceptr p, unsigned int alignment) {
  return p != 0 && (p % alignment) != 0;
}

/* 1 when a staging kernel of `v` copies the tensor in pointer slot `operand` into scratch before a kernel reads it. */
static inline int tracea__staged(const tracea_variant* v, int operand) {
  int i;
  for (i = 0; i < v->n_scratch; ++i) {
    if (v->scratch[i].source == operand) {
      return 1;
    }
  }
  return 0;
}

/* Where `v`'s scratch buffers lie in the workspace for a call (byte offsets) and their leading dimensions (either may
 * be NULL); returns the workspace bytes the call needs in all: the M*N part of split-K kernels, then the buffers in
 * table order, each at the next multiple of its align_bytes (docs/kernel-abi.md, "Staging"). */
static inline size_t tracea__scratch_layout(const tracea_variant* v, const tracea_abi* abi, const int* ints,
                                            size_t* offsets, size_t* lds) {
  size_t end = (size_t)v->workspace_bytes_per_mn * (size_t)ints[abi->grid_sizes[0]] * (size_t)ints[abi->grid_sizes[1]];
  int i;
  for (i = 0; i < v->n_scratch && i < TRACEA_MAX_SCRATCH; ++i) {
    const tracea_scratch* s = &v->scratch[i];
    const size_t cols = (size_t)ints[s->cols];
    const size_t ld = (cols + s->ld_multiple - 1) / s->ld_multiple * s->ld_multiple;
    end = (end + s->align_bytes - 1) / s->align_bytes * s->align_bytes;
    if (offsets != NULL) {
      offsets[i] = end;
    }
    if (lds != NULL) {
      lds[i] = ld;
    }
    end += (size_t)ints[s->rows] * ld * s->elem_bytes;
  }
  return end;
}

/* 1 when a step of `v` runs `when` int slot `slot` (the pre-pass a call asks for by setting it). */
static inline int tracea__has_prepass(const tracea_variant* v, int slot) {
  int i;
  for (i = 0; i < v->n_steps; ++i) {
    if (v->steps[i].kind == TRACEA_STEP_KERNEL && v->steps[i].when == slot) {
      return 1;
    }
  }
  return 0;
}

/* 1 when the call's layout is one `v` reads: every pre-pass the call asks for is a step of `v`, and the call's ints
 * keep every relation `v`'s tensor maps assume. */
static inline int tracea__reads_layout(const tracea_variant* v, const tracea_abi* abi, const tracea_call* c) {
  int i;
  for (i = 0; i < abi->n_requests; ++i) {
    if (c->ints[abi->requests[i]] != 0 && !tracea__has_prepass(v, abi->requests[i])) {
      return 0;
    }
  }
  for (i = 0; i < v->n_requirements; ++i) {
    const tracea_requirement* q = &v->requirements[i];
    const long long a = q->of[0] < 0 ? 1 : c->ints[q->of[0]], b = q->of[1] < 0 ? 1 : c->ints[q->of[1]];
    if ((long long)c->ints[q->value] != a * b) {
      return 0;
    }
  }
  return 1;
}

/* 1 when `v` may compute this call; sets *misaligned when alignment stood in the way, *layout when the tensors'
 * layout did (tracea__reads_layout). A tensor that a staging kernel copies needs only element alignment (its copy in
 * the workspace is what TMA reads). */
static inline int tracea__fits(const tracea_variant* v, const tracea_abi* abi, const tracea_call* c,
                               unsigned int elem_bytes, int* misaligned, int* layout) {
  int i;
  for (i = 0; i < abi->n_dispatch; ++i) {
    const int size = c->ints[abi->dispatch[i]];
    if (size < v->valid[i][0] || size > v->valid[i][1] || size % v->valid[i][2] != 0) {
      return 0;
    }
  }
  if (!tracea__reads_layout(v, abi, c)) {
    *layout = 1;
    return 0;
  }
  for (i = 0; i < abi->n_tensors; ++i) {
    const tracea_tensor_arg* t = &abi->tensors[i];
    const int element_wise = tracea__staged(v, t->pointer) || ((v->element_aligned >> t->pointer) & 1u);
    const unsigned int al = element_wise ? elem_bytes : v->alignment_bytes;
    if (tracea__misaligned(c->pointers[t->pointer], al) ||
        (t->ld >= 0 && ((size_t)c->ints[t->ld] * elem_bytes) % al != 0)) {
      *misaligned = 1;
      return 0;
    }
  }
  return 1;
}

/* How far a tuned shape is from the call's: the product of the per-size ratios (>= 1; 1 for an exact match). */
static inline double tracea__distance(const tracea_variant* v, const tracea_abi* abi, const tracea_call* c) {
  double r = 1.0;
  int i;
  for (i = 0; i < abi->n_dispatch; ++i) {
    const double tuned = v->sizes[i], size = c->ints[abi->dispatch[i]];
    r *= tuned > size ? tuned / size : size / tuned;
  }
  return r;
}

/* The exact tuned shape if it fits, else the nearest one that fits. */
static inline tracea_status tracea__select(const tracea_image_set* set, const tracea_abi* abi, const tracea_call* c,
                                           unsigned int elem_bytes, int* index) {
  int misaligned = 0, layout = 0, i;
  double best = 0.0;
  *index = -1;
  for (i = 0; i < set->n_variants; ++i) {
    const tracea_variant* v = &set->variants[i];
    double distance;
    if (!tracea__fits(v, abi, c, elem_bytes, &misaligned, &layout)) {
      continue;
    }
    distance = tracea__distance(v, abi, c);
    if (*index < 0 || distance < best) {
      *index = i;
      best = distance;
    }
  }
  if (*index >= 0) {
    return TRACEA_OK;
  }
  return layout ? TRACEA_ERROR_UNSUPPORTED_LAYOUT : misaligned ? TRACEA_ERROR_MISALIGNED : TRACEA_ERROR_UNSUPPORTED_SHAPE;
}

/* One grid dimension of a step (docs/kernel-abi.md), from the call's M, N and K. */
static inline unsigned long long tracea__grid(const tracea_grid_rule* g, const tracea_variant* v, const tracea_abi* abi,
                                              const int* ints, unsigned int resident) {
  const unsigned long long m = (unsigned long long)ints[abi->grid_sizes[0]];
  const unsigned long long n = (unsigned long long)ints[abi->grid_sizes[1]];
  const unsigned long long k = (unsigned long long)ints[abi->grid_sizes[2]];
  unsigned long long tiles_m = (m + v->tile_m - 1) / v->tile_m;
  unsigned long long tiles_n = (n + v->tile_n - 1) / v->tile_n;
  /* the cluster rules' work items: clusters of g->value tile rows, times the K slices of split-K */
  unsigned long long work = g->value == 0 ? 0 : (tiles_m + g->value - 1) / g->value * tiles_n * v->split_k;
  switch (g->kind) {
    case TRACEA_GRID_TILES: return tiles_m * tiles_n;
    case TRACEA_GRID_TILES_M: return tiles_m;
    case TRACEA_GRID_TILES_N: return tiles_n;
    case TRACEA_GRID_SPLIT_K: return v->split_k;
    case TRACEA_GRID_MN_DIV: return (m * n + g->value - 1) / g->value;
    case TRACEA_GRID_M_DIV: return (m + g->value - 1) / g->value;
    case TRACEA_GRID_N_DIV: return (n + g->value - 1) / g->value;
    case TRACEA_GRID_K_DIV: return (k + g->value - 1) / g->value;
    case TRACEA_GRID_WORK_CLUSTERS: return work * g->value;
    case TRACEA_GRID_PERSISTENT_CLUSTERS: return (work < resident ? work : resident) * g->value;
    default: return g->value;
  }
}

/* Encode one tensor map over the call's memory: its kind's rank of sizes and rank - 1 strides (bytes), through
 * cuTensorMapEncodeTiled (tiled kinds) or cuTensorMapEncodeIm2col. TMA needs a 16-byte aligned base and strides. */
static inline tracea_status tracea__encode_map(const tracea_driver* d, const tracea_tensor_map* t, const tracea_call* c,
                                               CUtensorMap* map) {
  void* base = (void*)(uintptr_t)c->pointers[t->tensor];
  const cuuint32_t rank = t->kind == TRACEA_MAP_IM2COL ? 4u : t->kind == TRACEA_MAP_TILED3D ? 3u : 2u;
  cuuint64_t dims[4], strides[3];
  cuuint32_t box[4], element_strides[4];
  CUresult r;
  cuuint32_t i;
  if (t->kind != TRACEA_MAP_TILED && t->kind != TRACEA_MAP_TILED3D && t->kind != TRACEA_MAP_IM2COL) {
    return TRACEA_ERROR_INVALID_ARGUMENT; /* tables written by another tracea version */
  }
  for (i = 0; i < rank; ++i) {
    dims[i] = (cuuint64_t)c->ints[t->dims[i]];
    box[i] = t->box[i];
    element_strides[i] = t->kind == TRACEA_MAP_IM2COL ? t->element_strides[i] : 1u;
  }
  strides[0] = (cuuint64_t)c->ints[t->row_stride] * t->elem_bytes;
  for (i = 1; i + 1 < rank; ++i) {
    strides[i] = (cuuint64_t)c->ints[t->outer_strides[i - 1]] * t->elem_bytes;
  }
  if ((uintptr_t)base % 16u != 0) {
    return TRACEA_ERROR_MISALIGNED;
  }
  for (i = 0; i + 1 < rank; ++i) {
    if (strides[i] % 16u != 0) {
      return TRACEA_ERROR_MISALIGNED;
    }
  }
  if (t->kind == TRACEA_MAP_IM2COL) {
    if (d->tensor_map_encode_im2col == NULL) {
      return TRACEA_ERROR_DRIVER_TOO_OLD;
    }
    r = d->tensor_map_encode_im2col(map, (CUtensorMapDataType)t->data_type, rank, base, dims, strides, t->lower,
                                    t->upper, t->channels_per_pixel, t->pixels_per_column, element_strides,
                                    (CUtensorMapInterleave)t->interleave, (CUtensorMapSwizzle)t->swizzle,
                                    (CUtensorMapL2promotion)t->l2_promotion, (CUtensorMapFloatOOBfill)t->oob_fill);
    return r == CUDA_SUCCESS ? TRACEA_OK : tracea__fail(r, "cuTensorMapEncodeIm2col");
  }
  if (d->tensor_map_encode_tiled == NULL) {
    return TRACEA_ERROR_DRIVER_TOO_OLD;
  }
  r = d->tensor_map_encode_tiled(map, (CUtensorMapDataType)t->data_type, rank, base, dims, strides, box,
                                 element_strides, (CUtensorMapInterleave)t->interleave, (CUtensorMapSwizzle)t->swizzle,
                                 (CUtensorMapL2promotion)t->l2_promotion, (CUtensorMapFloatOOBfill)t->oob_fill);
  return r == CUDA_SUCCESS ? TRACEA_OK : tracea__fail(r, "cuTensorMapEncodeTiled");
}

static inline tracea_status tracea__run_steps(const tracea_driver* d, const tracea_variant* v, const tracea_abi* abi,
                                              const CUfunction* fns, const unsigned int* resident, tracea_call* c,
                                              CUstream stream) {
  size_t offsets[TRACEA_MAX_SCRATCH], lds[TRACEA_MAX_SCRATCH];
  CUtensorMap maps[TRACEA_MAX_TENSOR_MAPS];
  void* params[TRACEA_MAX_PARAMS];
  int i;
  if (v->n_maps > TRACEA_MAX_TENSOR_MAPS || v->n_params > TRACEA_MAX_PARAMS || v->n_scratch > TRACEA_MAX_SCRATCH) {
    return TRACEA_ERROR_INVALID_ARGUMENT; /* tables written by another tracea version */
  }
  /* The staged copies in the workspace (tracea__run checked its size). */
  tracea__scratch_layout(v, abi, c->ints, offsets, lds);
  for (i = 0; i < v->n_scratch; ++i) {
    if (lds[i] > 2147483647u) {
      return TRACEA_ERROR_UNSUPPORTED_SHAPE;
    }
    c->pointers[v->scratch[i].buffer] = c->pointers[abi->workspace] + offsets[i];
    c->ints[v->scratch[i].ld] = (int)lds[i];
  }
  /* Tensor maps are encoded at every launch: a host-only call, cheap next to a kernel, and always over this call's
   * pointers and sizes. */
  for (i = 0; i < v->n_maps; ++i) {
    tracea_status status = tracea__encode_map(d, &v->maps[i], c, &maps[i]);
    if (status != TRACEA_OK) {
      return status;
    }
  }
  for (i = 0; i < v->n_steps; ++i) {
    const tracea_step* s = &v->steps[i];
    /* The kernel's parameters in its signature's order (docs/kernel-abi.md): the step's own, else the variant's. */
    const int* list = s->params != NULL ? s->params : v->params;
    const int n_params = s->params != NULL ? s->n_params : v->n_params;
    CUresult r;
    int j;
    if (n_params > TRACEA_MAX_PARAMS) {
      return TRACEA_ERROR_INVALID_ARGUMENT;
    }
    if (s->when >= 0 && c->ints[s->when] == 0) {
      continue; /* a pre-pass this call does not need */
    }
    for (j = 0; j < n_params; ++j) {
      const int p = list[j];
      params[j] = p >= TRACEA_PARAM_MAP ? (void*)&maps[p - TRACEA_PARAM_MAP]
                  : p >= TRACEA_PARAM_INT ? (void*)&c->ints[p - TRACEA_PARAM_INT]
                                          : (void*)&c->pointers[p];
    }
    if (s->kind == TRACEA_STEP_MEMSET) {
      r = d->memset_d8_async(c->pointers[abi->workspace], 0,
                             (size_t)s->memset_bytes_per_mn * (size_t)c->ints[abi->grid_sizes[0]] *
                                 (size_t)c->ints[abi->grid_sizes[1]], stream);
      if (r != CUDA_SUCCESS) {
        return tracea__fail(r, "cuMemsetD8Async");
      }
      continue;
    }
    {
      const unsigned int held = resident[s->kernel];
      unsigned long long gx = tracea__grid(&s->grid[0], v, abi, c->ints, held);
      unsigned long long gy = tracea__grid(&s->grid[1], v, abi, c->ints, held);
      unsigned long long gz = tracea__grid(&s->grid[2], v, abi, c->ints, held);
      if (gx == 0 || gy == 0 || gz == 0 || gx > 2147483647ull || gy > 65535ull || gz > 65535ull) {
        return TRACEA_ERROR_UNSUPPORTED_SHAPE;
      }
      if (s->cluster[0] != 0) {
        CUlaunchConfig config;
        CUlaunchAttribute attribute;
        if (d->launch_kernel_ex == NULL) {
          return TRACEA_ERROR_DRIVER_TOO_OLD;
        }
        tracea__launch_config(s, (unsigned int)gx, (unsigned int)gy, (unsigned int)gz, stream, &config, &attribute);
        r = d->launch_kernel_ex(&config, fns[s->kernel], params, NULL);
        if (r != CUDA_SUCCESS) {
          return tracea__fail(r, "cuLaunchKernelEx");
        }
      } else {
        r = d->launch_kernel(fns[s->kernel], (unsigned int)gx, (unsigned int)gy, (unsigned int)gz, s->block[0],
                             s->block[1], s->block[2], s->dynamic_smem_bytes, stream, params, NULL);
        if (r != CUDA_SUCCESS) {
          return tracea__fail(r, "cuLaunchKernel");
        }
      }
    }
  }
  return TRACEA_OK;
}

/* Run a call whose values the op's header filled and checked: the device is the stream's, the binaries load on first
 * use, the variant is the exact or nearest tuned shape that serves the call. */
static inline tracea_status tracea__run(const tracea_export* e, tracea_call* c, CUstream stream) {
  const tracea_driver* d;
  tracea_device_state* st;
  const tracea_image_set* set;
  const tracea_variant* v;
  CUdevice device;
  CUcontext popped;
  CUresult r;
  size_t workspace;
  int index;
  tracea_status status;
  if ((status = tracea_driver_get(&d)) != TRACEA_OK || (status = tracea__stream_device(d, stream, &device)) != TRACEA_OK ||
      (status = tracea__ensure_loaded(e, d, device, &st)) != TRACEA_OK) {
    return status;
  }
  set = &e->sets[st->set];
  if ((status = tracea__select(set, e->abi, c, e->elem_bytes, &index)) != TRACEA_OK) {
    return status;
  }
  v = &set->variants[index];
  workspace = tracea__scratch_layout(v, e->abi, c->ints, NULL, NULL);
  if (workspace > 0 && (c->pointers[e->abi->workspace] == 0 || c->workspace_bytes < workspace)) {
    return TRACEA_ERROR_WORKSPACE;
  }
  if ((r = d->ctx_push_current(st->ctx)) != CUDA_SUCCESS) {
    return tracea__fail(r, "cuCtxPushCurrent");
  }
  {
    const size_t slot = ((size_t)device * e->max_variants + index) * TRACEA_MAX_KERNELS;
    status = tracea__run_steps(d, v, e->abi, &e->functions[slot], &e->resident[slot], c, stream);
  }
  d->ctx_pop_current(&popped);
  return status;
}

/* An upper bound over every variant: enough for whichever the call picks on whichever device. `mn_only` leaves out
 * the staged copies (the M x N part only, what exports without staging need). */
static inline size_t tracea__workspace_bytes(const tracea_export* e, const int* ints, int mn_only) {
  size_t most = 0;
  int i, j;
  for (i = 0; i < e->n_sets; ++i) {
    for (j = 0; j < e->sets[i].n_variants; ++j) {
      const tracea_variant* v = &e->sets[i].variants[j];
      size_t bytes = mn_only ? (size_t)v->workspace_bytes_per_mn * (size_t)ints[e->abi->grid_sizes[0]] *
                                   (size_t)ints[e->abi->grid_sizes[1]]
                             : tracea__scratch_layout(v, e->abi, ints, NULL, NULL);
      most = bytes > most ? bytes : most;
    }
  }
  return most;
}

static inline void tracea__unload(const tracea_export* e) {
  const tracea_driver* d;
  int i;
  if (tracea_driver_get(&d) != TRACEA_OK) {
    return;
  }
  pthread_mutex_lock(e->mutex);
  for (i = 0; i < TRACEA_MAX_DEVICES; ++i) {
    if (e->devices[i].tried) {
      tracea__unload_device(e, d, i);
    }
  }
  pthread_mutex_unlock(e->mutex);
}

#ifdef __cplusplus
} /* extern "C" */

#include <cstdint>
#include <cstring>
#include <initializer_list>

namespace tracea {

// Element types, by their short names and by the seed's (Float32, Float16, ...): the same values.
enum class DType : int {
  fp32 = TRACEA_DTYPE_FP32,
  tf32 = TRACEA_DTYPE_TF32,  // fp32 storage, TF32 tensor-core math
  fp16 = TRACEA_DTYPE_FP16,
  bf16 = TRACEA_DTYPE_BF16,
  fp64 = TRACEA_DTYPE_FP64,
  Float32 = fp32,
  TFloat32 = tf32,
  Float16 = fp16,
  BFloat16 = bf16,
  Float64 = fp64,
};

// A call's outcome: Status::ok or the reason (the codes of tracea_status). Testable as a bool: true when ok, so that
// `if (!status)` catches every failure.
class Status {
 public:
  enum Code : int {
    ok = TRACEA_OK,
    driver_not_found = TRACEA_ERROR_DRIVER_NOT_FOUND,
    driver_too_old = TRACEA_ERROR_DRIVER_TOO_OLD,
    driver_error = TRACEA_ERROR_DRIVER,
    no_device = TRACEA_ERROR_NO_DEVICE,
    unsupported_arch = TRACEA_ERROR_UNSUPPORTED_ARCH,
    device_limits = TRACEA_ERROR_DEVICE_LIMITS,
    invalid_argument = TRACEA_ERROR_INVALID_ARGUMENT,
    misaligned = TRACEA_ERROR_MISALIGNED,
    unsupported_shape = TRACEA_ERROR_UNSUPPORTED_SHAPE,
    workspace = TRACEA_ERROR_WORKSPACE,
    not_exported = TRACEA_ERROR_NOT_EXPORTED,
    unsupported_layout = TRACEA_ERROR_UNSUPPORTED_LAYOUT,
  };
  constexpr Status(Code code = ok) : code_(code) {}
  constexpr explicit Status(int code) : code_(static_cast<Code>(code)) {}
  constexpr Code code() const { return code_; }
  constexpr explicit operator bool() const { return code_ == ok; }
  constexpr explicit operator int() const { return code_; }
  friend constexpr bool operator==(Status a, Status b) { return a.code_ == b.code_; }
  friend constexpr bool operator!=(Status a, Status b) { return a.code_ != b.code_; }

 private:
  Code code_;
};

inline const char* status_string(Status s) { return tracea_status_string(static_cast<tracea_status>(s.code())); }

// A strided view of device memory, in elements. As a matrix: element (i, j) of a rows x cols matrix is at
// data + i * row_stride + j * col_stride. As an N-D tensor (ndim <= 8): dims in the framework's order (torch's N, C,
// H, W for images) and a stride per dim, so that the layout in memory is told by the strides (contiguous,
// channels_last, a transpose) without a copy. A 2-D view is both. `device` is the CUDA ordinal the memory is on, for
// the caller's bookkeeping: a call runs on its stream's device.
struct TensorView {
  static constexpr int kMaxDims = 8;
  void* data = nullptr;
  DType dtype = DType::fp32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_stride = 0;  // elements between rows
  int64_t col_stride = 1;  // elements between columns
  int ndim = 0;            // 0: no N-D shape (a matrix made by matrix()); else dims and strides below
  int64_t dims[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
  int device = 0;

  TensorView() = default;
  // The seed's form: `TensorView x(ptr, {N, C, H, W}, DType::Float16, 0)`, contiguous (row-major) strides.
  TensorView(void* data_, std::initializer_list<int64_t> dims_, DType dtype_, int device_ = 0)
      : TensorView(data_, dims_, {}, dtype_, device_) {}
  // The same with explicit strides in elements (one per dim; an empty list: contiguous).
  TensorView(void* data_, std::initializer_list<int64_t> dims_, std::initializer_list<int64_t> strides_, DType dtype_,
             int device_ = 0)
      : data(data_), dtype(dtype_), device(device_) {
    if (dims_.size() > static_cast<size_t>(kMaxDims) || (strides_.size() != 0 && strides_.size() != dims_.size())) {
      return;  // ndim stays 0: no call accepts the view
    }
    ndim = static_cast<int>(dims_.size());
    int i = 0;
    for (int64_t d : dims_) dims[i++] = d;
    i = 0;
    for (int64_t st : strides_) strides[i++] = st;
    if (strides_.size() == 0) {
      int64_t step = 1;
      for (int k = ndim - 1; k >= 0; --k) {
        strides[k] = step;
        step *= dims[k];
      }
    }
    if (ndim == 2) {
      rows = dims[0], cols = dims[1], row_stride = strides[0], col_stride = strides[1];
    } else if (ndim == 1) {  // a vector (a bias): one row of n
      rows = 1, cols = dims[0], row_stride = dims[0], col_stride = strides[0];
    }
  }

  // An N x C x H x W view of memory laid out N x H x W x C (torch's memory_format=torch.channels_last).
  static TensorView channels_last(void* data, std::initializer_list<int64_t> nchw, DType dtype, int device = 0) {
    TensorView v(data, nchw, dtype, device);
    if (v.ndim == 4) {
      const int64_t c = v.dims[1], h = v.dims[2], w = v.dims[3];
      v.strides[0] = h * w * c, v.strides[1] = 1, v.strides[2] = w * c, v.strides[3] = c;
    }
    return v;
  }
  // A row-major rows x cols matrix with leading dimension `ld` (default: cols).
  static TensorView matrix(void* data, DType dtype, int64_t rows, int64_t cols, int64_t ld = 0) {
    TensorView v;
    v.data = data;
    v.dtype = dtype;
    v.rows = rows;
    v.cols = cols;
    v.row_stride = ld > 0 ? ld : cols;
    v.col_stride = 1;
    v.ndim = 2;
    v.dims[0] = rows, v.dims[1] = cols, v.strides[0] = v.row_stride, v.strides[1] = 1;
    return v;
  }
  // The transpose of a matrix, without copying.
  TensorView t() const {
    TensorView v = *this;
    v.rows = cols;
    v.cols = rows;
    v.row_stride = col_stride;
    v.col_stride = row_stride;
    v.dims[0] = dims[1], v.dims[1] = dims[0], v.strides[0] = strides[1], v.strides[1] = strides[0];
    return v;
  }
  // Whether the N-D view is exactly these dims with these strides.
  bool is(std::initializer_list<int64_t> dims_, std::initializer_list<int64_t> strides_) const {
    if (ndim != static_cast<int>(dims_.size()) || dims_.size() != strides_.size()) return false;
    int i = 0;
    for (int64_t d : dims_) {
      if (dims[i++] != d) return false;
    }
    i = 0;
    for (int64_t st : strides_) {
      if (dims[i] != 1 && strides[i] != st) return false;  // a dim of one element has any stride
      ++i;
    }
    return true;
  }
};

namespace detail {
/* Exports included in the program register themselves here (static initialisation), for the ops' C++ calls
 * (tracea::gemm, ...) to find the one for their op, dtype and fields. */
struct Registry {
  const tracea_export* exports[64];
  int count;
};
inline Registry& registry() {
  static Registry r = {};
  return r;
}
inline bool same(const tracea_export* a, const char* op, tracea_dtype dtype, const int* fields, int n_fields) {
  if (std::strcmp(a->abi->op, op) != 0 || a->dtype != dtype || a->n_fields != n_fields) {
    return false;
  }
  for (int i = 0; i < n_fields; ++i) {
    if (a->fields[i] != fields[i]) {
      return false;
    }
  }
  return true;
}
struct Registration {
  explicit Registration(const tracea_export* e) {
    Registry& r = registry();
    for (int i = 0; i < r.count; ++i) {
      if (same(r.exports[i], e->abi->op, e->dtype, e->fields, e->n_fields)) {
        return; /* the same export included from another translation unit */
      }
    }
    if (r.count < 64) {
      r.exports[r.count++] = e;
    }
  }
};
inline const tracea_export* find_export(const char* op, tracea_dtype dtype, const int* fields, int n_fields) {
  const Registry& r = registry();
  for (int i = 0; i < r.count; ++i) {
    if (same(r.exports[i], op, dtype, fields, n_fields)) {
      return r.exports[i];
    }
  }
  return nullptr;
}
inline bool fits_int(int64_t v) { return v > 0 && v <= 2147483647; }
}  // namespace detail
}  // namespace tracea
#endif

#endif /* TRACEA_RUNTIME_H_V2 */
