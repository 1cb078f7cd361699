// tracea.hpp: C++ interface to the Tracea exports included before or after it (tracea @VERSION@). Generated.
//
//   #include "tracea_gemm_fp16_nn.h"   // one or more exports (any ops)
//   #include "tracea.hpp"
//   tracea::TensorView a = tracea::TensorView::matrix(d_a, tracea::DType::fp16, M, K);
//   tracea::TensorView b = tracea::TensorView::matrix(d_b, tracea::DType::fp16, K, N);      // layout nn
//   //                   = tracea::TensorView::matrix(d_w, tracea::DType::fp16, N, K).t(); // layout nt
//   tracea::TensorView c = tracea::TensorView::matrix(d_c, tracea::DType::fp16, M, N);
//   tracea::GemmParams params;
//   params.stream = stream;
//   tracea::Status s = tracea::gemm(a, b, c, params);   // C = A.B on `stream`; `if (!s)`: it failed
//
// The seed's style works too: `tracea::TensorView a(d_a, {M, K}, tracea::DType::Float16, 0);` (dims as the framework
// reports them, contiguous strides; another overload takes the strides), and for images
// `tracea::TensorView::channels_last(d_x, {N, C, H, W}, tracea::DType::Float16, 0)`.
//
// tracea::DType, tracea::Status and tracea::TensorView are in @RUNTIME@ (its C++ part); each op's header
// (tracea_<op>.h, included by its exports) adds the op's call (tracea::gemm, ...). Views describe device memory in
// elements: a (rows x cols) matrix whose element (i, j) is at data + i * row_stride + j * col_stride.
#ifndef TRACEA_HPP_V2
#define TRACEA_HPP_V2

#include "@RUNTIME@"

#endif  // TRACEA_HPP_V2
