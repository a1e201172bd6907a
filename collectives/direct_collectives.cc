#include "collectives/direct_collectives.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace rdmaflow::collectives {
namespace {

constexpr size_t kMaxRecord = 4096;

}  // namespace

struct DirectCollectives::Batch {
  // One send or receive of the call.
  struct Op {
    onesided::Messenger::OpId id = 0;
    int peer;
    bool send;
    bool done = false;
  };

  uint64_t tag;
  int pending = 0;
  absl::Status failure;
  std::vector<Op> ops;

  // The outcome of posting the last operation: one that was refused will
  // never complete.
  void Posted(absl::StatusOr<onesided::Messenger::OpId> posted) {
    if (posted.ok()) {
      ops.back().id = *posted;
      return;
    }
    --pending;
    ops.back().done = true;
    failure.Update(posted.status());
  }
  onesided::Messenger::SendDone Sent(int to) {
    const size_t index = Add(to, /*send=*/true);
    return [this, index](absl::Status s) {
      Finished(index);
      failure.Update(s);
    };
  }
  // A receive that must bring exactly `bytes`.
  onesided::Messenger::RecvDone Received(int from, size_t bytes) {
    const size_t index = Add(from, /*send=*/false);
    return [this, index, from, bytes](absl::StatusOr<size_t> got) {
      Finished(index);
      if (!got.ok()) {
        failure.Update(got.status());
      } else if (*got != bytes) {
        failure.Update(absl::InvalidArgumentError(absl::StrCat(
            "rank ", from, " sent ", *got, " bytes where ", bytes,
            " were expected; do all ranks pass tensors of the same size?")));
      }
    };
  }
  // A receive whose completion the caller handles.
  onesided::Messenger::RecvDone Received(
      int from, absl::AnyInvocable<void(absl::StatusOr<size_t>)> on_done) {
    const size_t index = Add(from, /*send=*/false);
    return [this, index, on_done = std::move(on_done)](
               absl::StatusOr<size_t> got) mutable {
      Finished(index);
      on_done(std::move(got));
    };
  }
  // What is still outstanding, for an error message.
  std::string Outstanding() const {
    std::vector<std::string> parts;
    for (const Op& op : ops) {
      if (!op.done) {
        parts.push_back(absl::StrCat(op.send ? "send to rank " : "receive from rank ",
                                     op.peer));
      }
    }
    return absl::StrJoin(parts, ", ");
  }

 private:
  size_t Add(int peer, bool send) {
    ++pending;
    ops.push_back({0, peer, send});
    return ops.size() - 1;
  }
  void Finished(size_t index) {
    --pending;
    ops[index].done = true;
  }
};

DirectCollectives::DirectCollectives(onesided::Messenger& messenger,
                                     absl::Duration timeout)
    : messenger_(messenger),
      timeout_(timeout),
      members_(messenger.members()),
      position_(static_cast<int>(
          std::find(members_.begin(), members_.end(), messenger.rank()) - members_.begin())) {}

absl::Status DirectCollectives::Finish(Batch& batch, absl::string_view what) {
  // Posting errors (a dead peer) leave earlier posts pending: wait for them
  // all the same.
  absl::Status waited = messenger_.ProgressUntil(
      [&] { return batch.pending == 0; }, absl::Now() + timeout_,
      absl::StrCat(what, " (are all ranks making the same calls?)"));
  if (!waited.ok()) {
    // Giving up: the buffers of this call (the caller's, and `parts` on our
    // stack) are released when we return, so the messenger must let go of
    // every operation still outstanding first.
    if (absl::IsDeadlineExceeded(waited)) {
      waited = absl::DeadlineExceededError(
          absl::StrCat(waited.message(), "; still outstanding: ", batch.Outstanding()));
    }
    for (const Batch::Op& op : batch.ops) {
      if (!op.done && op.id != 0) messenger_.Abandon(op.id, waited);
    }
    return waited;
  }
  return batch.failure;
}

