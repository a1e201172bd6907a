// File: background_exchange.cc
#include "sim/internal/background_exchange.h"

#include <utility>

namespace rdmaflow::sim::internal {

BackgroundExchanges::BackgroundExchanges(Job& job)
    : job_(job),
      running_(job.ranks(), false),
      landed_(job.ranks(), false),
      serving_(job.ranks(), false),
      on_end_(job.ranks()) {}

void BackgroundExchanges::AfterEnd(int rank, std::function<void(bool landed)> then) {
  if (running_[rank]) {
    const double begin = job_.now();
    on_end_[rank] = [this, rank, begin, then = std::move(then)] {
      if (rank == job_.reporter()) job_.log().wait += job_.now() - begin;
      AfterEnd(rank, then);
    };
    return;
  }
  // The communication thread stops here (CommunicationThread::Stop): it
  // served the peers from its exchange's start until now.
  if (serving_[rank]) {
    serving_[rank] = false;
    job_.Serve(rank, false);
  }
  const bool landed = landed_[rank];
  landed_[rank] = false;
  then(landed);
}

void BackgroundExchanges::AfterUpdate(int rank, double land, bool due, double copy,
                                      Exchange exchange, std::function<void()> next) {
  AfterEnd(rank, [=](bool landed) {
    job_.Work(rank, landed ? land : 0, [=] {
      if (!due) {
        next();
        return;
      }
      job_.Work(rank, copy, [=] {
        Start(rank, exchange);
        next();
      });
    });
  });
}

void BackgroundExchanges::Start(int rank, Exchange exchange) {
  const double begin = job_.now();
  running_[rank] = true;
  serving_[rank] = true;
  job_.Serve(rank, true);
  exchange([this, rank, begin](bool landed) {
    if (rank == job_.reporter()) job_.log().comm += job_.now() - begin;
    running_[rank] = false;
    landed_[rank] = landed;
    if (on_end_[rank]) std::exchange(on_end_[rank], nullptr)();
  });
}

void BackgroundExchanges::Leave(int rank) {
  if (running_[rank]) {
    on_end_[rank] = [this, rank] { Leave(rank); };
    return;
  }
  if (serving_[rank]) {
    serving_[rank] = false;
    job_.Serve(rank, false);
  }
  job_.Leave(rank);
}

}  // namespace rdmaflow::sim::internal
