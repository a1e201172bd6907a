// File: executor_setup.cc
// -----------------------------------------------------------------------------
// Executor set-up: connecting to peers, allocating and exchanging the
// regions of one plan generation, the dynamic-tensor pools, and re-planning
// after dynamic tracing.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph_analyzer/tracing.h"
#include "onesided/links/peer_links.h"
#include "runtime/executor.h"
#include "runtime/link_records.h"

namespace rdmaflow::runtime {
namespace {

bool Overlap(const TransferInfo& a, const TransferInfo& b) {
  return a.offset < b.offset + b.slot_bytes && b.offset < a.offset + a.slot_bytes;
}

bool HasDynamic(const plan::TransferPlan& plan) {
  for (const plan::LinkRegion& link : plan.link()) {
    for (const plan::TensorSlot& slot : link.slot()) {
      if (slot.kind() == plan::DYNAMIC) return true;
    }
  }
  return false;
}

}  // namespace

absl::Status Executor::SetUpPools() {
  bool dynamic_send = false;
  bool dynamic_recv = false;
  std::vector<bool> dynamic_from(rank_plan_.world_size(), false);
  for (const TransferInfo& info : rank_plan_.sends()) {
    dynamic_send |= info.dynamic;
  }
  for (const TransferInfo& info : rank_plan_.recvs()) {
    dynamic_recv |= info.dynamic;
    if (info.dynamic) dynamic_from[info.src_rank] = true;
  }
  if (dynamic_send) {
    ASSIGN_OR_RETURN(rdma::MemoryRegion pool,
                     transport_.Allocate(options_.dynamic_pool_bytes));
    source_pool_region_ = std::make_unique<rdma::MemoryRegion>(std::move(pool));
    source_pool_ = std::make_unique<PoolAllocator>(
        source_pool_region_->size(), plan().config().alignment());
    RETURN_IF_ERROR(engine_.links().Publish(
        {kExecutorPoolScope, kExecutorPoolLayout, {{"pool", source_pool_region_.get()}}}));
  }
  if (dynamic_recv) {
    ASSIGN_OR_RETURN(rdma::MemoryRegion pool,
                     transport_.Allocate(options_.dynamic_pool_bytes));
    dest_pool_region_ = std::make_shared<rdma::MemoryRegion>(std::move(pool));
    dest_pool_ = std::make_unique<PoolAllocator>(
        dest_pool_region_->size(), plan().config().alignment());
  }
  peer_source_pools_.resize(rank_plan_.world_size());
  for (int peer = 0; peer < rank_plan_.world_size(); ++peer) {
    if (!dynamic_from[peer]) continue;
    ASSIGN_OR_RETURN(onesided::PeerRegions pool,
                     engine_.links().Fetch({kExecutorPoolScope, kExecutorPoolLayout, {{"pool", nullptr}}},
                                           peer, absl::StrCat("the executor of rank ",
                                                              rank_plan_.rank())));
    // Prepared now, while the peer is known to hold it (Endpoint::Prepare).
    RETURN_IF_ERROR(engine_.endpoint(peer)->Prepare(pool.regions[0]));
    peer_source_pools_[peer] = std::make_unique<rdma::RemoteRegion>(std::move(pool.regions[0]));
  }
  return absl::OkStatus();
}

absl::Status Executor::SetUpGeneration() {
  const plan::TransferPlan& p = plan();
  // Publish everything first, then fetch: no rank waits on one that waits
  // on it.
  // Each receive link has a host region, a device region (its device
  // slots), or both.
  std::vector<std::shared_ptr<rdma::MemoryRegion>> recv_region(p.link_size());
  std::vector<std::shared_ptr<rdma::MemoryRegion>> recv_device_region(p.link_size());
  std::vector<const rdma::MemoryRegion*> credit_region(p.link_size());
  onesided::PeerLinks& links = engine_.links();
  for (int l : rank_plan_.recv_links()) {
    const plan::LinkRegion& link = p.link(l);
    onesided::RegionSet ours{ExecutorLinkScope(generation_, link), ExecutorLinkLayout(link), {}};
    if (link.region_bytes() > 0) {
      ASSIGN_OR_RETURN(rdma::MemoryRegion region,
                       transport_.Allocate(link.region_bytes()));
      recv_region[l] = std::make_shared<rdma::MemoryRegion>(std::move(region));
      ours.regions.push_back({"recv", recv_region[l].get()});
    }
    if (link.device_region_bytes() > 0) {
      absl::StatusOr<rdma::MemoryRegion> region =
          transport_.AllocateDevice(link.device_region_bytes());
      if (!region.ok()) {
        return absl::Status(
            region.status().code(),
            absl::StrCat("rank ", rank_plan_.rank(), " receives device slots from rank ",
                         link.src_rank(), " (", link.device_region_bytes(),
                         " bytes of device memory): ", region.status().message()));
      }
      recv_device_region[l] = std::make_shared<rdma::MemoryRegion>(*std::move(region));
      ours.regions.push_back({"recvdev", recv_device_region[l].get()});
    }
    RETURN_IF_ERROR(links.Publish(ours));
  }
  for (int l : rank_plan_.send_links()) {
    const plan::LinkRegion& link = p.link(l);
    ASSIGN_OR_RETURN(rdma::MemoryRegion region,
                     transport_.Allocate(8 * link.slot_size()));
    credit_regions_.push_back(
        std::make_unique<rdma::MemoryRegion>(std::move(region)));
    credit_region[l] = credit_regions_.back().get();
    RETURN_IF_ERROR(links.Publish({ExecutorLinkScope(generation_, link),
                                   ExecutorLinkLayout(link), {{"credit", credit_region[l]}}}));
  }
  if (generation_ == 0) RETURN_IF_ERROR(SetUpPools());
  // The previous generation's writers are idle: Replan() drained them.
  std::vector<size_t> credit_base(p.link_size(), 0);
  size_t credit_words = 0;
  for (int l : rank_plan_.recv_links()) {
    credit_base[l] = 8 * credit_words;
    credit_words += p.link(l).slot_size();
  }
  ASSIGN_OR_RETURN(rdma::MemoryRegion credit_out,
                   transport_.Allocate(8 * std::max<size_t>(1, credit_words)));
  credit_out_ = std::make_unique<rdma::MemoryRegion>(std::move(credit_out));
  size_t meta_bytes = 0;
  for (const TransferInfo& info : rank_plan_.sends()) {
    if (info.dynamic) meta_bytes += info.slot_bytes * info.depth;
  }
  meta_out_.reset();
  if (meta_bytes > 0) {
    ASSIGN_OR_RETURN(rdma::MemoryRegion meta, transport_.Allocate(meta_bytes));
    meta_out_ = std::make_unique<rdma::MemoryRegion>(std::move(meta));
  }

  std::vector<const rdma::RemoteRegion*> remote(p.link_size(), nullptr);
  std::vector<const rdma::RemoteRegion*> remote_device(p.link_size(), nullptr);
  const std::string what = absl::StrCat("the executor of rank ", rank_plan_.rank(),
                                        " (plan generation ", generation_, ")");
  for (int l : rank_plan_.send_links()) {
    const plan::LinkRegion& link = p.link(l);
    onesided::RegionSet theirs{ExecutorLinkScope(generation_, link), ExecutorLinkLayout(link),
                               {}};
    if (link.region_bytes() > 0) theirs.regions.push_back({"recv", nullptr});
    if (link.device_region_bytes() > 0) theirs.regions.push_back({"recvdev", nullptr});
    ASSIGN_OR_RETURN(onesided::PeerRegions fetched, links.Fetch(theirs, link.dst_rank(), what));
    for (size_t i = 0; i < fetched.regions.size(); ++i) {
      rdma::RemoteRegion& region = fetched.regions[i];
      const bool device = theirs.regions[i].first == "recvdev";
      RETURN_IF_ERROR(onesided::CheckRegionBytes(
          region, device ? link.device_region_bytes() : link.region_bytes(),
          device ? "its device receive region" : "its receive region", what));
      RETURN_IF_ERROR(engine_.endpoint(link.dst_rank())->Prepare(region));
      remote_regions_.push_back(std::make_unique<rdma::RemoteRegion>(std::move(region)));
      (device ? remote_device : remote)[l] =
          remote_regions_.back().get();
    }
  }
  for (int l : rank_plan_.recv_links()) {
    const plan::LinkRegion& link = p.link(l);
    ASSIGN_OR_RETURN(onesided::PeerRegions fetched,
                     links.Fetch({ExecutorLinkScope(generation_, link), ExecutorLinkLayout(link),
                                  {{"credit", nullptr}}},
                                 link.src_rank(), what));
    RETURN_IF_ERROR(onesided::CheckRegionBytes(fetched.regions[0], 8 * link.slot_size(),
                                               "its credit words", what));
    RETURN_IF_ERROR(engine_.endpoint(link.src_rank())->Prepare(fetched.regions[0]));
    remote_regions_.push_back(std::make_unique<rdma::RemoteRegion>(std::move(fetched.regions[0])));
    remote[l] = remote_regions_.back().get();
  }
  credit_writers_.clear();
  credit_writers_.resize(p.link_size());
  for (int l : rank_plan_.recv_links()) {
    const plan::LinkRegion& link = p.link(l);
    onesided::CreditWriter::Options credits;
    credits.words = link.slot_size();
    credits.peer = absl::StrCat("rank ", link.src_rank());
    credits.endpoint = engine_.endpoint(link.src_rank());
    credits.source = credit_out_.get();
    credits.source_offset = credit_base[l];
    credits.remote = remote[l];
    credits.started = [this, peer = link.src_rank()] { engine_.Started(peer); };
    // The write's completion may come after the executor went.
    credits.completed = [this, alive = std::weak_ptr<int>(alive_), peer = link.src_rank()] {
      if (!alive.expired()) engine_.Completed(peer);
    };
    credit_writers_[l] = std::make_unique<onesided::CreditWriter>(std::move(credits));
  }

  // Sender state.
  sends_.clear();
  send_by_id_.assign(0, -1);
  size_t meta_offset = 0;
  for (const TransferInfo& info : rank_plan_.sends()) {
    auto slot = std::make_unique<internal::SendSlot>();
    slot->info = info;
    slot->endpoint = engine_.endpoint(info.dst_rank);
    slot->remote = info.device ? remote_device[info.link] : remote[info.link];
    slot->credit = reinterpret_cast<const uint64_t*>(
        credit_region[info.link]->data() + 8 * info.slot_index);
    if (info.dynamic) {
      slot->meta_offset = meta_offset;
      meta_offset += info.slot_bytes * info.depth;
    }
    if (info.id >= static_cast<int>(send_by_id_.size())) {
      send_by_id_.resize(info.id + 1, -1);
    }
    send_by_id_[info.id] = static_cast<int>(sends_.size());
    sends_.push_back(std::move(slot));
  }
  // Shared slots: a write must wait for the earlier occupant's release.
  for (auto& a : sends_) {
    for (const auto& b : sends_) {
      // Host and device slots lie in regions of their own: never shared.
      if (a == b || a->info.link != b->info.link || a->info.device != b->info.device ||
          !Overlap(a->info, b->info)) {
        continue;
      }
      a->overlaps.emplace_back(b.get(),
                               b->info.live_begin < a->info.live_begin);
    }
  }

  // Receiver state.
  recvs_.clear();
  recv_by_id_.assign(0, -1);
  recv_by_notification_.assign(rank_plan_.world_size(), {});
  for (const TransferInfo& info : rank_plan_.recvs()) {
    auto slot = std::make_shared<internal::RecvSlot>();
    slot->info = info;
    slot->region = info.device ? recv_device_region[info.link] : recv_region[info.link];
    slot->endpoint = engine_.endpoint(info.src_rank);
    slot->credits = credit_writers_[info.link].get();
    slot->dirty = dirty_;
    if (info.dynamic) {
      slot->source_pool = peer_source_pools_[info.src_rank].get();
      slot->dest_region = dest_pool_region_;
    }
    if (info.id >= static_cast<int>(recv_by_id_.size())) {
      recv_by_id_.resize(info.id + 1, -1);
    }
    recv_by_id_[info.id] = static_cast<int>(recvs_.size());
    std::vector<int>& by_slot = recv_by_notification_[info.src_rank];
    if (info.slot_index >= static_cast<int>(by_slot.size())) {
      by_slot.resize(info.slot_index + 1, -1);
    }
    by_slot[info.slot_index] = static_cast<int>(recvs_.size());
    recvs_.push_back(std::move(slot));
  }
  return absl::OkStatus();
}

absl::Status Executor::Replan() {
  if (!HasDynamic(plan())) return absl::OkStatus();
  plan::SizeTrace trace;
  for (const auto& [tensor, shapes] : observed_) {
    plan::SizeTrace::Observation* obs = trace.add_observation();
    obs->set_tensor(tensor);
    for (const std::vector<int64_t>& shape : shapes) {
      auto* step = obs->add_step();
      for (int64_t d : shape) step->add_dim(d);
    }
  }
  graph::TracingOptions tracing;
  tracing.min_steps = options_.trace_steps;
  ASSIGN_OR_RETURN(plan::TransferPlan next,
                   graph::PromoteStableTensors(plan(), trace, tracing));
  ASSIGN_OR_RETURN(RankPlan next_rank_plan,
                   RankPlan::Create(next, rank_plan_.rank()));
  // Every rank re-plans at the same step: finish what is in flight, then
  // wait for all, so that no old-generation write lands after the switch.
  RETURN_IF_ERROR(Drain());
  RETURN_IF_ERROR(engine_.Barrier(absl::StrCat("replan/g", generation_)));
  for (auto& slot : recvs_) {
    slot->retired = true;
    retired_.push_back(slot);
  }
  rank_plan_ = std::move(next_rank_plan);
  promoted_.assign(next.promoted_tensor().begin(), next.promoted_tensor().end());
  // Every source was read before the readers reached the barrier.
  if (source_pool_ != nullptr) {
    source_pool_ = std::make_unique<PoolAllocator>(
        source_pool_region_->size(), plan().config().alignment());
  }
  ++generation_;
  generation_start_step_ = step_;
  return SetUpGeneration();
}

}  // namespace rdmaflow::runtime
