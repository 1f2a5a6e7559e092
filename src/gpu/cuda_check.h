// Runtime error checking for host code (CCLX_CUDA_CHECK): part of the runtime portability header.
#pragma once

#include "gpu/runtime.h"
