// The algorithm catalogue (algorithms.def) as data: the Algo ids, one row per algorithm (its one
// name, the hint that names it and that hint's older values, the collectives it serves, flags,
// the size range auto may pick it for), the capabilities of a call (Caps: one bit per row) and the
// hint values the rows make. Both backends make their objects from the same rows (algo_set.h)
// and select() (select.h) returns one of these ids. Plain C++, no backend types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/comm/collectives.h"

namespace cclx {

struct Config;

/// An algorithm: the enumerators are the ids of algorithms.def's rows, in its order.
enum class Algo : uint8_t {
#define CCLX_ALGO(id, ...) id,
#define CCLX_SERVES(...)
#include "core/select/algorithms.def"
#undef CCLX_ALGO
#undef CCLX_SERVES
};
inline constexpr int kNumAlgos = 0
#define CCLX_ALGO(...) +1
#define CCLX_SERVES(...)
#include "core/select/algorithms.def"
#undef CCLX_ALGO
#undef CCLX_SERVES
    ;
static_assert(kNumAlgos <= 32, "Caps holds one bit per algorithm");

/// What a row is (AlgoRow::flags).
enum AlgoFlag : uint32_t {
  kNoKernel = 1u << 0,      // runs without an object of its own (NCCL, the unfused sequence):
                            // always runnable as far as Caps go
  kStaging = 1u << 1,       // uses peer staging, allocated on every rank by the first call
                            // that runs it (collective; a failed allocation turns it off)
  kLowPrecision = 1u << 2,  // FP8: a candidate only when the call wants low precision
  kDataAsFlag = 1u << 3,    // reads the data as its own flag: auto picks it only where that is
                            // known to be safe (Caps::dataAsFlag; docs/design/amd.md)
};

/// The size range auto may pick an algorithm for (GPU comms, bytes per rank of the call's
/// message unless the row says otherwise).
struct AlgoRange {
  size_t Config::*field = nullptr;  // the setting's Config field (0 = the built-in table)
  const char* setting = nullptr;    // its name
  size_t (*table)(int n) = nullptr;  // built-in bytes for n ranks (0 = never)
  const char* words = nullptr;      // the range in words, where there is no setting
  int sameAs = -1;                  // >= 0: the range of that row (an Algo)
};

/// One algorithm (algorithms.def has the contract of each field).
struct AlgoRow {
  Algo id;
  const char* name;
  const char* hint;
  const char* aliases;
  uint32_t flags;
  AlgoRange range;
  const char* doc;
};

/// One object per backend for a set of collectives of one algorithm: the factories' names.
struct AlgoServes {
  Algo id;
  CollSet colls;
  const char* device;  // "noDevice": none
  const char* host;    // "noHost": none
};

/// Every row, in Algo order.
std::span<const AlgoRow> algorithms();
/// Every CCLX_SERVES line, in file order.
std::span<const AlgoServes> servings();
const AlgoRow& row(Algo a);
/// row(a).name.
const char* algoName(Algo a);
/// The collectives `a` serves (the union of its CCLX_SERVES lines).
CollSet collsOf(Algo a);
inline bool serves(Algo a, CollType t) { return (collsOf(a) & collBit(t)) != 0; }
/// The collective whose object runs `a` for `t`: ReduceScatter for Fp8 on
/// ReduceScatterQuantized (the lowered call, select.h: lowerFor), else `t`.
CollType runsAs(CollType t, Algo a);

/// Largest message auto runs `a` for with `n` ranks (its range's setting, else its table);
/// 0 = never; SIZE_MAX for a row whose range has no setting.
size_t autoMaxBytes(Algo a, const Config& cfg, int n);

/// What a value of hint `key` ("algo", "fp8_algo", "fused_algo") asks for on collective `t`.
struct HintChoice {
  enum Kind : uint8_t {
    Auto,       // "auto", or a row that does not serve `t` (`named` is then true)
    AnyKernel,  // "dda" (hint "algo" only): the direct-access kernels at any size
    Row,        // `algo`: the row of that name serving `t`, else one with that alias
  } kind = Auto;
  Algo algo = Algo::Base;
  bool named = false;  // the value names a row (whether or not it serves `t`)
};
/// Resolves `value`; throws cclxInvalidArgument, naming the valid values, for anything else.
HintChoice resolveHint(const char* key, const std::string& value, CollType t);
/// The values hint `key` takes: its policies ("auto", and "dda" for "algo"), the names of the
/// rows it names, then their aliases, '|' between (the table of settings reads it).
const char* catalogueHintValues(const char* key);

/// docs/ALGORITHMS.md, generated from the catalogue (algorithms_doc.cc).
std::string algorithmsMarkdown();

/// What can run one call: facts of the comm, then one bit per catalogue row: "this algorithm
/// accepts these arguments now" (the backend's object of the row accepts the call and, on GPUs,
/// its staging did not fail to allocate). select() returns only an algorithm that can run.
struct Caps {
  int worldSize = 1;
  bool host = false;       // CPU comm: shm algorithms, no NCCL ("nccl" falls to the size rule)
  bool nccl = false;       // NCCL carries what no peer algorithm takes
  bool plainNccl = false;  // backend "nccl": peer kernels only for what NCCL cannot do (bitwise)
  bool timed = true;       // the size tables apply (false when ranks share a GPU: every size
                           // runs on the peer-memory algorithms)
  bool peer = false;       // the full-precision peer algorithms take this dtype and op
  bool dataAsFlag = true;  // auto may pick the kDataAsFlag rows; false on HIP builds, where
                           // that relies on a link property AMD does not document (forced
                           // choices still run them)
  uint32_t runs = 0;       // bit a: algorithm a accepts the call (allow)

  /// True when `a` can run the call (kNoKernel rows: always).
  bool can(Algo a) const;
  /// Sets whether `a` accepts the call (kNoKernel rows: ignored).
  void allow(Algo a, bool on);
};

}  // namespace cclx
