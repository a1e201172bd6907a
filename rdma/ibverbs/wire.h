// File: wire.h
// -----------------------------------------------------------------------------
// Fixed-width fields in the handshake messages (bootstrap.h, rdmacm.h), in
// host byte order: both ends of an RDMA connection here are little-endian
// x86-64 or arm64 hosts running the same rdmaflow. Callers check sizes
// before they read.
#ifndef RDMAFLOW_RDMA_IBVERBS_WIRE_H_
#define RDMAFLOW_RDMA_IBVERBS_WIRE_H_

#include <cstring>
#include <string>

namespace rdmaflow::rdma::ibverbs::wire {

template <typename T>
void Put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(value));
}

template <typename T>
T Get(const char*& in) {
  T value;
  std::memcpy(&value, in, sizeof(value));
  in += sizeof(value);
  return value;
}

}  // namespace rdmaflow::rdma::ibverbs::wire

#endif  // RDMAFLOW_RDMA_IBVERBS_WIRE_H_
