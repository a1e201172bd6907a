// File: bootstrap.h
// -----------------------------------------------------------------------------
// The connection handshake of the ibverbs backend. An RC queue pair needs the
// peer's queue-pair number, PSN, LID/GID and MTU before it can carry
// anything, and Transport::Connect() is one-sided (the peer may be doing
// nothing but Progress()). So each transport runs a small TCP listener
// (its address is part of Transport::address(), published through the
// Store); Connect() sends its QueuePairInfo there, the listener thread
// creates and connects the peer's side and answers with its own.
#ifndef RDMAFLOW_RDMA_IBVERBS_BOOTSTRAP_H_
#define RDMAFLOW_RDMA_IBVERBS_BOOTSTRAP_H_

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace rdmaflow::rdma::ibverbs {

// What one side tells the other about its queue pair. Value type.
struct QueuePairInfo {
  int32_t rank = -1;
  uint32_t qpn = 0;
  uint32_t psn = 0;
  uint16_t lid = 0;
  ibv_gid gid{};
  uint8_t mtu = 0;  // enum ibv_mtu
  // An always-readable 64-byte region of the sender, the target of the
  // 1-byte reads that make unsignaled writes complete (ibverbs_endpoint.h).
  uint64_t marker_address = 0;
  uint32_t marker_rkey = 0;
};

// An open file descriptor, closed on destruction. Move-only.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();

  int get() const { return fd_; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

std::string EncodeQueuePairInfo(const QueuePairInfo& info);
// kInvalidArgument for a message of another size or version.
absl::StatusOr<QueuePairInfo> DecodeQueuePairInfo(absl::string_view bytes);

// A TCP listener on an ephemeral port with one thread that answers
// handshakes with `handler`. Thread-safe; the destructor stops the thread.
class BootstrapListener {
 public:
  using Handler =
      std::function<absl::StatusOr<QueuePairInfo>(const QueuePairInfo&)>;

  static absl::StatusOr<std::unique_ptr<BootstrapListener>> Start(
      Handler handler);
  ~BootstrapListener();

  int port() const { return port_; }

 private:
  BootstrapListener(int fd, int wake_fd_read, int wake_fd_write, int port,
                    Handler handler);
  void Serve();
  // Answers one handshake; returns whether to keep the connection open.
  bool Answer(int connection);

  const int fd_;
  const int wake_read_;
  const int wake_write_;
  const int port_;
  Handler handler_;
  // Connections of answered handshakes, kept open (see Handshake); touched
  // only by the listener thread.
  std::vector<UniqueFd> kept_;
  std::thread thread_;
};

// The handshake connection stays open while both sides live: when a peer
// process dies its kernel closes it, which is how a dead peer is noticed even
// where the fabric would retry forever (Soft-RoCE towards a destroyed QP).
struct Handshake {
  QueuePairInfo remote;
  UniqueFd connection;
};

// Connects to `host:port`, sends `request`, returns the peer's answer and the
// open connection. kUnavailable when the peer cannot be reached or does not
// answer within `timeout`; the peer's error (e.g. it could not create a
// queue pair) as kUnavailable with its message.
absl::StatusOr<Handshake> ExchangeQueuePairInfo(const std::string& host,
                                                int port,
                                                const QueuePairInfo& request,
                                                absl::Duration timeout);

// True when the peer end of `connection` has closed (EOF or error); never
// blocks.
bool PeerClosed(int connection);

}  // namespace rdmaflow::rdma::ibverbs

#endif  // RDMAFLOW_RDMA_IBVERBS_BOOTSTRAP_H_
