// Array arguments: DLPack dtype -> DataType, contiguity and device checks.
#include "bindings.h"

#include <cstdint>
#include <string>

namespace cclx::py {
namespace {

enum : int { kCPU = 1, kCUDA = 2, kCUDAHost = 3, kCUDAManaged = 13 };

std::string deviceStr(int type, int id) {
  switch (type) {
    case kCPU: return "cpu";
    case kCUDAHost: return "cpu (pinned)";
    case kCUDA: return "cuda:" + std::to_string(id);
    case kCUDAManaged: return "cuda:" + std::to_string(id) + " (managed)";
    default: return "DLPack device type " + std::to_string(type);
  }
}

std::string commDeviceStr(const Comm& c) {
  DeviceSpec d = c.device();
  if (d.type == DeviceSpec::CPU) return "cpu";
  return d.index >= 0 ? "cuda:" + std::to_string(d.index) : "cuda";
}

}  // namespace

DataType dtypeOf(const Array& a, int override, const char* what) {
  const nb::dlpack::dtype dt = a.dtype();
  const size_t bytes = (static_cast<size_t>(dt.bits) * dt.lanes + 7) / 8;
  if (override >= 0) {
    if (override >= cclxNumTypes) argError(std::string(what) + ": invalid dtype code");
    DataType t = static_cast<DataType>(override);
    if (bytes != dtypeSize(t)) {
      argError(std::string(what) + ": element size " + std::to_string(bytes) +
               " bytes does not match dtype " + dtypeName(t));
    }
    return t;
  }
  // DLPack type codes (numeric, so older nanobind headers without the float8 names work).
  enum : uint8_t { kInt = 0, kUInt = 1, kFloat = 2, kBfloat = 4, kF8e4m3fn = 10, kF8e5m2 = 12 };
  struct Known {
    uint8_t code, bits;
    DataType t;
  };
  static constexpr Known kKnown[] = {
      {kFloat, 32, DataType::f32},       {kFloat, 64, DataType::f64},
      {kFloat, 16, DataType::f16},       {kBfloat, 16, DataType::bf16},
      {kInt, 8, DataType::i8},           {kInt, 32, DataType::i32},
      {kInt, 64, DataType::i64},         {kUInt, 8, DataType::u8},
      {kUInt, 32, DataType::u32},        {kUInt, 64, DataType::u64},
      {kF8e4m3fn, 8, DataType::fp8_e4m3}, {kF8e5m2, 8, DataType::fp8_e5m2}};
  if (dt.lanes == 1) {
    for (const Known& k : kKnown)
      if (dt.code == k.code && dt.bits == k.bits) return k.t;
  }
  argError(std::string(what) + ": unsupported element type (DLPack code " +
           std::to_string(dt.code) + ", " + std::to_string(dt.bits) + " bits, " +
           std::to_string(dt.lanes) + " lanes)");
}

View viewOf(const Array& a, const char* what, DataType dtype, const Comm& comm) {
  const nb::dlpack::dtype dt = a.dtype();
  const size_t bytes = (static_cast<size_t>(dt.bits) * dt.lanes + 7) / 8;
  if (bytes != dtypeSize(dtype)) {
    argError(std::string(what) + ": element size " + std::to_string(bytes) +
             " bytes does not match dtype " + dtypeName(dtype) + " of the first tensor");
  }
  View v;
  v.numel = a.size();
  // C-contiguous: strides (in elements) are the running products of the trailing sizes; size-1
  // dimensions may carry any stride. Null strides mean compact row-major.
  if (a.stride_ptr() != nullptr && v.numel > 1) {
    int64_t expected = 1;
    for (size_t i = a.ndim(); i-- > 0;) {
      if (a.shape(i) != 1 && a.stride(i) != expected) {
        argError(std::string(what) + " must be contiguous (row-major); call .contiguous() or "
                                     "numpy.ascontiguousarray() first");
      }
      expected *= static_cast<int64_t>(a.shape(i));
    }
  }
  v.devType = a.device_type();
  v.devId = a.device_id();
  DeviceSpec d = comm.device();
  bool ok;
  if (d.type == DeviceSpec::CPU) {
    ok = v.devType == kCPU || v.devType == kCUDAHost;
  } else {
    ok = (v.devType == kCUDA || v.devType == kCUDAManaged) && (d.index < 0 || v.devId == d.index);
  }
  if (!ok) {
    argError(std::string(what) + " is on " + deviceStr(v.devType, v.devId) +
             " but the communicator is on " + commDeviceStr(comm));
  }
  v.ptr = const_cast<void*>(a.data());
  if (v.numel > 0 && v.ptr == nullptr) argError(std::string(what) + ": null data pointer");
  return v;
}

}  // namespace cclx::py