absl::Status DirectCollectives::CheckRoot(int root, absl::string_view what) const {
  if (std::find(members_.begin(), members_.end(), root) == members_.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " root ", root,
        members_.size() == static_cast<size_t>(messenger_.world())
            ? absl::StrCat(" is outside a world of ", messenger_.world())
            : absl::StrCat(" is not a member (", absl::StrJoin(members_, ","), ")")));
  }
  return absl::OkStatus();
}

absl::Status DirectCollectives::CheckPerRank(size_t buffers, absl::string_view what) const {
  if (static_cast<int>(buffers) != size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " needs one buffer per rank (", size(), "), got ", buffers));
  }
  return absl::OkStatus();
}

absl::Status DirectCollectives::Broadcast(int root, void* data, size_t bytes) {
  const int rank = messenger_.rank();
  const int me = position_;
  const int world = size();
  RETURN_IF_ERROR(CheckRoot(root, "broadcast"));
  Batch batch{NextTag()};
  if (rank == root) {
    for (int i = 0; i < world; ++i) {
      if (i == me) continue;
      const int peer = members_[i];
      batch.Posted(messenger_.Send(peer, batch.tag, data, bytes, batch.Sent(peer)));
    }
  } else {
    batch.Posted(
        messenger_.Recv(root, batch.tag, data, bytes, batch.Received(root, bytes)));
  }
  return Finish(batch, absl::StrCat("broadcast from rank ", root));
}

absl::Status DirectCollectives::Reduce(int root, void* data, size_t count,
                                       DataType type,
                                       ReduceOp op) {
  const int rank = messenger_.rank();
  const int me = position_;
  const int world = size();
  RETURN_IF_ERROR(CheckRoot(root, "reduce"));
  const size_t bytes = count * ElementSize(type);
  std::vector<std::unique_ptr<std::byte[]>> parts(world);
  Batch batch{NextTag()};
  if (rank != root) {
    batch.Posted(messenger_.Send(root, batch.tag, data, bytes, batch.Sent(root)));
    return Finish(batch, absl::StrCat("reduce to rank ", root));
  }
  for (int i = 0; i < world; ++i) {
    if (i == me) continue;
    const int peer = members_[i];
    parts[i] = std::make_unique<std::byte[]>(bytes);
    batch.Posted(messenger_.Recv(peer, batch.tag, parts[i].get(), bytes,
                                 batch.Received(peer, bytes)));
  }
  RETURN_IF_ERROR(Finish(batch, "reduce"));
  if (bytes == 0) return absl::OkStatus();
  // In member order, as a local loop over the members' data would.
  std::vector<std::byte> mine(static_cast<std::byte*>(data),
                              static_cast<std::byte*>(data) + bytes);
  auto part = [&](int r) -> const void* {
    return r == me ? mine.data() : parts[r].get();
  };
  std::memcpy(data, part(0), bytes);
  for (int r = 1; r < world; ++r) collectives::Reduce(type, op, data, part(r), count);
  return absl::OkStatus();
}

absl::Status DirectCollectives::Gather(int root, const void* input, size_t bytes,
                                       const std::vector<void*>& outputs) {
  const int rank = messenger_.rank();
  const int me = position_;
  RETURN_IF_ERROR(CheckRoot(root, "gather"));
  Batch batch{NextTag()};
  if (rank != root) {
    batch.Posted(messenger_.Send(root, batch.tag, input, bytes, batch.Sent(root)));
    return Finish(batch, absl::StrCat("gather to rank ", root));
  }
  RETURN_IF_ERROR(CheckPerRank(outputs.size(), "gather"));
  for (int i = 0; i < size(); ++i) {
    if (i == me) continue;
    const int peer = members_[i];
    batch.Posted(messenger_.Recv(peer, batch.tag, outputs[i], bytes,
                                 batch.Received(peer, bytes)));
  }
  if (outputs[me] != input && bytes > 0) std::memcpy(outputs[me], input, bytes);
  return Finish(batch, "gather");
}

