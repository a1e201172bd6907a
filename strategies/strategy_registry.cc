// File: strategy_registry.cc
#include "strategies/strategy_registry.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "compression/codec.h"

namespace rdmaflow::strategies {

absl::Status StrategyRegistry::Register(const std::string& name,
                                        std::string summary,
                                        StrategyFactory factory) {
  if (name.empty() || !factory) {
    return absl::InvalidArgumentError(
        "a strategy needs a name and a factory to be registered");
  }
  if (entries_.count(name) > 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("strategy '", name, "' is already registered"));
  }
  entries_[name] = Entry{std::move(summary), std::move(factory)};
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Strategy>> StrategyRegistry::Create(
    const std::string& name, const StrategyOptions& options) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown strategy '", name,
                                            "'; registered: ",
                                            absl::StrJoin(names(), ", ")));
  }
  if (!options.codec.empty()) {
    absl::Status valid = compression::ValidateCodecSpec(options.codec);
    if (!valid.ok()) {
      return absl::Status(valid.code(), absl::StrCat("--codec: ", valid.message()));
    }
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Strategy> strategy, it->second.factory(options));
  if (!options.codec.empty() && !strategy->compresses()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "strategy '", name, "' does not send its gradients through a codec (--codec ",
        options.codec, "); docs/compression.md lists the strategies that do"));
  }
  return strategy;
}

std::vector<std::string> StrategyRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& [name, entry] : entries_) out.push_back(name);
  return out;
}

std::string StrategyRegistry::Describe() const {
  std::string out;
  for (const auto& [name, entry] : entries_) {
    absl::StrAppend(&out, "  ", name, ": ", entry.summary, "\n");
  }
  return out;
}

}  // namespace rdmaflow::strategies
