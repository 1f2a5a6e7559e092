// The store's authentication primitives: SHA-256 (FIPS 180-4), HMAC-SHA256 (RFC 2104), a
// constant-time comparison and random bytes from the kernel. Small and self-contained: the store
// needs a keyed proof of the job's secret, nothing more.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace cclx::store {

using Digest = std::array<uint8_t, 32>;

/// Incremental SHA-256.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  void update(const std::string& s) { update(s.data(), s.size()); }
  Digest finish();  // the object must not be updated afterwards

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t used_ = 0;
  uint64_t bytes_ = 0;
};

Digest sha256(const std::string& data);
/// HMAC-SHA256 of `message` under `key` (keys longer than 64 bytes are hashed first).
Digest hmacSha256(const std::string& key, const std::string& message);
/// True when a and b are equal; the time taken depends only on their lengths.
bool constantTimeEqual(const void* a, const void* b, size_t n);
/// `n` bytes from the kernel's random source (getrandom(2), else /dev/urandom); throws
/// cclx::Error (cclxSystemError) when neither works.
std::string randomBytes(size_t n);
/// Lower-case hex of `data`.
std::string toHex(const void* data, size_t n);

}  // namespace cclx::store
