// File: replay.cc
#include "runtime/replay.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace rdmaflow::runtime {
namespace {

uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

uint64_t Word(uint64_t base, size_t index) {
  return base + index * 0x9E3779B97F4A7C15ULL;
}

uint64_t Base(uint64_t seed, int id, int64_t step) {
  return Mix(seed * 1000003 + static_cast<uint64_t>(id) * 7919 +
             static_cast<uint64_t>(step) * 104729 + 1);
}

}  // namespace

void FillPattern(uint64_t seed, int id, int64_t step, std::byte* data,
                 size_t bytes) {
  const uint64_t base = Base(seed, id, step);
  const size_t words = bytes / 8;
  for (size_t i = 0; i < words; ++i) {
    const uint64_t w = Word(base, i);
    std::memcpy(data + 8 * i, &w, 8);
  }
  const uint64_t tail = Word(base, words);
  std::memcpy(data + 8 * words, &tail, bytes % 8);
}

int64_t FindMismatch(uint64_t seed, int id, int64_t step, const std::byte* data,
                     size_t bytes) {
  const uint64_t base = Base(seed, id, step);
  const size_t words = bytes / 8;
  for (size_t i = 0; i < words; ++i) {
    const uint64_t w = Word(base, i);
    if (std::memcmp(data + 8 * i, &w, 8) != 0) {
      for (size_t b = 0; b < 8; ++b) {
        if (std::memcmp(data + 8 * i + b,
                        reinterpret_cast<const std::byte*>(&w) + b, 1) != 0) {
          return static_cast<int64_t>(8 * i + b);
        }
      }
    }
  }
  const uint64_t tail = Word(base, words);
  for (size_t b = 0; b < bytes % 8; ++b) {
    if (std::memcmp(data + 8 * words + b,
                    reinterpret_cast<const std::byte*>(&tail) + b, 1) != 0) {
      return static_cast<int64_t>(8 * words + b);
    }
  }
  return -1;
}

uint64_t SumWords(const std::byte* data, size_t bytes) {
  // A consumer reads at memory speed: 64 bytes a round into four 16-byte
  // accumulators (SSE2 on any x86-64; 2.7x the one-word loop at 64 KiB,
  // about memcpy's speed). The sum mod 2^64 does not depend on the order.
  typedef uint64_t Pair __attribute__((vector_size(16)));
  const size_t words = bytes / 8;
  Pair a = {0, 0}, b = {0, 0}, c = {0, 0}, d = {0, 0};
  size_t i = 0;
  for (; i + 8 <= words; i += 8) {
    Pair w[4];
    std::memcpy(w, data + 8 * i, sizeof(w));
    a += w[0];
    b += w[1];
    c += w[2];
    d += w[3];
  }
  const Pair all = a + b + c + d;
  uint64_t sum = all[0] + all[1];
  for (; i < words; ++i) {
    uint64_t w;
    std::memcpy(&w, data + 8 * i, 8);
    sum += w;
  }
  uint64_t tail = 0;
  if (bytes % 8 != 0) std::memcpy(&tail, data + 8 * words, bytes % 8);
  return sum + tail;
}

absl::StatusOr<std::unique_ptr<Replayer>> Replayer::Create(
    const plan::TransferPlan& plan, int rank, ReplayOptions options) {
  ASSIGN_OR_RETURN(RankPlan rank_plan, RankPlan::Create(plan, rank));
  RETURN_IF_ERROR(CheckHostMemoryOnly(rank_plan, "the replayer (it fills and checks tensors)"));
  if (!options.dynamic_dim) {
    options.dynamic_dim = [](const TransferInfo&, int64_t, int) -> int64_t {
      return 8;
    };
  }
  return std::unique_ptr<Replayer>(
      new Replayer(std::move(rank_plan), std::move(options)));
}

Replayer::Replayer(RankPlan rank_plan, ReplayOptions options)
    : rank_plan_(std::move(rank_plan)), options_(std::move(options)) {
  if (options_.arena != nullptr) {
    arena_pool_ = std::make_unique<PoolAllocator>(options_.arena->size(), 64);
  }
}

