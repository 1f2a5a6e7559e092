// TCP store wire protocol and the key-value table the server keeps.
//
// Every message is a frame: a 4-byte length (host byte order; both ends are built from the same
// source) followed by that many bytes. A request body is a one-byte command followed by its
// arguments; strings are a 4-byte length plus bytes, integers 8 bytes. A reply body is a one-byte
// status followed by the command's result. The first request on a connection must be HELLO,
// carrying a protocol magic and the client's job id; the server answers REFUSED (with its own job
// id) and closes the connection when they differ.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace cclx::store {

enum Cmd : uint8_t { HELLO = 1, SET = 2, GET = 3, ADD = 4, CHECK = 5, ERASE = 6, MISSING = 7 };
enum Status : uint8_t { OK = 0, NOT_FOUND = 1, REFUSED = 2, BAD_REQUEST = 3 };

constexpr const char* kMagic = "cclx-store-1";
constexpr uint32_t kMaxFrame = 1u << 30;

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
/// Receives one frame; throws cclx::Error; cclxRemoteError when the peer closed the connection.
std::string recvFrame(int fd, Clock::time_point deadline, const char* peer);

/// The server's table. Thread-safe. execute() serves one request body and returns a reply body.
class KvTable {
 public:
  std::string execute(const std::string& request);
  void set(const std::string& k, const std::string& v);
  bool get(const std::string& k, std::string& v);
  int64_t add(const std::string& k, int64_t delta);
  bool check(const std::string& k);
  void erase(const std::string& k);
  std::vector<std::string> missing(const std::vector<std::string>& keys);

 private:
  std::mutex mu_;
  std::map<std::string, std::string> kv_;
};

}  // namespace cclx::store
