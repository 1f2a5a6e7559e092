// Passing file descriptors between the processes of one host: unix datagram sockets bound to
// abstract addresses that the kernel picks, one tagged datagram per descriptor (SCM_RIGHTS).
// The GPU windows hand the POSIX descriptors of cuMem allocations to their peers this way
// (gpu/window/ipc.cc); the addresses travel in the records the ranks exchange through the store.
//
// Abstract addresses belong to a network namespace: processes that share one (the processes of
// one host, containers started with the host's network) reach each other's mailboxes; a process
// in a network namespace of its own does not (send() fails with "no mailbox at ...").
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace cclx {

/// This process's network namespace as a number (the inode of /proc/self/ns/net: the same for
/// every process in that namespace on one host); "" where it cannot be read. Processes in
/// different network namespaces cannot reach each other's mailboxes.
std::string networkNamespaceId();

/// A descriptor closed at scope exit unless taken (reset() closes it now).
struct OwnedFd {
  int fd = -1;
  OwnedFd() = default;
  OwnedFd(const OwnedFd&) = delete;
  OwnedFd& operator=(const OwnedFd&) = delete;
  ~OwnedFd() { reset(); }
  void reset();
};

/// One receiving socket (SOCK_DGRAM | SOCK_CLOEXEC, AF_UNIX) autobound to a unique abstract
/// address for as long as the object lives; it also sends. Not thread-safe: one thread at a time.
/// Every failing system call throws cclx::Error(cclxSystemError) with the reason.
class FdMailbox {
 public:
  FdMailbox();
  ~FdMailbox();
  FdMailbox(const FdMailbox&) = delete;
  FdMailbox& operator=(const FdMailbox&) = delete;

  /// The bound address, hex-encoded (printable; what a peer passes to send()).
  const std::string& address() const { return address_; }

  /// Sends one datagram to the mailbox at `peerAddress` (an address() of this host): `tag` (by
  /// convention the sender's rank) and, when fd >= 0, a duplicate of fd (the caller keeps fd);
  /// fd < 0 sends the tag alone ("nothing for you"). Waits up to `timeout` while the peer's
  /// queue is full (cclxTimeout after it); no mailbox at the address: cclxSystemError.
  void send(const std::string& peerAddress, int fd, int tag,
            std::chrono::milliseconds timeout = std::chrono::seconds(30));

  /// Receives one datagram from each of `tags` (duplicates count once) and returns tag -> the
  /// descriptor received (close-on-exec; the caller owns and closes it), or -1 where the sender
  /// sent the tag alone. Datagrams with a tag outside `tags`, a tag already received or another
  /// shape are dropped (their descriptors closed). Throws cclxTimeout naming the tags (ranks)
  /// not heard from when `timeout` passes first; on every error the descriptors already received
  /// are closed.
  std::map<int, int> receive(const std::vector<int>& tags, std::chrono::milliseconds timeout);

  /// The most descriptors one datagram carries.
  static constexpr size_t kMaxFds = 16;
  /// send() with several descriptors in one datagram (at most kMaxFds, each >= 0; none: the tag
  /// alone). One datagram per peer and exchange keeps a mailbox's queue short (the kernel's
  /// limit on queued datagrams is net.unix.max_dgram_qlen, 10 by default).
  void sendMany(const std::string& peerAddress, const std::vector<int>& fds, int tag,
                std::chrono::milliseconds timeout = std::chrono::seconds(30));
  /// receive() of sendMany() datagrams: tag -> the descriptors in the order sent (empty: the tag
  /// alone). Same rules as receive().
  std::map<int, std::vector<int>> receiveMany(const std::vector<int>& tags,
                                              std::chrono::milliseconds timeout);

 private:
  int sock_ = -1;
  std::string address_;
};

}  // namespace cclx
