// File: ibverbs_registry.cc
// The "ibverbs" entry of the transport registry: its parameters, parsed
// into IbverbsTransportOptions without narrowing.
#include <cstdint>
#include <limits>
#include <type_traits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "rdma/ibverbs/ibverbs_probe.h"
#include "rdma/ibverbs/ibverbs_transport.h"

namespace rdmaflow::rdma::ibverbs {

absl::Status RegisterIbverbsTransport(TransportRegistry& registry) {
  return registry.Register(
      kBackend, /*priority=*/50,
      [](const TransportConfig& config)
          -> absl::StatusOr<std::unique_ptr<Transport>> {
        RETURN_IF_ERROR(CheckKnownParams(
            config, kBackend,
            {"device", "port", "gid_index", "bootstrap_host", "bind_address",
             "world_size", "max_outstanding", "signal_every", "max_inline",
             "ack_timeout", "retry_count", "notify", "notify_slots", "events",
             "qps_per_peer", "stripe_min", "connect",
             "max_endpoints_per_peer"}));
        IbverbsTransportOptions options;
        options.rank = config.rank;
        for (const auto& [key, value] : config.params) {
          bool ok = true;
          int64_t number = 0;
          if (key == "device") {
            options.device.device = value;
          } else if (key == "bootstrap_host") {
            options.bootstrap_host = value;
          } else if (key == "bind_address") {
            options.bind_address = value;
          } else if (key == "connect") {
            if (value != "tcp" && value != "rdmacm") {
              return absl::InvalidArgumentError(absl::StrCat(
                  "ibverbs parameter connect='", value,
                  "' must be tcp (rdmaflow's handshake) or rdmacm (the RDMA "
                  "connection manager)"));
            }
            options.use_rdmacm = value == "rdmacm";
          } else if (key == "notify") {
            if (value != "flag" && value != "imm") {
              return absl::InvalidArgumentError(absl::StrCat(
                  "ibverbs parameter notify='", value,
                  "' must be flag (a record written behind the data) or imm "
                  "(write with immediate)"));
            }
            options.notify =
                value == "flag" ? NotifyMode::kFlag : NotifyMode::kImmediate;
          } else {
            ok = absl::SimpleAtoi(value, &number) && number >= 0;
            // Into its option's type only when it fits there: never
            // narrowed silently (a port of 2^32 + 1 is not port 1).
            auto set = [&](auto& field) {
              using Field = std::remove_reference_t<decltype(field)>;
              ok = ok &&
                   static_cast<uint64_t>(number) <=
                       static_cast<uint64_t>(std::numeric_limits<Field>::max());
              if (ok) field = static_cast<Field>(number);
            };
            if (key == "port") set(options.device.port);
            if (key == "world_size") set(options.world_size);
            if (key == "gid_index") set(options.device.gid_index);
            if (key == "max_outstanding")
              set(options.max_outstanding_per_endpoint);
            if (key == "signal_every") set(options.signal_every);
            if (key == "max_inline") {
              ok = ok && number <= 4096;
              options.max_inline = static_cast<uint32_t>(number);
            }
            if (key == "qps_per_peer") {
              ok = ok && number >= 1 && number <= kMaxQueuePairsPerPeer;
              options.qps_per_peer = static_cast<int>(number);
            }
            if (key == "stripe_min") {
              ok = ok && number >= 4096;
              options.stripe_min = static_cast<uint64_t>(number);
            }
            if (key == "events") {
              ok = ok && number <= 1;
              options.completion_events = number == 1;
            }
            if (key == "notify_slots") {
              ok = ok && number <= kMaxNotifySlots;
              options.notify_slots = static_cast<uint32_t>(number);
            }
            if (key == "ack_timeout") set(options.ack_timeout);
            if (key == "retry_count") set(options.retry_count);
            if (key == "max_endpoints_per_peer") {
              set(options.max_endpoints_per_peer);
              ok = ok && number >= 1;
            }
          }
          if (!ok) {
            return absl::InvalidArgumentError(absl::StrCat(
                "ibverbs parameter ", key, "='", value,
                "' must be a non-negative integer that fits its option (an int "
                "for most; max_inline at most 4096, "
                "notify_slots at most ",
                kMaxNotifySlots, ", qps_per_peer 1..", kMaxQueuePairsPerPeer,
                ", stripe_min at least 4096, events 0 "
                "or 1)"));
          }
        }
        return IbverbsTransport::Create(options);
      },
      ProbeIbverbs);
}

}  // namespace rdmaflow::rdma::ibverbs
