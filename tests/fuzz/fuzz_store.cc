// Fuzzes the store server's decoding of a client's bytes (src/store/proto.{h,cc}): the input is
// what one client sends, delivered to the frame splitter (takeFrame) in pieces as recv() would,
// and every complete frame is served by the table (KvTable::execute), as the server does after
// the handshake. Checks: nothing crashes or trips a sanitizer, the splitter never loses or
// invents bytes, every reply is one well-formed reply of the command's kind, and a request that
// the protocol's own Writer encodes decodes to what was encoded.
//
// Input: byte 0 picks the size of the pieces (1..64 bytes, 0 = all at once); the rest is the
// byte stream of the connection (4-byte length, body: command byte and arguments).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "store/proto.h"

using namespace cclx::store;

namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_store: %s\n", what);
    std::abort();
  }
}

// The reply to `req` must decode as the reply of its command.
void checkReply(const std::string& req, const std::string& rep) {
  Reader r(rep);
  uint8_t st = 0xff;
  check(r.u8(st), "empty reply");
  uint8_t cmd = req.empty() ? 0 : uint8_t(req[0]);
  if (st == BAD_REQUEST) {
    check(r.done(), "BAD_REQUEST reply with trailing bytes");
    return;
  }
  switch (cmd) {
    case SET:
    case ERASE:
      check(st == OK && r.done(), "bad reply to SET/ERASE");
      break;
    case GET:
      if (st == OK) {
        std::string v;
        check(r.str(v) && r.done(), "bad reply to GET");
      } else {
        check(st == NOT_FOUND && r.done(), "bad reply to GET");
      }
      break;
    case ADD: {
      int64_t v;
      check(st == OK && r.i64(v) && r.done(), "bad reply to ADD");
      break;
    }
    case CHECK:
      check((st == OK || st == NOT_FOUND) && r.done(), "bad reply to CHECK");
      break;
    case MISSING: {
      uint32_t n = 0;
      check(st == OK && r.u32(n), "bad reply to MISSING");
      std::string k;
      for (uint32_t i = 0; i < n; ++i) check(r.str(k), "short MISSING reply");
      check(r.done(), "MISSING reply with trailing bytes");
      break;
    }
    default:
      check(false, "a command that does not exist was served");
  }
}

// Encoding and decoding agree: the first frame's fields, re-encoded by Writer, read back.
void roundTrip(const std::string& body) {
  Reader r(body);
  uint8_t cmd;
  std::string k, v;
  int64_t d;
  if (!r.u8(cmd) || !r.str(k)) return;
  std::string enc = Writer().u8(cmd).str(k).data();
  Reader back(enc);
  uint8_t c2;
  std::string k2;
  check(back.u8(c2) && c2 == cmd && back.str(k2) && k2 == k && back.done(), "round trip (key)");
  if (r.i64(d)) {
    std::string e2 = Writer().i64(d).str(k).data();
    Reader b2(e2);
    int64_t d2;
    check(b2.i64(d2) && d2 == d && b2.str(k2) && k2 == k && b2.done(), "round trip (i64)");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t piece = data[0] % 65;
  const std::string stream(reinterpret_cast<const char*>(data + 1), size - 1);
  KvTable table;
  std::string in, body;
  size_t fed = 0, consumed = 0;
  bool dropped = false;
  while (fed < stream.size() && !dropped) {
    const size_t n = piece == 0 ? stream.size() - fed : std::min(piece, stream.size() - fed);
    in.append(stream, fed, n);
    fed += n;
    for (Take t; (t = takeFrame(in, body)) != Take::kPartial;) {
      if (t == Take::kBad) {
        uint32_t len;
        check(in.size() >= 4, "kBad without a length");
        std::memcpy(&len, in.data(), 4);
        check(len > kMaxFrame, "kBad for a frame within the limit");
        dropped = true;
        break;
      }
      // The frame is exactly the announced bytes at this point of the stream.
      uint32_t len;
      check(consumed + 4 <= stream.size(), "frame beyond the stream");
      std::memcpy(&len, stream.data() + consumed, 4);
      check(len == body.size() && stream.compare(consumed + 4, len, body) == 0,
            "frame differs from the bytes sent");
      consumed += 4 + size_t(len);
      roundTrip(body);
      checkReply(body, table.execute(body));
    }
  }
  if (!dropped) check(consumed + in.size() == stream.size(), "bytes lost by the splitter");
  return 0;
}