std::vector<int64_t> Replayer::ShapeAt(const TransferInfo& info,
                                       int64_t step) const {
  std::vector<int64_t> shape;
  for (int d = 0; d < info.spec.shape_size(); ++d) {
    const int64_t dim = info.spec.shape(d);
    shape.push_back(dim >= 0 ? dim : options_.dynamic_dim(info, step, d));
  }
  return shape;
}

uint64_t Replayer::bytes_per_step() const {
  uint64_t total = 0;
  for (const auto* list : {&rank_plan_.sends(), &rank_plan_.recvs()}) {
    for (const TransferInfo& info : *list) {
      absl::StatusOr<uint64_t> bytes = CheckShape(info, ShapeAt(info, 0));
      if (bytes.ok()) total += *bytes;
    }
  }
  return total;
}

absl::StatusOr<OutgoingTensor> Replayer::MakeTensor(const TransferInfo& info,
                                                    int64_t step) {
  const int64_t content_step = options_.vary_content ? step : 0;
  if (!options_.vary_content && !info.dynamic) {
    auto it = fixed_.find(info.id);
    if (it != fixed_.end()) return it->second;
  }
  OutgoingTensor tensor;
  tensor.shape = ShapeAt(info, step);
  ASSIGN_OR_RETURN(tensor.bytes, CheckShape(info, tensor.shape));
  const size_t bytes = std::max<size_t>(tensor.bytes, 1);
  if (arena_pool_ != nullptr) {
    ASSIGN_OR_RETURN(size_t offset, arena_pool_->Allocate(bytes));
    std::byte* data = options_.arena->data() + offset;
    PoolAllocator* pool = arena_pool_.get();
    // Freed when the communicator no longer reads it.
    tensor.keepalive = std::shared_ptr<const void>(
        data, [pool, offset](const void*) { pool->Free(offset); });
    tensor.data = data;
  } else {
    auto buffer = std::make_shared<std::vector<std::byte>>(bytes);
    tensor.data = buffer->data();
    tensor.keepalive = std::move(buffer);
  }
  FillPattern(options_.seed, info.id, content_step,
              const_cast<std::byte*>(tensor.data), tensor.bytes);
  if (!options_.vary_content && !info.dynamic) fixed_[info.id] = tensor;
  return tensor;
}

absl::StatusOr<absl::Duration> Replayer::RunStep(Communicator& communicator,
                                                 int64_t step) {
  const absl::Time begin = absl::Now();
  for (const TransferInfo& info : rank_plan_.sends()) {
    ASSIGN_OR_RETURN(OutgoingTensor tensor, MakeTensor(info, step));
    RETURN_IF_ERROR(communicator.Send(info.id, std::move(tensor)));
  }
  const int64_t content_step = options_.vary_content ? step : 0;
  for (const TransferInfo& info : rank_plan_.recvs()) {
    ASSIGN_OR_RETURN(ReceivedTensor tensor, communicator.Recv(info.id));
    const std::vector<int64_t> shape = ShapeAt(info, step);
    if (tensor.shape() != shape) {
      return absl::DataLossError(absl::StrCat(
          info.Describe(), " arrived at step ", step,
          " with the wrong shape"));
    }
    if (!options_.verify) {
      received_sum_ += SumWords(tensor.data(), tensor.bytes());
      continue;
    }
    const int64_t bad = FindMismatch(options_.seed, info.id, content_step,
                                     tensor.data(), tensor.bytes());
    if (bad >= 0) {
      return absl::DataLossError(absl::StrCat(
          info.Describe(), " arrived corrupt at step ", step, ": byte ", bad,
          " of ", tensor.bytes(), " differs"));
    }
  }
  if (options_.compute_delay > absl::ZeroDuration()) {
    const absl::Time until = absl::Now() + options_.compute_delay;
    while (absl::Now() < until) {
    }
  }
  RETURN_IF_ERROR(communicator.FinishStep());
  return absl::Now() - begin;
}

}  // namespace rdmaflow::runtime
