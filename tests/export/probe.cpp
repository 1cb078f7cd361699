// Calls an export through tracea.hpp (tracea::TensorView from tracea_runtime.h, tracea::gemm from the op's header
// tracea_gemm.h) the way a program would, for tests with the fake driver (fake_libcuda.c).
//   probe M N K [misalign] [no-workspace] [nt] [threads=T] [load=DEVICE] [stream]
// Prints "status=<code> <text>" per call on stdout (with " call=<driver call>" for driver errors); the fake driver
// logs the driver calls on stderr ("cu: ..."), and the probe its buffers there ("probe: a=... b=... c=... workspace=...").
#include EXPORT_HEADER
#include "tracea.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  const int m = std::atoi(argv[1]), n = std::atoi(argv[2]), k = std::atoi(argv[3]);
  bool misalign = false, workspace = true, nt = false, stream_given = false;
  int threads = 1, load = -1;
  for (int i = 4; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "misalign") misalign = true;
    else if (a == "no-workspace") workspace = false;
    else if (a == "nt") nt = true;
    else if (a == "stream") stream_given = true;
    else if (a.rfind("threads=", 0) == 0) threads = std::atoi(a.c_str() + 8);
    else if (a.rfind("load=", 0) == 0) load = std::atoi(a.c_str() + 5);
  }
  const tracea_driver* cu = nullptr;
  tracea_status s = tracea_driver_get(&cu);
  if (s != TRACEA_OK) {
    std::printf("status=%d %s\n", int(s), tracea_status_string(s));
    return 0;
  }
  if (load >= 0) {
    s = PROBE_LOAD(load);
    std::printf("status=%d %s\n", int(s), tracea_status_string(s));
    return 0;
  }
  const size_t elem = PROBE_ELEM_BYTES, big = (size_t(m) * k + size_t(k) * n + size_t(m) * n + 64) * elem;
  CUdeviceptr a = 0, b = 0, c = 0, bias = 0, residual = 0, ws = 0;
  cu->mem_alloc(&a, big);
  cu->mem_alloc(&b, big);
  cu->mem_alloc(&c, big);
  cu->mem_alloc(&bias, size_t(n) * elem + 64);
  cu->mem_alloc(&residual, size_t(m) * n * elem + 64);
  const tracea::DType dtype = static_cast<tracea::DType>(PROBE_DTYPE);
  const tracea::TensorView A = tracea::TensorView::matrix(reinterpret_cast<char*>(a) + (misalign ? elem : 0), dtype, m, k);
  const tracea::TensorView B = nt ? tracea::TensorView::matrix(reinterpret_cast<void*>(b), dtype, n, k).t()
                                  : tracea::TensorView::matrix(reinterpret_cast<void*>(b), dtype, k, n);
  const tracea::TensorView C = tracea::TensorView::matrix(reinterpret_cast<void*>(c), dtype, m, n);
  tracea::GemmParams params;
  params.epilogue = static_cast<tracea::Epilogue>(PROBE_EPILOGUE);
  params.bias = reinterpret_cast<void*>(bias);
  params.residual = reinterpret_cast<void*>(residual);
  CUstream stream = nullptr;
  if (stream_given) cu->stream_create(&stream, 0);
  params.stream = stream;
  params.workspace_bytes = tracea::gemm_workspace_bytes(A, B, C, params);
  std::printf("workspace_bytes=%zu\n", params.workspace_bytes);
  if (params.workspace_bytes && workspace) {
    cu->mem_alloc(&ws, params.workspace_bytes);
    params.workspace = reinterpret_cast<void*>(ws);
  }
  std::fprintf(stderr, "probe: a=%llu b=%llu c=%llu bias=%llu residual=%llu workspace=%llu\n",
               static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(A.data)),
               static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(B.data)),
               static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(C.data)),
               static_cast<unsigned long long>(bias), static_cast<unsigned long long>(residual),
               static_cast<unsigned long long>(ws));
  std::vector<tracea::Status> statuses(threads);
  std::vector<const char*> calls(threads, "");
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      statuses[t] = tracea::gemm(A, B, C, params);
      tracea_last_driver_error(&calls[t]);  // per thread: the call behind this thread's driver error
    });
  }
  for (auto& th : pool) th.join();
  for (int t = 0; t < threads; ++t) {
    if (statuses[t] == tracea::Status::driver_error) {
      std::printf("status=%d %s call=%s\n", int(statuses[t]), tracea::status_string(statuses[t]), calls[t]);
    } else {
      std::printf("status=%d %s\n", int(statuses[t]), tracea::status_string(statuses[t]));
    }
  }
  PROBE_UNLOAD();
  return 0;
}
