#include "rdma/transport_registry.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/key_value_params.h"

namespace rdmaflow::rdma {

absl::Status TransportRegistry::Register(absl::string_view name, int priority,
                                         TransportFactory factory,
                                         TransportProbe probe) {
  if (name.empty() || !factory) {
    return absl::InvalidArgumentError(
        "a transport needs a non-empty name and a factory");
  }
  auto [it, inserted] =
      entries_.emplace(std::string(name),
                       Entry{priority, std::move(factory), std::move(probe)});
  if (!inserted) {
    return absl::AlreadyExistsError(
        absl::StrCat("transport '", name, "' is already registered"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Transport>> TransportRegistry::Create(
    absl::string_view name, const TransportConfig& config) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    return absl::NotFoundError(
        absl::StrCat("unknown transport '", name, "'; registered: ",
                     absl::StrJoin(Names(), ", ")));
  }
  return it->second.factory(config);
}

absl::StatusOr<TransportProbeReport> TransportRegistry::Probe(
    absl::string_view name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    return absl::NotFoundError(
        absl::StrCat("unknown transport '", name, "'; registered: ",
                     absl::StrJoin(Names(), ", ")));
  }
  if (!it->second.probe) {
    TransportProbeReport report;
    report.found.push_back("(this backend has no probe)");
    return report;
  }
  return it->second.probe();
}

std::vector<std::string> TransportRegistry::Names() const {
  std::vector<std::pair<int, std::string>> sorted;
  for (const auto& [name, entry] : entries_) {
    sorted.emplace_back(-entry.priority, name);
  }
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::string> names;
  for (auto& [priority, name] : sorted) names.push_back(std::move(name));
  return names;
}

absl::Status CheckKnownParams(const TransportConfig& config,
                              absl::string_view backend,
                              const std::vector<std::string>& known) {
  for (const auto& [key, value] : config.params) {
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown parameter '", key, "' for transport '", backend,
          "'; it accepts: ",
          known.empty() ? std::string("none") : absl::StrJoin(known, ", ")));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, std::string>> ParseTransportParams(
    absl::string_view text) {
  return ParseKeyValues(text, "transport parameter");
}

}  // namespace rdmaflow::rdma
