#include "torch_backend/direct_collectives.h"

#include <cstring>
#include <memory>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace rdmaflow::torch_backend {
namespace {

constexpr size_t kMaxRecord = 4096;

}  // namespace

absl::Status Await(runtime::Messenger& messenger, absl::FunctionRef<bool()> done,
                   absl::Time deadline, absl::string_view what) {
  const absl::Time start = absl::Now();
  while (!done()) {
    RETURN_IF_ERROR(messenger.Progress());
    if (done()) break;
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("rank ", messenger.rank(), " timed out after ",
                       absl::FormatDuration(absl::Now() - start), " waiting for ",
                       what, " (are all ranks making the same calls?)"));
    }
    // Ranks may share cores with their peers.
    std::this_thread::yield();
  }
  return absl::OkStatus();
}

struct DirectCollectives::Batch {
  uint64_t tag;
  int pending = 0;
  absl::Status failure;

  // The outcome of posting one operation: one that was refused will never
  // complete.
  void Posted(absl::Status posted) {
    if (posted.ok()) return;
    --pending;
    failure.Update(std::move(posted));
  }
  runtime::Messenger::SendDone Sent() {
    ++pending;
    return [this](absl::Status s) {
      --pending;
      failure.Update(s);
    };
  }
  // A receive that must bring exactly `bytes`.
  runtime::Messenger::RecvDone Received(int from, size_t bytes) {
    ++pending;
    return [this, from, bytes](absl::StatusOr<size_t> got) {
      --pending;
      if (!got.ok()) {
        failure.Update(got.status());
      } else if (*got != bytes) {
        failure.Update(absl::InvalidArgumentError(absl::StrCat(
            "rank ", from, " sent ", *got, " bytes where ", bytes,
            " were expected; do all ranks pass tensors of the same size?")));
      }
    };
  }
};

DirectCollectives::DirectCollectives(runtime::Messenger& messenger,
                                     absl::Duration timeout)
    : messenger_(messenger), timeout_(timeout) {}

absl::Status DirectCollectives::Finish(Batch& batch, absl::string_view what) {
  // Posting errors (a dead peer) leave earlier posts pending: wait for them
  // all the same, so no buffer is released while a transfer still uses it.
  RETURN_IF_ERROR(Await(messenger_, [&] { return batch.pending == 0; },
                        absl::Now() + timeout_, what));
  return batch.failure;
}

absl::Status DirectCollectives::CheckRoot(int root, absl::string_view what) const {
  if (root < 0 || root >= messenger_.world()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " root ", root,
                                                   " is outside a world of ",
                                                   messenger_.world()));
  }
  return absl::OkStatus();
}

absl::Status DirectCollectives::CheckPerRank(size_t buffers, absl::string_view what) const {
  if (static_cast<int>(buffers) != messenger_.world()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " needs one buffer per rank (", messenger_.world(), "), got ", buffers));
  }
  return absl::OkStatus();
}

absl::Status DirectCollectives::Broadcast(int root, void* data, size_t bytes) {
  const int rank = messenger_.rank();
  const int world = messenger_.world();
  RETURN_IF_ERROR(CheckRoot(root, "broadcast"));
  Batch batch{NextTag()};
  if (rank == root) {
    for (int peer = 0; peer < world; ++peer) {
      if (peer == rank) continue;
      batch.Posted(messenger_.Send(peer, batch.tag, data, bytes, batch.Sent()));
    }
  } else {
    batch.Posted(
        messenger_.Recv(root, batch.tag, data, bytes, batch.Received(root, bytes)));
  }
  return Finish(batch, absl::StrCat("broadcast from rank ", root));
}

absl::Status DirectCollectives::Reduce(int root, void* data, size_t count,
                                       collectives::DataType type,
                                       collectives::ReduceOp op) {
  const int rank = messenger_.rank();
  const int world = messenger_.world();
  RETURN_IF_ERROR(CheckRoot(root, "reduce"));
  const size_t bytes = count * collectives::ElementSize(type);
  std::vector<std::unique_ptr<std::byte[]>> parts(world);
  Batch batch{NextTag()};
  if (rank != root) {
    batch.Posted(messenger_.Send(root, batch.tag, data, bytes, batch.Sent()));
    return Finish(batch, absl::StrCat("reduce to rank ", root));
  }
  for (int peer = 0; peer < world; ++peer) {
    if (peer == rank) continue;
    parts[peer] = std::make_unique<std::byte[]>(bytes);
    batch.Posted(messenger_.Recv(peer, batch.tag, parts[peer].get(), bytes,
                                 batch.Received(peer, bytes)));
  }
  RETURN_IF_ERROR(Finish(batch, "reduce"));
  if (bytes == 0) return absl::OkStatus();
  // In rank order, as a local loop over the ranks' data would.
  std::vector<std::byte> mine(static_cast<std::byte*>(data),
                              static_cast<std::byte*>(data) + bytes);
  auto part = [&](int r) -> const void* {
    return r == rank ? mine.data() : parts[r].get();
  };
  std::memcpy(data, part(0), bytes);
  for (int r = 1; r < world; ++r) collectives::Reduce(type, op, data, part(r), count);
  return absl::OkStatus();
}

