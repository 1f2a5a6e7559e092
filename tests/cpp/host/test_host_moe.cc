// cclx::MoeBuffer through the C++ API on CPU comms (the CPU twin of the MoE kernels), 1..4
// processes: the route, rank-major receive slots and expert-major entries against a reference
// computed here, combine with identity experts against a double reference, cached mode, many
// calls on one buffer, ids out of range (NaN rows), bad configs refused before anything exists.
#include <gtest/gtest.h>

#include <cclx/moe.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "helpers/mp.h"

namespace {

constexpr int kB = 6, kH = 37, kK = 3, kL = 2;

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

struct Inputs {
  std::vector<float> x, w;
  std::vector<int64_t> ids;
  int T = 0;
};

// Rank r's tokens of call `call`: T = kB - (r % 2), ids in -1..E (out of range now and then).
Inputs inputsOf(int r, int size, int call) {
  Inputs in;
  const int E = kL * size;
  in.T = kB - (r % 2);
  for (int t = 0; t < in.T; ++t) {
    for (int h = 0; h < kH; ++h)
      in.x.push_back(float(int(mix(uint64_t(r * 7919 + call * 104729 + t * 131 + h)) % 200) - 100) /
                     8.f);
    for (int j = 0; j < kK; ++j) {
      const uint64_t m = mix(uint64_t(r * 31 + call * 17 + t * 5 + j + 1000));
      in.ids.push_back(m % 11 == 0 ? (m % 2 ? -1 : E) : int64_t(m % uint64_t(E)));
      in.w.push_back(0.25f + float(m % 4) * 0.25f);
    }
  }
  return in;
}

void roundTrip(cclx::MoeBuffer& buf, int r, int n, int call, bool cached = false) {
  const int E = kL * n;
  std::vector<Inputs> all;
  for (int s = 0; s < n; ++s) all.push_back(inputsOf(s, n, call));
  const Inputs& me = all[size_t(r)];
  if (cached) buf.dispatchCached(me.x.data());
  else buf.dispatch(me.x.data(), me.ids.data(), cclx::DataType::i64, me.w.data(), size_t(me.T));
  const cclx::MoeOutputs& o = buf.outputs();
  const char* base = static_cast<const char*>(buf.data());
  auto i32 = [&](size_t off, size_t i) { return reinterpret_cast<const int32_t*>(base + off)[i]; };
  // Expected slots and entries (expert-major, then source, then the source's token order).
  std::vector<std::vector<int>> entries(kL);
  for (int s = 0; s < n; ++s) {
    int p = 0;
    for (int t = 0; t < all[size_t(s)].T; ++t) {
      const int64_t* ti = &all[size_t(s)].ids[size_t(t) * kK];
      bool here = false;
      for (int j = 0; j < kK; ++j) here = here || (ti[j] >= 0 && ti[j] < E && ti[j] / kL == r);
      if (!here) continue;
      const float* row = reinterpret_cast<const float*>(base + o.recvX + size_t(s * kB + p) * o.recvXRowBytes);
      MP_CHECK(std::memcmp(row, &all[size_t(s)].x[size_t(t) * kH], kH * 4) == 0,
               "call %d: slot %d of rank %d is not token %d", call, p, s, t);
      for (int j = 0; j < kK; ++j) {
        bool first = ti[j] >= 0 && ti[j] < E;
        for (int i = 0; i < j; ++i) first = first && ti[i] != ti[j];
        if (first && ti[j] / kL == r) entries[size_t(ti[j] - r * kL)].push_back(s * kB + p);
      }
      ++p;
    }
    MP_CHECK(i32(o.recvCounts, size_t(s)) == p, "call %d: %d tokens from rank %d, want %d", call,
             i32(o.recvCounts, size_t(s)), s, p);
  }
  int at = 0;
  for (int l = 0; l < kL; ++l) {
    MP_CHECK(i32(o.expertOffsets, size_t(l)) == at, "call %d: offset of expert %d", call, l);
    for (int row : entries[size_t(l)]) {
      MP_CHECK(i32(o.entryRows, size_t(at)) == row, "call %d: entry %d", call, at);
      ++at;
    }
  }
  // Identity experts: expert_out row i = its entry's row; y_t = (sum of the weights) x_t.
  std::vector<float> eout(size_t(at) * kH);
  for (int i = 0; i < at; ++i)
    std::memcpy(&eout[size_t(i) * kH], base + o.recvX + size_t(i32(o.entryRows, size_t(i))) * o.recvXRowBytes,
                kH * 4);
  std::vector<float> y(size_t(me.T) * kH);
  buf.combine(eout.data(), size_t(at), y.data());
  for (int t = 0; t < me.T; ++t) {
    double ws = 0;
    bool bad = false;
    for (int j = 0; j < kK; ++j) {
      const int64_t id = me.ids[size_t(t) * kK + j];
      bad = bad || id < 0 || id >= E;
      ws += me.w[size_t(t) * kK + j];
    }
    for (int h = 0; h < kH; ++h) {
      const float v = y[size_t(t) * kH + h];
      if (bad) {
        MP_CHECK(std::isnan(v), "call %d: token %d with an id out of range is not NaN", call, t);
        continue;
      }
      const double want = ws * me.x[size_t(t) * kH + h];
      MP_CHECK(std::fabs(v - want) <= 1e-5 * (1 + std::fabs(want)), "call %d: y[%d][%d] %f want %f",
               call, t, h, double(v), want);
    }
  }
}

// ring 0: one round holds the batch; ring 4: combine in rounds of one token, four in the ring
// (kB = 6 tokens: the ring rows are reused)
TEST(HostMoe, RoundTripsAtEveryWorldSize) {
  for (int ring : {0, 4}) {
    for (int n : {1, 2, 3, 4}) {
      auto res = cclx::test::runRanks(n, [ring](int r, int n, std::shared_ptr<cclx::Store> store) {
        auto comm = cclx::test::makeCpuComm(r, n, store);
        cclx::MoeConfig cfg;
        cfg.ringTokens = ring;
        cfg.maxTokensPerRank = kB;
        cfg.hidden = kH;
        cfg.numExperts = kL * n;
        cfg.topK = kK;
        cfg.dtype = cclx::DataType::f32;
        std::string why;
        MP_CHECK(cclx::MoeBuffer::route(*comm, cfg, &why) == cclx::MoeRoute::Host, "route: %s",
                 why.c_str());
        auto buf = cclx::MoeBuffer::create(comm, cfg);
        MP_CHECK(buf->engineRoute() == cclx::MoeRoute::Host && buf->bytes() > 0, "engine");
        for (int call = 0; call < 4; ++call) roundTrip(*buf, r, n, call);
        roundTrip(*buf, r, n, 3, /*cached=*/true);  // the last routing again
        buf->destroy();
        comm->finalize();
      });
      ASSERT_TRUE(res.ok()) << "world size " << n << ", ring " << ring << "\n" << res.log;
    }
  }
}

TEST(HostMoe, BadConfigsAreRefused) {
  auto res = cclx::test::runRanks(2, [](int r, int n, std::shared_ptr<cclx::Store> store) {
    auto comm = cclx::test::makeCpuComm(r, n, store);
    auto refused = [&](cclx::MoeConfig c, const char* what) {
      try {
        cclx::MoeBuffer::create(comm, c);
      } catch (const cclx::Error& e) {
        MP_CHECK(e.code() == cclxInvalidArgument && std::strstr(e.what(), what),
                 "%s: %s", what, e.what());
        return;
      }
      MP_CHECK(false, "%s: accepted", what);
    };
    cclx::MoeConfig c;
    c.maxTokensPerRank = 4, c.hidden = 8, c.numExperts = 4, c.topK = 2;
    cclx::MoeConfig bad = c;
    bad.numExperts = 3;
    refused(bad, "multiple of the world size");
    bad = c, bad.topK = 17;
    refused(bad, "top_k");
    bad = c, bad.dtype = cclx::DataType::i32;
    refused(bad, "dtype");
    bad = c, bad.maxTokensPerRank = 0;
    refused(bad, "max_tokens_per_rank");
    for (int ring : {-1, 1, 3, (1 << 20) + 1}) {
      bad = c, bad.ringTokens = ring;
      refused(bad, "ring_tokens");
    }
    comm->finalize();
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

}  // namespace
