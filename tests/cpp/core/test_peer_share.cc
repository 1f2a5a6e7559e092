// core/sharing/peer_share.h: how the ranks of one host choose to share peer memory (VMM memory
// passed as file descriptors, or legacy CUDA IPC), checked without a GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/sharing/peer_share.h"

using namespace cclx;

namespace {

ShareOffer vmm(const std::string& ns, const std::string& box) {
  ShareOffer o;
  o.vmm = true;
  o.netns = ns;
  o.mailbox = box;
  return o;
}

ShareOffer ipc(const std::string& why) {
  ShareOffer o;
  o.whyNot = why;
  return o;
}

}  // namespace

TEST(PeerShare, OffersRoundTrip) {
  const ShareOffer v = parseShareOffer(encodeShareOffer(vmm("4026531840", "00a1b2c3")));
  EXPECT_TRUE(v.vmm);
  EXPECT_EQ(v.netns, "4026531840");
  EXPECT_EQ(v.mailbox, "00a1b2c3");
  const ShareOffer h = parseShareOffer(encodeShareOffer(ipc("CCLX_PEER_MEM_SHARE=ipc")));
  EXPECT_FALSE(h.vmm);
  EXPECT_EQ(h.whyNot, "CCLX_PEER_MEM_SHARE=ipc");
  // A reason is one line: what follows it in the identity record is not disturbed.
  const std::string line = encodeShareOffer(ipc("two\nlines"));
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_EQ(parseShareOffer(line).whyNot, "two lines");
}

TEST(PeerShare, MalformedOffersAreIpcWithAReason) {
  for (const char* bad : {"", "V", "V ", "V ns", "V ns ", "V  box", "V ns box extra", "X ns box",
                          "Vns box"}) {
    const ShareOffer o = parseShareOffer(bad);
    EXPECT_FALSE(o.vmm) << "'" << bad << "'";
    EXPECT_EQ(o.whyNot, "a malformed sharing offer") << "'" << bad << "'";
  }
}

TEST(PeerShare, VmmOnlyWhenEveryRankOffersItInOneNamespace) {
  std::string why = "stale";
  EXPECT_EQ(chooseShare({vmm("1", "a"), vmm("1", "b"), vmm("1", "c")}, &why), 'V');
  EXPECT_EQ(why, "");
  EXPECT_EQ(chooseShare({vmm("1", "a"), ipc("no VMM on this device"), vmm("1", "c")}, &why), 'H');
  EXPECT_EQ(why, "rank 1: no VMM on this device");
  EXPECT_EQ(chooseShare({vmm("1", "a"), vmm("1", "b"), vmm("2", "c")}, &why), 'H');
  EXPECT_NE(why.find("ranks 0 and 2 are in different network namespaces (1, 2)"),
            std::string::npos)
      << why;
  EXPECT_EQ(chooseShare({}, &why), 'H');
  EXPECT_EQ(chooseShare({vmm("1", "a")}, nullptr), 'V');
}

TEST(PeerShare, EveryRankChoosesAlike) {
  // The same records in every rank's hands: the same verdict, whatever the order of evaluation.
  const std::vector<ShareOffer> offers = {vmm("7", "x"), vmm("7", "y"), ipc("HIP build"),
                                          vmm("8", "z")};
  std::string first;
  const char c0 = chooseShare(offers, &first);
  for (int i = 0; i < 4; ++i) {
    std::string w;
    EXPECT_EQ(chooseShare(offers, &w), c0);
    EXPECT_EQ(w, first);
  }
  EXPECT_EQ(first, "rank 2: HIP build");
}
