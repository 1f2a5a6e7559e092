// Every kernel launch path refuses an element type its kernel does not implement: launch() called
// directly (past canRun, which would refuse it) with such a dtype throws cclxInternalError naming
// the dtype and the kernel, launches nothing, and leaves no CUDA error behind. Before, the
// Lamport, fused and FP8 launches ran any other dtype as bf16 / f16.
#include <gtest/gtest.h>

#if defined(CCLX_HAVE_CUDA)
#include <cuda_runtime.h>

#include <functional>
#include <string>
#include <vector>

#include "base/error.h"
#include "gpu/algo.h"
#include "gpu/dda/dda.h"
#include "gpu/fp8/fp8.h"
#include "gpu/fused/fused.h"

using namespace cclx;

namespace {

bool haveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

struct Case {
  const char* kernel;  // a word of the kernel's name in the message
  CollType type;
  DataType dtype;      // one the kernel does not implement
  std::function<void(const CollArgs&, DeviceCtx&, void*)> launch;
};

std::function<void(const CollArgs&, DeviceCtx&, void*)> algo(std::unique_ptr<DeviceAlgo> (*make)()) {
  std::shared_ptr<DeviceAlgo> a = make();
  return [a](const CollArgs& args, DeviceCtx& ctx, void* s) { a->launch(args, ctx, s); };
}

}  // namespace

TEST(GpuDtypeGuard, LaunchWithAnUnimplementedDtypeIsAnInternalError) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  void *send = nullptr, *recv = nullptr;
  ASSERT_EQ(cudaMalloc(&send, 1 << 16), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&recv, 1 << 16), cudaSuccess);
  const std::vector<Case> cases = {
      {"flat", CollType::AllReduce, DataType::fp8_e4m3, algo(makeDdaFlat)},
      {"tree", CollType::AllReduce, DataType::fp8_e5m2, algo(makeDdaTree)},
      {"Lamport", CollType::AllReduce, DataType::i32, algo(makeDdaLamport)},  // was: run as bf16
      {"LL exchange", CollType::ReduceScatter, DataType::fp8_e4m3, algo(makeDdaLL)},
      {"pipelined", CollType::ReduceScatter, DataType::fp8_e4m3, algo(makeDdaPipelined)},
      {"one-shot allreduce + RMSNorm", CollType::AllReduceRmsNorm, DataType::f64, algo(makeFusedOneShot)},
      {"two-shot allreduce + RMSNorm", CollType::AllReduceRmsNorm, DataType::i8, algo(makeFusedTwoShot)},
      {"RMSNorm epilogue", CollType::AllReduceRmsNorm, DataType::f64,
       [&](const CollArgs& a, DeviceCtx& ctx, void* st) { launchRmsLocal(a, recv, ctx, st); }},
      {"fp8 allreduce", CollType::AllReduce, DataType::f64, algo(makeFp8AllReduce)},  // was: f16
      {"fp8 one-shot", CollType::AllReduce, DataType::u8, algo(makeFp8OneShotAllReduce)},
      {"fp8 AllGather", CollType::AllGather, DataType::i64, algo(makeFp8AllGather)},
      {"fp8 ReduceScatter", CollType::ReduceScatter, DataType::f64, algo(makeFp8ReduceScatter)},
      {"fp8 AllToAll", CollType::AllToAll, DataType::u32, algo(makeFp8AllToAll)},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.kernel);
    CollArgs a;
    a.type = k.type;
    a.dtype = k.dtype;
    a.count = 64;
    a.send = send;
    a.recv = recv;
    a.rms.tokens = 1;
    a.rms.hidden = 64;
    a.rms.x = send;
    a.rms.out = recv;
    DeviceCtx ctx;  // no peer memory: the dtype is refused before anything else is looked at
    ctx.rank = 0;
    ctx.size = 2;
    ctx.cfg.fp8BlockSize = 128;
    try {
      k.launch(a, ctx, s);
      ADD_FAILURE() << "no error for dtype " << dtypeName(k.dtype);
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(e.code(), cclxInternalError) << msg;
      EXPECT_NE(msg.find(dtypeName(k.dtype)), std::string::npos) << msg;
      EXPECT_NE(msg.find(k.kernel), std::string::npos) << msg;
    }
    EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
  }
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);  // nothing launched, nothing failed
  cudaFree(send);
  cudaFree(recv);
  cudaStreamDestroy(s);
}

#else
TEST(GpuDtypeGuard, LaunchWithAnUnimplementedDtypeIsAnInternalError) {
  GTEST_SKIP() << "built without CUDA";
}
#endif
