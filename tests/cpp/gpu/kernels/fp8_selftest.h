// Device-side checks of the FP8 codec for tests/cpp/gpu/test_gpu_fp8.cc (CUDA builds only): they run
// the exact device code paths of the collectives (fp8_device.cuh) on the current device.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/elements/fp8_codec.h"

namespace cclx {
namespace fp8 {

/// For every non-NaN float bit pattern x: the device conversion of the collectives (hardware
/// cvt.rn.satfinite.e4m3x2.f32, fp8dev::cvtPair) versus the software f32ToE4m3 compiled for the
/// device. Returns the number of mismatches; *first gets
/// the first mismatching pattern (0xffffffff if none). Throws cclx::Error on CUDA failures.
uint64_t deviceCvtMismatches(uint32_t* first);

/// The collectives' hardware 16-bit conversions against the software ones (dtype_math.h): every
/// float -> bf16 (counts[0]) and -> f16 (counts[1]), where a NaN must give a NaN and every other
/// input the same bits, and every f16 -> float (counts[2]). firsts[i] gets the first bad input
/// pattern (0xffffffff if none). Returns the total. Throws cclx::Error on CUDA failures.
uint64_t deviceCvt16Mismatches(uint64_t counts[3], uint32_t firsts[3]);

/// Hardware cvt of each input (host in, host out), to compare with the host's f32ToE4m3.
void deviceCvt(const float* in, size_t n, uint8_t* out);

/// Quantizes nb full blocks of B values with the collectives' device quantizer, then decodes
/// them with the device dequantizer. Host arrays: in[nb*B], codes[nb*B], metas[nb], out[nb*B].
void deviceRoundTrip(const float* in, size_t nb, int B, uint8_t* codes, Meta* metas, float* out);

/// Phase timing (tests/cpp/gpu/test_gpu_fp8.cc): microseconds per pass, averaged over `iters`
/// back-to-back launches timed with CUDA events on the current device, with the collectives'
/// grid (min(SMs, 128) CTAs of 512 threads, grid-stride, two units per thread per round).
/// Quantize: bf16 [count] -> codes + metas. Dequantize: codes + metas -> bf16 [count].
double timeQuantizePass(size_t count, int B, int iters);
double timeDequantizePass(size_t count, int B, int iters);

/// Devices 0 and 1 of this process (peer access enabled here): a kernel on each copies `bytes`
/// from its own memory into the other device's memory with 16-byte stores (both directions at
/// once when `bothWays`, else 0 -> 1 only), same grid as above. Returns microseconds per pass
/// (the slower device), or -1 when there are not two devices with peer access.
double timePeerWrite(size_t bytes, int iters, bool bothWays);

}  // namespace fp8
}  // namespace cclx
