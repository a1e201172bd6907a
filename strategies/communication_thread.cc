// File: communication_thread.cc
#include "strategies/communication_thread.h"

#include <exception>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace rdmaflow::strategies {
namespace {

// Each wait of the serving phase: it ends at Stop() long before this; the
// deadline only bounds one wait, and the next begins at once.
constexpr absl::Duration kServeWait = absl::Seconds(1);

}  // namespace

CommunicationThread::CommunicationThread(onesided::ProgressLoop& loop, std::string what)
    : loop_(loop), what_(std::move(what)) {}

CommunicationThread::~CommunicationThread() {
  if (running()) Stop().IgnoreError();
}

absl::Status CommunicationThread::Start(absl::AnyInvocable<absl::Status()> work) {
  if (running()) {
    return absl::FailedPreconditionError(
        absl::StrCat(what_, ": started while the last one still runs; Stop() it first"));
  }
  stop_.store(false, std::memory_order_release);
  status_ = absl::OkStatus();
  work_begin_ = work_end_ = absl::InfinitePast();
  try {
    thread_ = std::thread([this, work = std::move(work)]() mutable { Run(work); });
  } catch (const std::system_error& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot start a thread for ", what_, ": ", e.what(),
                     " (check the process's thread limit, or train with overlap=off)"));
  }
  return absl::OkStatus();
}

void CommunicationThread::Run(absl::AnyInvocable<absl::Status()>& work) {
  loop_.AdoptOnCurrentThread();
  work_begin_ = absl::Now();
  // Nothing may escape a thread of ours: the work's and the serving's
  // exceptions (a handler of the loop's that throws) end it with kInternal.
  try {
    status_ = work();
    work_end_ = absl::Now();
    if (status_.ok()) Serve();
  } catch (const std::exception& e) {
    status_ = absl::InternalError(absl::StrCat(what_, " threw: ", e.what()));
  } catch (...) {
    status_ = absl::InternalError(absl::StrCat(what_, " threw an unknown exception"));
  }
  if (work_end_ < work_begin_) work_end_ = absl::Now();
}

void CommunicationThread::Serve() {
  // Serve the peers until the caller wants the loop back. A wait that
  // times out begins again; one that fails (the loop's failure, which the
  // caller's next wait reports) ends the serving.
  auto stopping = [this] { return stop_.load(std::memory_order_acquire); };
  while (!stopping()) {
    absl::Status waited = loop_.WaitUntil(stopping, absl::Now() + kServeWait,
                                          [this] { return absl::StrCat(what_, "'s end"); });
    if (!waited.ok() && !absl::IsDeadlineExceeded(waited)) return;
  }
}

absl::Status CommunicationThread::Stop() {
  if (!running()) return absl::OkStatus();
  stop_.store(true, std::memory_order_release);
  // Over UCX TCP the thread sleeps in the transport's wait between
  // arrivals (up to the policy's max_sleep, at least 200 us, plus the
  // timer slack): wake it for the flag. Transports without an interrupt
  // (ibverbs with events=1) still end that sleep at its bound.
  loop_.InterruptWait();
  thread_.join();
  loop_.AdoptOnCurrentThread();
  return status_;
}

}  // namespace rdmaflow::strategies
