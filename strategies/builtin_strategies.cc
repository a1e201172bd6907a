// File: builtin_strategies.cc
#include "strategies/builtin_strategies.h"

#include "common/status_macros.h"
#include "strategies/allreduce/allreduce_strategy.h"
#include "strategies/gossip/gossip_strategy.h"
#include "strategies/layer_separated/layer_separated_strategy.h"
#include "strategies/moshpit/moshpit_strategy.h"
#include "strategies/ps/ps_strategy.h"

namespace rdmaflow::strategies {

absl::Status RegisterBuiltinStrategies(StrategyRegistry& registry) {
  RETURN_IF_ERROR(registry.Register(
      "ps",
      "parameter servers (ranks 0..servers-1) with bsp, asp, ssp:S or "
      "dssp:LOW:HIGH; params servers=, sync=, pull=read|send, copies=",
      [](const StrategyOptions& options)
          -> absl::StatusOr<std::unique_ptr<Strategy>> {
        ASSIGN_OR_RETURN(auto strategy, ps::PsStrategy::Create(options));
        return std::unique_ptr<Strategy>(std::move(strategy));
      }));
  RETURN_IF_ERROR(registry.Register(
      "allreduce",
      "synchronous data parallelism: every rank a replica, gradients summed "
      "by the ring all-reduce; params bucket_bytes=, chunk_bytes=, slots=",
      [](const StrategyOptions& options)
          -> absl::StatusOr<std::unique_ptr<Strategy>> {
        ASSIGN_OR_RETURN(auto strategy, AllReduceStrategy::Create(options));
        return std::unique_ptr<Strategy>(std::move(strategy));
      }));
  RETURN_IF_ERROR(registry.Register(
      "gossip",
      "gossiping SGD: local SGD, then mix with one peer's parameters read "
      "one-sidedly from its versioned buffer; params beta=, period=, "
      "topology=random|ring, copies=, seed=",
      [](const StrategyOptions& options)
          -> absl::StatusOr<std::unique_ptr<Strategy>> {
        ASSIGN_OR_RETURN(auto strategy, gossip::GossipStrategy::Create(options));
        return std::unique_ptr<Strategy>(std::move(strategy));
      }));
  RETURN_IF_ERROR(registry.Register(
      "moshpit",
      "Moshpit All-Reduce: local SGD, then average within a group of an M^d "
      "grid that changes each round (formed through the store with a "
      "timeout, so missing peers shrink it); params side=, dims=, period=, "
      "group_timeout_ms=, round_timeout_ms=",
      [](const StrategyOptions& options)
          -> absl::StatusOr<std::unique_ptr<Strategy>> {
        ASSIGN_OR_RETURN(auto strategy, moshpit::MoshpitStrategy::Create(options));
        return std::unique_ptr<Strategy>(std::move(strategy));
      }));
  RETURN_IF_ERROR(registry.Register(
      "layer_separated",
      "Stanza: ranks 0..C-1 train the conv layers (all-reducing their "
      "gradients), the last K the FC layers; activations and their gradients "
      "cross by one-sided writes (in device slots with device parameters); "
      "params fc_ranks= (default: cost model), bucket_bytes=, chunk_bytes=, slots=, "
      "overlap=off|on, activations=auto|host",
      [](const StrategyOptions& options)
          -> absl::StatusOr<std::unique_ptr<Strategy>> {
        ASSIGN_OR_RETURN(auto strategy,
                         layer_separated::LayerSeparatedStrategy::Create(options));
        return std::unique_ptr<Strategy>(std::move(strategy));
      }));
  return absl::OkStatus();
}

}  // namespace rdmaflow::strategies
