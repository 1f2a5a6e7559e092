// Rules for sharing peer memory between the ranks of one host (see peer_share.h).
#include "core/sharing/peer_share.h"

#include "base/error.h"

namespace cclx {

std::string encodeShareOffer(const ShareOffer& o) {
  if (o.vmm) return "V " + o.netns + " " + o.mailbox;
  std::string why = o.whyNot.empty() ? "not offered" : o.whyNot;
  for (char& c : why)
    if (c == '\n' || c == '\r') c = ' ';
  return "H " + why;
}

ShareOffer parseShareOffer(const std::string& line) {
  ShareOffer o;
  if (line.size() >= 2 && line[0] == 'H' && line[1] == ' ') {
    o.whyNot = line.substr(2);
    return o;
  }
  const size_t sp = line.find(' ', 2);
  const bool ok = line.size() >= 2 && line[0] == 'V' && line[1] == ' ' &&
                  sp != std::string::npos && sp > 2 && sp + 1 < line.size() &&
                  line.find(' ', sp + 1) == std::string::npos;
  if (!ok) {
    o.whyNot = "a malformed sharing offer";
    return o;
  }
  o.vmm = true;
  o.netns = line.substr(2, sp - 2);
  o.mailbox = line.substr(sp + 1);
  return o;
}

char chooseShare(const std::vector<ShareOffer>& offers, std::string* why) {
  auto no = [&](const std::string& w) {
    if (why) *why = w;
    return 'H';
  };
  if (offers.empty()) return no("no ranks");
  for (size_t r = 0; r < offers.size(); ++r)
    if (!offers[r].vmm) return no(strFormat("rank %zu: %s", r, offers[r].whyNot.c_str()));
  for (size_t r = 1; r < offers.size(); ++r)
    if (offers[r].netns != offers[0].netns)
      return no(strFormat("ranks 0 and %zu are in different network namespaces (%s, %s): file "
                          "descriptors cannot pass between them",
                          r, offers[0].netns.c_str(), offers[r].netns.c_str()));
  if (why) why->clear();
  return 'V';
}

}  // namespace cclx
