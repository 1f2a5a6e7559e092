// Formatted errors.
#include "base/error.h"

#include <cstdarg>
#include <cstdio>
#include <vector>

namespace cclx {

namespace {
std::string vformat(const char* fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = std::vsnprintf(nullptr, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0) return fmt;
  std::vector<char> buf(size_t(n) + 1);
  std::vsnprintf(buf.data(), buf.size(), fmt, ap);
  return std::string(buf.data(), size_t(n));
}
}  // namespace

std::string strFormat(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vformat(fmt, ap);
  va_end(ap);
  return s;
}

void throwError(cclxResult_t code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vformat(fmt, ap);
  va_end(ap);
  throw Error(code, s);
}

}  // namespace cclx