absl::Status DirectCollectives::Scatter(int root, const std::vector<const void*>& inputs,
                                        void* output, size_t bytes) {
  const int rank = messenger_.rank();
  const int me = position_;
  RETURN_IF_ERROR(CheckRoot(root, "scatter"));
  Batch batch{NextTag()};
  if (rank != root) {
    batch.Posted(messenger_.Recv(root, batch.tag, output, bytes, batch.Received(root, bytes)));
    return Finish(batch, absl::StrCat("scatter from rank ", root));
  }
  RETURN_IF_ERROR(CheckPerRank(inputs.size(), "scatter"));
  for (int i = 0; i < size(); ++i) {
    if (i == me) continue;
    const int peer = members_[i];
    batch.Posted(messenger_.Send(peer, batch.tag, inputs[i], bytes, batch.Sent(peer)));
  }
  if (inputs[me] != output && bytes > 0) std::memcpy(output, inputs[me], bytes);
  return Finish(batch, "scatter");
}

absl::Status DirectCollectives::AllGather(const void* input, size_t bytes,
                                          const std::vector<void*>& outputs) {
  const int me = position_;
  const int world = size();
  RETURN_IF_ERROR(CheckPerRank(outputs.size(), "all-gather"));
  Batch batch{NextTag()};
  for (int i = 0; i < world; ++i) {
    if (i == me) continue;
    const int peer = members_[i];
    batch.Posted(messenger_.Send(peer, batch.tag, input, bytes, batch.Sent(peer)));
    batch.Posted(messenger_.Recv(peer, batch.tag, outputs[i], bytes,
                                         batch.Received(peer, bytes)));
  }
  if (outputs[me] != input && bytes > 0) std::memcpy(outputs[me], input, bytes);
  return Finish(batch, "all-gather");
}

absl::Status DirectCollectives::ReduceScatter(const std::vector<const void*>& inputs,
                                              void* output, size_t count,
                                              DataType type,
                                              ReduceOp op) {
  const int me = position_;
  const int world = size();
  RETURN_IF_ERROR(CheckPerRank(inputs.size(), "reduce-scatter"));
  const size_t bytes = count * ElementSize(type);
  std::vector<std::unique_ptr<std::byte[]>> parts(world);
  Batch batch{NextTag()};
  for (int i = 0; i < world; ++i) {
    if (i == me) continue;
    const int peer = members_[i];
    parts[i] = std::make_unique<std::byte[]>(bytes);
    batch.Posted(
        messenger_.Send(peer, batch.tag, inputs[i], bytes, batch.Sent(peer)));
    batch.Posted(messenger_.Recv(peer, batch.tag, parts[i].get(), bytes,
                                         batch.Received(peer, bytes)));
  }
  RETURN_IF_ERROR(Finish(batch, "reduce-scatter"));
  if (bytes == 0) return absl::OkStatus();
  // The output may be this member's own input (in place): the first part
  // written into it would overwrite it before its turn, so it is copied.
  const auto own = reinterpret_cast<uintptr_t>(inputs[me]);
  const auto out = reinterpret_cast<uintptr_t>(output);
  if (me != 0 && own < out + bytes && out < own + bytes) {
    parts[me] = std::make_unique<std::byte[]>(bytes);
    std::memcpy(parts[me].get(), inputs[me], bytes);
  }
  // In member order, as a local loop over the members' inputs would.
  auto part = [&](int r) -> const void* {
    return r == me && parts[me] == nullptr ? inputs[me] : parts[r].get();
  };
  std::memmove(output, part(0), bytes);
  for (int r = 1; r < world; ++r) collectives::Reduce(type, op, output, part(r), count);
  return absl::OkStatus();
}

