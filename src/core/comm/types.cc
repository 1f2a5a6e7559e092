// Names and sizes of data types and reduction operators.
#include <cclx/cclx.hpp>

#include "core/comm/backend.h"
#include "base/error.h"

namespace cclx {

namespace {
struct DtypeEntry {
  DataType t;
  const char* name;
  size_t size;
};
constexpr DtypeEntry kDtypes[] = {
    {DataType::f32, "f32", 4},       {DataType::f64, "f64", 8},
    {DataType::f16, "f16", 2},       {DataType::bf16, "bf16", 2},
    {DataType::i8, "i8", 1},         {DataType::u8, "u8", 1},
    {DataType::i32, "i32", 4},       {DataType::i64, "i64", 8},
    {DataType::u32, "u32", 4},       {DataType::u64, "u64", 8},
    {DataType::fp8_e4m3, "fp8_e4m3", 1}, {DataType::fp8_e5m2, "fp8_e5m2", 1},
};
constexpr const char* kOpNames[] = {"sum", "prod", "min", "max", "avg",
                                    "band", "bor", "bxor", "premul_sum"};

bool validDtype(DataType t) { return int(t) >= 0 && int(t) < cclxNumTypes; }
bool validOp(RedOpKind op) { return int(op) >= 0 && int(op) < cclxNumOps; }
}  // namespace

size_t dtypeSize(DataType t) {
  if (!validDtype(t)) CCLX_THROW(cclxInvalidArgument, "unknown data type %d", int(t));
  return kDtypes[int(t)].size;
}

const char* dtypeName(DataType t) {
  if (!validDtype(t)) return "unknown";
  return kDtypes[int(t)].name;
}

DataType dtypeFromName(const std::string& name) {
  for (const auto& e : kDtypes)
    if (name == e.name) return e.t;
  // Common aliases (torch / numpy spellings).
  static const std::pair<const char*, DataType> aliases[] = {
      {"float", DataType::f32},       {"float32", DataType::f32},   {"double", DataType::f64},
      {"float64", DataType::f64},     {"half", DataType::f16},      {"float16", DataType::f16},
      {"bfloat16", DataType::bf16},   {"int8", DataType::i8},       {"uint8", DataType::u8},
      {"int32", DataType::i32},       {"int", DataType::i32},       {"int64", DataType::i64},
      {"uint32", DataType::u32},      {"uint64", DataType::u64},
      {"float8_e4m3fn", DataType::fp8_e4m3}, {"e4m3", DataType::fp8_e4m3},
      {"float8_e5m2", DataType::fp8_e5m2},   {"e5m2", DataType::fp8_e5m2},
  };
  for (const auto& [a, t] : aliases)
    if (name == a) return t;
  CCLX_THROW(cclxInvalidArgument, "unknown data type name '%s'", name.c_str());
}

const char* opName(RedOpKind op) {
  if (!validOp(op)) return "unknown";
  return kOpNames[int(op)];
}

RedOpKind opFromName(const std::string& name) {
  std::string n;
  for (char c : name) n += char(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  for (int i = 0; i < cclxNumOps; ++i)
    if (n == kOpNames[i]) return RedOpKind(i);
  if (n == "product") return RedOpKind::PRODUCT;
  if (n == "premulsum") return RedOpKind::PREMUL_SUM;
  CCLX_THROW(cclxInvalidArgument, "unknown reduction op name '%s'", name.c_str());
}

bool opSupported(RedOpKind op, DataType t) {
  if (!validOp(op) || !validDtype(t)) return false;
  if (t == DataType::fp8_e4m3 || t == DataType::fp8_e5m2) return false;
  bool isFloat = t == DataType::f32 || t == DataType::f64 || t == DataType::f16 ||
                 t == DataType::bf16;
  switch (op) {
    case RedOpKind::BAND:
    case RedOpKind::BOR:
    case RedOpKind::BXOR:
      return !isFloat;
    default:
      return true;
  }
}

CollArgs rmsUnfusedAllReduce(const CollArgs& a, void* recv) {
  CollArgs ar;
  ar.type = CollType::AllReduce;
  ar.send = a.rms.x;
  ar.recv = recv;
  ar.count = a.count;
  ar.dtype = a.dtype;
  ar.op = RedOpKind::SUM;
  ar.opts = a.opts;
  ar.opts.hints["low_precision"] = "off";
  return ar;
}

// Work handles that are complete on creation (host collectives finish before returning).

namespace {
class CompletedWork final : public Work {
 public:
  bool isCompleted() override { return true; }
  void wait(void*) override {}
  void waitBlocking(std::chrono::milliseconds) override {}
};
}  // namespace

std::shared_ptr<Work> completedWork() {
  static const std::shared_ptr<Work> w = std::make_shared<CompletedWork>();
  return w;
}

}  // namespace cclx
