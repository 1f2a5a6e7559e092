// TCP store wire protocol and the key-value table the server keeps.
//
// Every message is a frame: a 4-byte length (host byte order; both ends are built from the same
// source) followed by that many bytes. A request body is a one-byte command followed by its
// arguments; strings are a 4-byte length plus bytes, integers 8 bytes. A reply body is a one-byte
// status followed by the command's result.
//
// A connection starts with a challenge-response handshake (docs/design/rendezvous.md, "Store
// authentication"): the server sends CHALLENGE (magic, flags, a random nonce); the client answers
// AUTH (magic, job id, its own nonce, HMAC-SHA256 under the token of the client transcript); the
// server answers OK with its own proof (the server transcript) or a fixed refusal and closes.
// Until then no frame may exceed kMaxHandshakeFrame.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace cclx::store {

enum Cmd : uint8_t { AUTH = 1, SET = 2, GET = 3, ADD = 4, CHECK = 5, ERASE = 6, MISSING = 7,
                     CHALLENGE = 8 };
// REFUSED: the client did not prove it holds the token (or sent something else); OTHER_JOB: it
// did, for another job id. Neither reply says anything about the server's job.
enum Status : uint8_t { OK = 0, NOT_FOUND = 1, REFUSED = 2, BAD_REQUEST = 3, OTHER_JOB = 4 };

constexpr const char* kMagic = "cclx-store-2";
constexpr uint32_t kMaxFrame = 1u << 30;        // frames of an authenticated connection
constexpr uint32_t kMaxHandshakeFrame = 4096;   // any frame before authentication
constexpr size_t kNonceBytes = 32;
constexpr uint8_t kFlagServerHasToken = 1;      // CHALLENGE flags
/// The only text a refused client gets.
constexpr const char* kRefusal = "cclx store: connection refused";

/// The proofs of the handshake: HMAC-SHA256 under `token` of a label (one for each side, so that
/// neither proof can be reflected as the other), both nonces and the job id.
std::string authProof(bool client, const std::string& token, const std::string& serverNonce,
                      const std::string& clientNonce, const std::string& jobId);

class Writer {
 public:
  Writer& u8(uint8_t v) { buf_.push_back(char(v)); return *this; }
  Writer& i64(int64_t v) { buf_.append(reinterpret_cast<const char*>(&v), 8); return *this; }
  Writer& u32(uint32_t v) { buf_.append(reinterpret_cast<const char*>(&v), 4); return *this; }
  Writer& str(const std::string& s) { u32(uint32_t(s.size())); buf_.append(s); return *this; }
  const std::string& data() const { return buf_; }

 private:
  std::string buf_;
};

/// Reads fields from a body; every accessor returns false when the body is too short.
class Reader {
 public:
  explicit Reader(const std::string& b) : b_(b) {}
  bool u8(uint8_t& v);
  bool u32(uint32_t& v);
  bool i64(int64_t& v);
  bool str(std::string& s);
  bool done() const { return pos_ == b_.size(); }

 private:
  const std::string& b_;
  size_t pos_ = 0;
};

using Clock = std::chrono::steady_clock;

/// Sends one frame; throws cclx::Error (cclxSystemError / cclxTimeout) on failure.
void sendFrame(int fd, const std::string& body, Clock::time_point deadline, const char* peer);
/// Receives one frame of at most `maxLen` bytes; throws cclx::Error; cclxRemoteError when the
/// peer closed the connection or announced a longer frame.
std::string recvFrame(int fd, Clock::time_point deadline, const char* peer,
                      uint32_t maxLen = kMaxFrame);

/// Server side: takes the first complete frame off the front of `in` (the bytes a client sent so
/// far: any number of frames, the last one possibly partial) into `body`. kPartial: `in` holds no
/// complete frame yet (nothing taken); kBad: the frame announces more than kMaxFrame bytes (the
/// server drops the connection).
enum class Take { kFrame, kPartial, kBad };
Take takeFrame(std::string& in, std::string& body);

/// The server's table. Thread-safe. execute() serves one request body and returns a reply body.
class KvTable {
 public:
  std::string execute(const std::string& request);
  void set(const std::string& k, const std::string& v);
  bool get(const std::string& k, std::string& v);
  /// Throws cclxInvalidArgument (and changes nothing) when the sum overflows; execute() answers
  /// such an ADD with BAD_REQUEST.
  int64_t add(const std::string& k, int64_t delta);
  bool check(const std::string& k);
  void erase(const std::string& k);
  std::vector<std::string> missing(const std::vector<std::string>& keys);

 private:
  std::mutex mu_;
  std::map<std::string, std::string> kv_;
};

}  // namespace cclx::store
