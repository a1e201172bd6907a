// File: communication_thread.h
// -----------------------------------------------------------------------------
// CommunicationThread: a strategy's communication run on a thread of its
// own while the caller computes (issue 48, "overlap"). Start() hands the
// transport's progress loop to a new thread, which runs the work and then
// goes on progressing the loop until Stop(): a peer whose one-sided
// operations need this rank's progress (UCX over TCP emulates them with
// the target's) is served while the caller computes, not only while it
// communicates. Stop() joins the thread, takes the loop back and returns
// the work's status.
//
//   CommunicationThread thread(loop, "gossip rank 2's read of rank 3");
//   RETURN_IF_ERROR(thread.Start([&] { return reader.Read(scratch).status(); }));
//   ... compute: no call on the loop, its transport or its protocols ...
//   RETURN_IF_ERROR(thread.Stop());
//
// Stop() interrupts the thread's wait in the transport
// (ProgressLoop::InterruptWait), where over UCX TCP it sleeps between
// arrivals, so the thread sees the request at once.
//
// Between Start() and Stop() the caller must not use the loop, its
// transport or anything that waits through them. The work must not wait
// for the caller (the caller's compute does not progress anything), and
// every wait in it needs a deadline: Stop() joins the work, it cannot
// interrupt it.
// Nothing the work throws escapes the thread: it becomes kInternal.
#ifndef RDMAFLOW_STRATEGIES_COMMUNICATION_THREAD_H_
#define RDMAFLOW_STRATEGIES_COMMUNICATION_THREAD_H_

#include <atomic>
#include <string>
#include <thread>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "onesided/progress/progress_loop.h"

namespace rdmaflow::strategies {

// Thread-compatible: one thread calls Start() and Stop(), the one that owns
// the loop outside them.
class CommunicationThread {
 public:
  // `loop` must outlive this. `what` names the work in errors.
  CommunicationThread(onesided::ProgressLoop& loop, std::string what);
  // Stop()s a thread still running (its status is dropped).
  ~CommunicationThread();

  CommunicationThread(const CommunicationThread&) = delete;
  CommunicationThread& operator=(const CommunicationThread&) = delete;

  // Runs `work` on a new thread that holds the loop. kFailedPrecondition
  // while one runs (Stop() it first); kResourceExhausted when no thread can
  // be started (the loop stays the caller's).
  absl::Status Start(absl::AnyInvocable<absl::Status()> work);
  bool running() const { return thread_.joinable(); }

  // Ends the progressing, joins, and takes the loop back on this thread.
  // The work's status (after a failure of its own, the loop is not
  // progressed further); OK when nothing runs.
  absl::Status Stop();

  // When the last work began and ended: written by the thread, so read
  // them only after Stop().
  absl::Time work_begin() const { return work_begin_; }
  absl::Time work_end() const { return work_end_; }

 private:
  // The thread: the work, then Serve().
  void Run(absl::AnyInvocable<absl::Status()>& work);
  // Progresses the loop until stop_.
  void Serve();

  onesided::ProgressLoop& loop_;
  const std::string what_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  // Written by the thread, read after the join.
  absl::Status status_;
  absl::Time work_begin_;
  absl::Time work_end_;
};

}  // namespace rdmaflow::strategies

#endif  // RDMAFLOW_STRATEGIES_COMMUNICATION_THREAD_H_
