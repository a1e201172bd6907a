// File: unique_fd.h
// -----------------------------------------------------------------------------
// UniqueFd: an open file descriptor, closed when destroyed. Move-only.
// Used for sockets (the verbs bootstrap) and for exported device memory
// (a dma-buf, device/device_runtime.h).
#ifndef RDMAFLOW_COMMON_UNIQUE_FD_H_
#define RDMAFLOW_COMMON_UNIQUE_FD_H_

#include <unistd.h>

namespace rdmaflow {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = other.release();
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { Reset(); }

  // The descriptor, or -1 when none is held.
  int get() const { return fd_; }
  // Gives the descriptor up without closing it.
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  void Reset() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  int fd_ = -1;
};

}  // namespace rdmaflow

#endif  // RDMAFLOW_COMMON_UNIQUE_FD_H_
