// File: transport_registry.h
// -----------------------------------------------------------------------------
// TransportRegistry: backends by name. Each backend exports a
// Register...Transport(TransportRegistry&) function; RegisterBuiltinTransports
// (rdma/builtin_transports.h) calls each explicitly. No static-initializer
// self-registration.
#ifndef RDMAFLOW_RDMA_TRANSPORT_REGISTRY_H_
#define RDMAFLOW_RDMA_TRANSPORT_REGISTRY_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rdma/transport.h"

namespace rdmaflow::rdma {

// What every backend factory receives: this process's rank and backend
// parameters as strings (e.g. {"tls": "shm"} for UCX), so a CLI can pass
// them through unchanged. A backend rejects parameters it does not know with
// kInvalidArgument listing the ones it does.
struct TransportConfig {
  int rank = 0;
  std::map<std::string, std::string> params;
};

using TransportFactory =
    std::function<absl::StatusOr<std::unique_ptr<Transport>>(
        const TransportConfig&)>;

// What a backend finds on this machine, for `rdmaflow info`: whether it can
// make a transport here, what it found (versions, devices, ports), and one
// line of advice per missing piece.
struct TransportProbeReport {
  bool usable = false;
  std::vector<std::string> found;
  std::vector<std::string> advice;
};

// Looks at the machine without creating a transport or touching a peer.
using TransportProbe = std::function<TransportProbeReport()>;

// Thread-compatible: register at start-up, then create from any one thread.
class TransportRegistry {
 public:
  // kAlreadyExists if `name` is taken. Higher `priority` is preferred by
  // CreateDefault().
  absl::Status Register(absl::string_view name, int priority,
                        TransportFactory factory,
                        TransportProbe probe = nullptr);

  // kNotFound listing the registered names; otherwise the factory's result.
  absl::StatusOr<std::unique_ptr<Transport>> Create(
      absl::string_view name, const TransportConfig& config) const;

  // Registered names, highest priority first.
  std::vector<std::string> Names() const;

  // The backend's probe; kNotFound for an unknown name, and a report with
  // one line saying so for a backend registered without a probe.
  absl::StatusOr<TransportProbeReport> Probe(absl::string_view name) const;

 private:
  struct Entry {
    int priority;
    TransportFactory factory;
    TransportProbe probe;
  };
  std::map<std::string, Entry, std::less<>> entries_;
};

// For backend factories: kInvalidArgument naming the first parameter of
// `config` not in `known`, and listing `known`.
absl::Status CheckKnownParams(const TransportConfig& config,
                              absl::string_view backend,
                              const std::vector<std::string>& known);

// Parses "key=value,key=value" into TransportConfig::params.
// kInvalidArgument for an item without '='.
absl::StatusOr<std::map<std::string, std::string>> ParseTransportParams(
    absl::string_view text);

}  // namespace rdmaflow::rdma

#endif  // RDMAFLOW_RDMA_TRANSPORT_REGISTRY_H_