absl::Status DirectCollectives::AllToAll(const std::vector<const void*>& inputs,
                                         const std::vector<size_t>& input_bytes,
                                         const std::vector<void*>& outputs,
                                         const std::vector<size_t>& output_bytes) {
  const int rank = messenger_.rank();
  const int me = position_;
  const int world = size();
  for (size_t n : {inputs.size(), input_bytes.size(), outputs.size(), output_bytes.size()}) {
    RETURN_IF_ERROR(CheckPerRank(n, "all-to-all"));
  }
  if (input_bytes[me] != output_bytes[me]) {
    return absl::InvalidArgumentError(absl::StrCat(
        "all-to-all on rank ", rank, ": its part for itself is ", input_bytes[me],
        " bytes, but it expects ", output_bytes[me], " from itself"));
  }
  Batch batch{NextTag()};
  for (int i = 0; i < world; ++i) {
    if (i == me) continue;
    const int peer = members_[i];
    batch.Posted(
        messenger_.Send(peer, batch.tag, inputs[i], input_bytes[i], batch.Sent(peer)));
    batch.Posted(messenger_.Recv(peer, batch.tag, outputs[i], output_bytes[i],
                                 batch.Received(peer, output_bytes[i])));
  }
  if (output_bytes[me] > 0 && outputs[me] != inputs[me]) {
    std::memmove(outputs[me], inputs[me], output_bytes[me]);
  }
  return Finish(batch, "all-to-all");
}

absl::Status DirectCollectives::Barrier() {
  const int me = position_;
  Batch batch{NextTag()};
  for (int i = 0; i < size(); ++i) {
    if (i == me) continue;
    const int peer = members_[i];
    batch.Posted(messenger_.Send(peer, batch.tag, nullptr, 0, batch.Sent(peer)));
    batch.Posted(
        messenger_.Recv(peer, batch.tag, nullptr, 0, batch.Received(peer, 0)));
  }
  return Finish(batch, "barrier");
}

absl::StatusOr<std::vector<size_t>> DirectCollectives::AllGatherV(
    const void* input, size_t bytes, const std::vector<void*>& outputs,
    const std::vector<size_t>& capacities) {
  const int me = position_;
  const int world = size();
  RETURN_IF_ERROR(CheckPerRank(outputs.size(), "all-gather"));
  RETURN_IF_ERROR(CheckPerRank(capacities.size(), "all-gather"));
  if (capacities[me] < bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "all-gather on rank ", messenger_.rank(), ": its own ", bytes,
        " bytes do not fit its output of ", capacities[me]));
  }
  std::vector<size_t> sizes(world, 0);
  sizes[me] = bytes;
  Batch batch{NextTag()};
  for (int i = 0; i < world; ++i) {
    if (i == me) continue;
    const int peer = members_[i];
    batch.Posted(messenger_.Send(peer, batch.tag, input, bytes, batch.Sent(peer)));
    batch.Posted(messenger_.Recv(
        peer, batch.tag, outputs[i], capacities[i],
        batch.Received(peer, [&batch, &sizes, i](absl::StatusOr<size_t> got) {
          if (got.ok()) {
            sizes[i] = *got;
          } else {
            batch.failure.Update(got.status());
          }
        })));
  }
  if (outputs[me] != input && bytes > 0) std::memcpy(outputs[me], input, bytes);
  RETURN_IF_ERROR(Finish(batch, "all-gather"));
  return sizes;
}

absl::StatusOr<std::vector<std::string>> DirectCollectives::Exchange(
    const std::string& record) {
  if (record.size() > kMaxRecord) {
    return absl::InvalidArgumentError(absl::StrCat(
        "exchange record of ", record.size(), " bytes exceeds ", kMaxRecord));
  }
  std::vector<std::string> records(size(), std::string(kMaxRecord, '\0'));
  std::vector<void*> outputs;
  for (std::string& r : records) outputs.push_back(r.data());
  ASSIGN_OR_RETURN(std::vector<size_t> sizes,
                   AllGatherV(record.data(), record.size(), outputs,
                              std::vector<size_t>(size(), kMaxRecord)));
  for (int i = 0; i < size(); ++i) records[i].resize(sizes[i]);
  return records;
}

}  // namespace rdmaflow::collectives