absl::Status DirectCollectives::Gather(int root, const void* input, size_t bytes,
                                       const std::vector<void*>& outputs) {
  const int rank = messenger_.rank();
  RETURN_IF_ERROR(CheckRoot(root, "gather"));
  Batch batch{NextTag()};
  if (rank != root) {
    batch.Posted(messenger_.Send(root, batch.tag, input, bytes, batch.Sent()));
    return Finish(batch, absl::StrCat("gather to rank ", root));
  }
  RETURN_IF_ERROR(CheckPerRank(outputs.size(), "gather"));
  for (int peer = 0; peer < messenger_.world(); ++peer) {
    if (peer == rank) continue;
    batch.Posted(messenger_.Recv(peer, batch.tag, outputs[peer], bytes,
                                 batch.Received(peer, bytes)));
  }
  if (outputs[rank] != input && bytes > 0) std::memcpy(outputs[rank], input, bytes);
  return Finish(batch, "gather");
}

absl::Status DirectCollectives::Scatter(int root, const std::vector<const void*>& inputs,
                                        void* output, size_t bytes) {
  const int rank = messenger_.rank();
  RETURN_IF_ERROR(CheckRoot(root, "scatter"));
  Batch batch{NextTag()};
  if (rank != root) {
    batch.Posted(messenger_.Recv(root, batch.tag, output, bytes, batch.Received(root, bytes)));
    return Finish(batch, absl::StrCat("scatter from rank ", root));
  }
  RETURN_IF_ERROR(CheckPerRank(inputs.size(), "scatter"));
  for (int peer = 0; peer < messenger_.world(); ++peer) {
    if (peer == rank) continue;
    batch.Posted(messenger_.Send(peer, batch.tag, inputs[peer], bytes, batch.Sent()));
  }
  if (inputs[rank] != output && bytes > 0) std::memcpy(output, inputs[rank], bytes);
  return Finish(batch, "scatter");
}

absl::Status DirectCollectives::AllGather(const void* input, size_t bytes,
                                          const std::vector<void*>& outputs) {
  const int rank = messenger_.rank();
  const int world = messenger_.world();
  RETURN_IF_ERROR(CheckPerRank(outputs.size(), "all-gather"));
  Batch batch{NextTag()};
  for (int peer = 0; peer < world; ++peer) {
    if (peer == rank) continue;
    batch.Posted(messenger_.Send(peer, batch.tag, input, bytes, batch.Sent()));
    batch.Posted(messenger_.Recv(peer, batch.tag, outputs[peer], bytes,
                                         batch.Received(peer, bytes)));
  }
  if (outputs[rank] != input && bytes > 0) std::memcpy(outputs[rank], input, bytes);
  return Finish(batch, "all-gather");
}

absl::Status DirectCollectives::ReduceScatter(const std::vector<const void*>& inputs,
                                              void* output, size_t count,
                                              collectives::DataType type,
                                              collectives::ReduceOp op) {
  const int rank = messenger_.rank();
  const int world = messenger_.world();
  RETURN_IF_ERROR(CheckPerRank(inputs.size(), "reduce-scatter"));
  const size_t bytes = count * collectives::ElementSize(type);
  std::vector<std::unique_ptr<std::byte[]>> parts(world);
  Batch batch{NextTag()};
  for (int peer = 0; peer < world; ++peer) {
    if (peer == rank) continue;
    parts[peer] = std::make_unique<std::byte[]>(bytes);
    batch.Posted(
        messenger_.Send(peer, batch.tag, inputs[peer], bytes, batch.Sent()));
    batch.Posted(messenger_.Recv(peer, batch.tag, parts[peer].get(), bytes,
                                         batch.Received(peer, bytes)));
  }
  RETURN_IF_ERROR(Finish(batch, "reduce-scatter"));
  // In rank order, as a local loop over the ranks' inputs would.
  auto part = [&](int r) -> const void* {
    return r == rank ? inputs[rank] : parts[r].get();
  };
  if (bytes == 0) return absl::OkStatus();
  std::memmove(output, part(0), bytes);
  for (int r = 1; r < world; ++r) collectives::Reduce(type, op, output, part(r), count);
  return absl::OkStatus();
}

absl::Status DirectCollectives::Barrier() {
  const int rank = messenger_.rank();
  Batch batch{NextTag()};
  for (int peer = 0; peer < messenger_.world(); ++peer) {
    if (peer == rank) continue;
    batch.Posted(messenger_.Send(peer, batch.tag, nullptr, 0, batch.Sent()));
    batch.Posted(
        messenger_.Recv(peer, batch.tag, nullptr, 0, batch.Received(peer, 0)));
  }
  return Finish(batch, "barrier");
}

absl::StatusOr<std::vector<std::string>> DirectCollectives::Exchange(
    const std::string& record) {
  if (record.size() > kMaxRecord) {
    return absl::InvalidArgumentError(absl::StrCat(
        "exchange record of ", record.size(), " bytes exceeds ", kMaxRecord));
  }
  const int rank = messenger_.rank();
  const int world = messenger_.world();
  std::vector<std::string> records(world, std::string(kMaxRecord, '\0'));
  std::vector<size_t> sizes(world, 0);
  records[rank] = record;
  Batch batch{NextTag()};
  for (int peer = 0; peer < world; ++peer) {
    if (peer == rank) continue;
    batch.Posted(
        messenger_.Send(peer, batch.tag, record.data(), record.size(), batch.Sent()));
    ++batch.pending;
    batch.Posted(messenger_.Recv(
        peer, batch.tag, records[peer].data(), kMaxRecord,
        [&batch, &sizes, peer](absl::StatusOr<size_t> got) {
          --batch.pending;
          if (got.ok()) {
            sizes[peer] = *got;
          } else {
            batch.failure.Update(got.status());
          }
        }));
  }
  RETURN_IF_ERROR(Finish(batch, "exchange"));
  for (int peer = 0; peer < world; ++peer) {
    if (peer != rank) records[peer].resize(sizes[peer]);
  }
  return records;
}

}  // namespace rdmaflow::torch_backend
