// How the ranks of one host share their peer memory (gpu/peer_mem.h): pure rules (no GPU
// runtime), so the CPU tests check them.
//
//  * 'V': memory of CUDA's virtual memory management API (cuMemCreate, exportable as a POSIX file
//    descriptor). Each rank sends its allocations' descriptors to every peer over a unix socket
//    (base/fd_pass.h) and each peer imports and maps them. An imported allocation stays alive
//    while any process maps it: when a rank dies (killed, crashed) its peers' kernels still read
//    and write valid memory and end at their deadline with an error naming it.
//  * 'H': legacy CUDA IPC (cudaIpcGetMemHandle of cudaMalloc memory; HIP IPC in HIP builds). The
//    driver frees a rank's memory when its process exits, also under a peer kernel that still
//    reads it: a killed rank can make its peers' kernels fault (an illegal address, which under
//    MPS also disturbs the other clients of the GPU). The fallback where 'V' is not possible.
//
// Every rank states what it offers in its identity record; every rank derives the same choice:
// 'V' when every rank offers it from one network namespace (unix sockets do not cross them),
// else 'H' with the reason.
#pragma once

#include <string>
#include <vector>

namespace cclx {

struct ShareOffer {
  bool vmm = false;     // this rank can allocate, export and import 'V' memory
  std::string netns;    // its network namespace (base/fd_pass.h networkNamespaceId), 'V' only
  std::string mailbox;  // its FdMailbox address (hex), 'V' only
  std::string whyNot;   // why not 'V' (when !vmm)
};

/// One line without '\n': "V <netns> <mailbox>" or "H <why>".
std::string encodeShareOffer(const ShareOffer& o);
/// The inverse; anything else gives an 'H' offer whose whyNot says it was malformed.
ShareOffer parseShareOffer(const std::string& line);

/// 'V' or 'H' (see the file comment), the same on every rank for the same offers; *why (when not
/// null) says why not 'V', naming the first rank concerned.
char chooseShare(const std::vector<ShareOffer>& offers, std::string* why);

}  // namespace cclx
