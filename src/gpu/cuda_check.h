// CUDA runtime error checking for host code: every failure becomes cclx::Error(cclxCudaError).
#pragma once

#include <cuda_runtime.h>

#include "core/error.h"

#define CCLX_CUDA_CHECK(call)                                                              \
  do {                                                                                     \
    cudaError_t cclx_e_ = (call);                                                          \
    if (cclx_e_ != cudaSuccess)                                                            \
      CCLX_THROW(cclxCudaError, "%s failed: %s (%s) at %s:%d", #call,                      \
                 cudaGetErrorName(cclx_e_), cudaGetErrorString(cclx_e_), __FILE__, __LINE__); \
  } while (0)
