#include "bench/pingpong.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/coarse_clock.h"
#include "common/shared_word.h"
#include "common/status_macros.h"
#include "rdma/blocking.h"
#include "rdma/rendezvous.h"

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace rdmaflow::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Latency timestamps as perftest takes them: the cycle counter where there
// is one (one instruction, where reading a clock may be a system call: about
// 1 us inside a VM on the HPET), converted at the rate measured against
// steady_clock over the whole measurement.
class Stamps {
 public:
  Stamps() : start_(Clock::now()), start_ticks_(Ticks()) {}
  void Take() { ticks_.push_back(Ticks()); }
  // Microseconds between successive stamps, divided by `divisor`.
  std::vector<double> Deltas(double divisor) const {
    const uint64_t ticks = Ticks();
    const double seconds = Seconds(start_, Clock::now());
    const double us_per_tick =
        ticks > start_ticks_ ? seconds * 1e6 / double(ticks - start_ticks_)
                             : 0;
    std::vector<double> deltas;
    for (size_t i = 1; i < ticks_.size(); ++i) {
      deltas.push_back(double(ticks_[i] - ticks_[i - 1]) * us_per_tick /
                       divisor);
    }
    return deltas;
  }

 private:
  static uint64_t Ticks() {
#if defined(__x86_64__)
    return __rdtsc();
#else
    return static_cast<uint64_t>(Clock::now().time_since_epoch().count());
#endif
  }
  Clock::time_point start_;
  uint64_t start_ticks_;
  std::vector<uint64_t> ticks_;
};

// Flag values of flagged writes: a tag in the high bits, so that no byte
// pattern of the data (memset to 1 or 2) is taken for one, and a sequence
// number per direction in the low bits.
constexpr uint64_t kFlagTag = uint64_t{0xF1A6} << 48;

// Where the flag of a `bytes` write lies: the first aligned word behind it.
size_t FlagOffset(size_t bytes) { return (bytes + 7) / 8 * 8; }

// Everything one rank needs to talk to the other.
struct Link {
  rdma::Transport& transport;
  rdma::Endpoint& endpoint;
  const rdma::MemoryRegion& source;  // What this rank sends/reads into.
  rdma::RemoteRegion remote;         // The peer's buffer.
  const rdma::MemoryRegion& target;  // Ours, which the peer writes.
  absl::Time deadline;
  bool reads_need_target = false;  // PingPongOptions::reads_need_target
  PingPongOptions::Signal signal = PingPongOptions::Signal::kNotification;
  int in_flight = 0;
  uint32_t progress_calls = 0;
  uint64_t flags_sent = 0;      // flagged writes posted
  uint64_t flags_received = 0;  // flags seen
  // The bindings of the bound flagged writes, one per size
  // (the size being measured is the last one bound).
  std::vector<std::pair<size_t, std::unique_ptr<rdma::BoundFlaggedWrite>>> bound;
  PingPongOptions::ReadPost read_post = PingPongOptions::ReadPost::kPosted;
  std::vector<std::pair<size_t, std::unique_ptr<rdma::BoundRead>>> bound_reads;
  absl::Status first_error;

  rdma::Completion Counted() {
    ++in_flight;
    return [this](absl::Status status) {
      --in_flight;
      if (!status.ok() && first_error.ok()) first_error = std::move(status);
    };
  }

  absl::Status Progress() {
    RETURN_IF_ERROR(transport.Progress().status());
    // The deadline is minutes away: a look at the clock every 256 calls
    // keeps the loop between two operations short.
    if ((++progress_calls & 255) == 0 && CoarseNow() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "benchmark on rank ", transport.rank(), " ran past its deadline"));
    }
    return first_error;
  }

  // Posts with `post`, given a counted completion, progressing and
  // retrying while the endpoint pushes back.
  absl::Status Retry(absl::FunctionRef<absl::Status(rdma::Completion)> post) {
    while (true) {
      absl::Status status = post(Counted());
      if (status.ok()) return status;
      --in_flight;  // Not accepted: the callback will not run.
      if (!absl::IsResourceExhausted(status)) return status;
      RETURN_IF_ERROR(Progress());
    }
  }

  // Posts a write or read of `bytes` at offset 0.
  absl::Status Post(bool write, size_t bytes,
                    std::optional<uint32_t> notification) {
    const rdma::LocalSlice local{&source, 0, bytes};
    const rdma::RemoteSlice peer{&remote, 0, bytes};
    return Retry([&](rdma::Completion done) {
      return write ? endpoint.PostWrite(local, peer, notification, std::move(done))
                   : endpoint.PostRead(local, peer, std::move(done));
    });
  }

  // A read of `bytes` at offset 0, posted as `read_post` says. Sets
  // `done_already` where it was done inline (no completion to wait for).
  absl::Status PostRead(size_t bytes, bool& done_already) {
    done_already = false;
    if (read_post == PingPongOptions::ReadPost::kPosted) return Post(false, bytes, std::nullopt);
    rdma::BoundRead* read = nullptr;
    for (auto it = bound_reads.rbegin(); it != bound_reads.rend() && read == nullptr; ++it) {
      if (it->first == bytes) read = it->second.get();
    }
    if (read == nullptr) {
      ASSIGN_OR_RETURN(std::unique_ptr<rdma::BoundRead> made,
                       endpoint.BindRead({&source, 0, bytes}, {&remote, 0, bytes}));
      bound_reads.emplace_back(bytes, std::move(made));
      read = bound_reads.back().second.get();
    }
    if (read_post == PingPongOptions::ReadPost::kInline) {
      ASSIGN_OR_RETURN(done_already, read->TryPostInline());
      if (done_already) return absl::OkStatus();
    }
    return Retry([&](rdma::Completion done) { return read->Post(std::move(done)); });
  }

  // A write of `bytes` that the peer waits for with WaitSignal(): notified
  // (carrying `value`) or flagged, as `signal` says.
  absl::Status PostSignalled(size_t bytes, uint32_t value) {
    if (signal == PingPongOptions::Signal::kNotification) {
      return Post(true, bytes, value);
    }
    const uint64_t flag = kFlagTag | ++flags_sent;
    const rdma::LocalSlice data{&source, 0, bytes};
    const rdma::RemoteSlice to{&remote, 0, bytes};
    const rdma::RemoteSlice flag_word{&remote, FlagOffset(bytes), sizeof(uint64_t)};
    if (signal == PingPongOptions::Signal::kFlagWordUnbound) {
      return Retry([&](rdma::Completion done) {
        return endpoint.PostWriteWithFlag(data, to, flag_word, flag, std::move(done));
      });
    }
    ASSIGN_OR_RETURN(rdma::BoundFlaggedWrite * write, Bound(data, to, flag_word));
    if (signal == PingPongOptions::Signal::kFlagWord) {
      ASSIGN_OR_RETURN(const bool done_already, write->TryPostInline(flag));
      if (done_already) return absl::OkStatus();
    }
    return Retry([&](rdma::Completion done) { return write->Post(flag, std::move(done)); });
  }

  // The binding of a flagged write of `data.length` bytes, made at its
  // size's first write.
  absl::StatusOr<rdma::BoundFlaggedWrite*> Bound(const rdma::LocalSlice& data,
                                                 const rdma::RemoteSlice& to,
                                                 const rdma::RemoteSlice& flag_word) {
    for (auto it = bound.rbegin(); it != bound.rend(); ++it) {
      if (it->first == data.length) return it->second.get();
    }
    ASSIGN_OR_RETURN(std::unique_ptr<rdma::BoundFlaggedWrite> write,
                     endpoint.BindFlaggedWrite(data, to, flag_word));
    bound.emplace_back(data.length, std::move(write));
    return bound.back().second.get();
  }

  // Waits for the peer's next PostSignalled() of `bytes`.
  absl::Status WaitSignal(size_t bytes) {
    if (signal == PingPongOptions::Signal::kNotification) {
      return WaitNotification();
    }
    const std::byte* word = target.data() + FlagOffset(bytes);
    const uint64_t flag = kFlagTag | ++flags_received;
    while (LoadSharedWord(word) != flag) RETURN_IF_ERROR(Progress());
    return absl::OkStatus();
  }

  absl::Status WaitInFlightBelow(int limit) {
    while (in_flight >= limit) RETURN_IF_ERROR(Progress());
    return absl::OkStatus();
  }

  absl::Status WaitNotification() {
    while (!transport.PollNotification().has_value()) {
      RETURN_IF_ERROR(Progress());
    }
    return absl::OkStatus();
  }

  // The target of one-sided reads waits like perftest's server, which
  // sleeps in a socket read while the reads run: where they need no CPU
  // here (Capabilities::one_sided_allocate), it looks every millisecond
  // (waking early where the transport has events) and leaves the cores to
  // the reader and the adapter (on Soft-RoCE, the kernel doing the
  // adapter's work). Elsewhere (UCX over TCP emulates reads with the
  // target's progress; the staged path of device memory answers them) it
  // spins.
  absl::Status WaitNotificationIdle() {
    if (reads_need_target || !transport.capabilities().one_sided_allocate) {
      return WaitNotification();
    }
    while (true) {
      RETURN_IF_ERROR(Progress());
      if (transport.PollNotification().has_value()) return absl::OkStatus();
      transport.WaitForActivity(absl::Milliseconds(1));
    }
  }
};

int Iterations(const PingPongOptions& options, size_t bytes, size_t divisor) {
  const size_t n = options.byte_budget / divisor / bytes;
  return static_cast<int>(std::clamp<size_t>(n, options.min_iters,
                                             options.max_iters));
}

std::vector<size_t> Sizes(const PingPongOptions& options) {
  std::vector<size_t> sizes;
  for (size_t s = options.min_bytes; s <= options.max_bytes; s *= 2) {
    sizes.push_back(s);
  }
  return sizes;
}

// Latency ping-pong: rank 0 writes with a notification, rank 1 answers in
// kind. Returns one-way samples on rank 0: as perftest's ib_write_lat, half
// the time between two successive posts.
absl::StatusOr<std::vector<double>> WritePingPong(Link& link, size_t bytes,
                                                  int warmup, int iters) {
  Stamps stamps;
  const bool leader = link.transport.rank() == 0;
  for (int i = 0; i < warmup + iters; ++i) {
    if (leader) {
      if (i >= warmup) stamps.Take();
      RETURN_IF_ERROR(link.PostSignalled(bytes, i));
      RETURN_IF_ERROR(link.WaitSignal(bytes));
      if (i + 1 == warmup + iters) stamps.Take();
    } else {
      RETURN_IF_ERROR(link.WaitSignal(bytes));
      RETURN_IF_ERROR(link.PostSignalled(bytes, i));
    }
    RETURN_IF_ERROR(link.WaitInFlightBelow(16));
  }
  RETURN_IF_ERROR(link.WaitInFlightBelow(1));
  return stamps.Deltas(2);
}

// Bandwidth: `rounds` bursts of writes from rank 0, each ending with a
// notified write that rank 1 acknowledges. Returns {peak, average} MB/s.
absl::StatusOr<std::pair<double, double>> WriteBandwidth(
    Link& link, size_t bytes, int iters, int rounds, int window) {
  const bool leader = link.transport.rank() == 0;
  const int per_round = std::max(1, iters / rounds);
  double peak = 0, total_seconds = 0;
  for (int r = 0; r < rounds; ++r) {
    if (!leader) {
      RETURN_IF_ERROR(link.WaitSignal(bytes));
      RETURN_IF_ERROR(link.PostSignalled(8, r));
      continue;
    }
    const Clock::time_point start = Clock::now();
    for (int i = 0; i < per_round; ++i) {
      RETURN_IF_ERROR(link.WaitInFlightBelow(window));
      if (i == per_round - 1) {
        RETURN_IF_ERROR(link.PostSignalled(bytes, r));
      } else {
        RETURN_IF_ERROR(link.Post(true, bytes, std::nullopt));
      }
    }
    RETURN_IF_ERROR(link.WaitSignal(8));
    const double seconds = Seconds(start, Clock::now());
    total_seconds += seconds;
    peak = std::max(peak, per_round * bytes / seconds / 1e6);
  }
  RETURN_IF_ERROR(link.WaitInFlightBelow(1));
  if (!leader) return std::make_pair(0.0, 0.0);
  return std::make_pair(peak,
                        double(per_round) * rounds * bytes / total_seconds / 1e6);
}

struct ReadResult {
  std::vector<double> samples;
  double peak = 0, average = 0;
};

// Reads by rank 0 (rank 1 only progresses until told the phase is over).
absl::StatusOr<ReadResult> Reads(Link& link, size_t bytes, int warmup,
                                 int lat_iters, int bw_iters, int rounds,
                                 int window) {
  ReadResult result;
  if (link.transport.rank() != 0) {
    RETURN_IF_ERROR(link.WaitNotificationIdle());
    return result;
  }
  // As perftest's ib_read_lat: the time between two successive posts, each
  // after the previous read completed.
  Stamps stamps;
  bool done_already = false;
  for (int i = 0; i < warmup + lat_iters; ++i) {
    if (i >= warmup) stamps.Take();
    RETURN_IF_ERROR(link.PostRead(bytes, done_already));
    if (!done_already) RETURN_IF_ERROR(link.WaitInFlightBelow(1));
  }
  stamps.Take();
  result.samples = stamps.Deltas(1);
  const int per_round = std::max(1, bw_iters / rounds);
  double total_seconds = 0;
  for (int r = 0; r < rounds; ++r) {
    const Clock::time_point start = Clock::now();
    for (int i = 0; i < per_round; ++i) {
      RETURN_IF_ERROR(link.WaitInFlightBelow(window));
      RETURN_IF_ERROR(link.PostRead(bytes, done_already));
    }
    RETURN_IF_ERROR(link.WaitInFlightBelow(1));
    const double seconds = Seconds(start, Clock::now());
    total_seconds += seconds;
    result.peak = std::max(result.peak, per_round * bytes / seconds / 1e6);
  }
  result.average = double(per_round) * rounds * bytes / total_seconds / 1e6;
  // Release rank 1 into the next size.
  RETURN_IF_ERROR(link.Post(true, 8, 0xFFFFFFFFu));
  RETURN_IF_ERROR(link.WaitInFlightBelow(1));
  return result;
}

// How long the owner of the memory serves before it computes, in
// OwnerBusyReads: time for rank 0's read request to reach it and be taken.
constexpr absl::Duration kOwnerServe = absl::Milliseconds(5);
constexpr int kOwnerBusyReads = 3;

// Reads of `bytes` by rank 0 while rank 1, the owner, first serves
// kOwnerServe from rank 0's go, then computes `busy` without progressing
// (spins on the clock), then serves until rank 0's done. Returns rank 0's
// read completion times (us); rank 1 returns none.
absl::StatusOr<std::vector<double>> OwnerBusyReads(Link& link, size_t bytes,
                                                   absl::Duration busy) {
  std::vector<double> samples;
  const bool leader = link.transport.rank() == 0;
  for (int i = 0; i < kOwnerBusyReads; ++i) {
    if (!leader) {
      RETURN_IF_ERROR(link.WaitNotification());  // go
      const absl::Time served = absl::Now() + kOwnerServe;
      while (absl::Now() < served) RETURN_IF_ERROR(link.Progress());
      const absl::Time computed = absl::Now() + busy;
      while (absl::Now() < computed) {
      }
      RETURN_IF_ERROR(link.WaitNotification());  // done
      continue;
    }
    RETURN_IF_ERROR(link.Post(true, 8, 0xB0000000u + i));
    RETURN_IF_ERROR(link.WaitInFlightBelow(1));
    const Clock::time_point start = Clock::now();
    RETURN_IF_ERROR(link.Post(false, bytes, std::nullopt));
    RETURN_IF_ERROR(link.WaitInFlightBelow(1));
    samples.push_back(Seconds(start, Clock::now()) * 1e6);
    RETURN_IF_ERROR(link.Post(true, 8, 0xD0000000u + i));
    RETURN_IF_ERROR(link.WaitInFlightBelow(1));
  }
  return samples;
}

void FillLatency(std::vector<double> samples, PingPongRow& row) {
  if (samples.empty()) return;
  row.set_lat_min_us(*std::min_element(samples.begin(), samples.end()));
  row.set_lat_p50_us(Percentile(samples, 50));
  row.set_lat_p99_us(Percentile(samples, 99));
  row.set_lat_p999_us(Percentile(samples, 99.9));
  // perftest's t_max, t_avg, t_stdev: without the 2 largest samples.
  std::sort(samples.begin(), samples.end());
  if (samples.size() > 2) samples.resize(samples.size() - 2);
  double sum = 0;
  for (double s : samples) sum += s;
  const double average = sum / samples.size();
  double squares = 0;
  for (double s : samples) squares += (s - average) * (s - average);
  row.set_lat_max_us(samples.back());
  row.set_lat_avg_us(average);
  row.set_lat_stdev_us(std::sqrt(squares / samples.size()));
}

}  // namespace

double Percentile(std::vector<double> samples, double percentile) {
  if (samples.empty()) return 0;
  const size_t index = std::min(
      samples.size() - 1,
      static_cast<size_t>(percentile / 100.0 * samples.size()));
  std::nth_element(samples.begin(), samples.begin() + index, samples.end());
  return samples[index];
}

double MeasureMemcpy(size_t bytes, int iterations) {
  std::vector<std::byte> from(bytes, std::byte{1}), to(bytes, std::byte{0});
  std::memcpy(to.data(), from.data(), bytes);  // Fault the pages in.
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < iterations; ++i) {
    from[i % bytes] = static_cast<std::byte>(i);
    std::memcpy(to.data(), from.data(), bytes);
    asm volatile("" : : "r"(to.data()) : "memory");
  }
  return double(bytes) * iterations / Seconds(start, Clock::now()) / 1e6;
}

absl::StatusOr<std::vector<PingPongRow>> RunPingPong(
    rdma::Transport& transport, rdma::Store& store,
    const PingPongOptions& options) {
  const int rank = transport.rank();
  if (rank != 0 && rank != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ping-pong runs on ranks 0 and 1, not ", rank));
  }
  if (!options.writes && !options.reads) {
    return absl::InvalidArgumentError(
        "nothing to measure: writes and reads are both off");
  }
  if (options.min_bytes == 0 || options.min_bytes > options.max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid size range [", options.min_bytes, ", ", options.max_bytes,
        "]"));
  }
  const bool flags = options.signal != PingPongOptions::Signal::kNotification;
  if (flags && !transport.capabilities().flag_writes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "flag-word signals need flagged writes, which the ",
        transport.capabilities().backend,
        " transport does not offer: signal with notifications"));
  }
  if (flags && options.allocate) {
    return absl::InvalidArgumentError(
        "flag-word signals are polled in host memory: not with device memory");
  }
  const int peer = 1 - rank;
  // Room for the flag behind the largest write.
  const size_t target_bytes =
      flags ? FlagOffset(options.max_bytes) + sizeof(uint64_t) : options.max_bytes;
  auto allocate = [&](size_t bytes) -> absl::StatusOr<rdma::MemoryRegion> {
    if (options.allocate) return options.allocate(bytes);
    return transport.Allocate(bytes);
  };
  ASSIGN_OR_RETURN(rdma::MemoryRegion source, allocate(options.max_bytes));
  ASSIGN_OR_RETURN(rdma::MemoryRegion target, allocate(target_bytes));
  const auto value = static_cast<unsigned char>(rank + 1);
  if (options.fill) {
    RETURN_IF_ERROR(options.fill(source, value));
  } else {
    std::memset(source.data(), value, options.max_bytes);
  }
  RETURN_IF_ERROR(rdma::PublishAddress(store, options.ns, transport));
  RETURN_IF_ERROR(rdma::PublishRegion(store, options.ns,
                                      absl::StrCat("target/", rank),
                                      target.descriptor()));
  ASSIGN_OR_RETURN(std::unique_ptr<rdma::Endpoint> endpoint,
                   rdma::ConnectToPeer(transport, store, options.ns, peer,
                                       options.timeout));
  ASSIGN_OR_RETURN(rdma::RemoteRegion remote,
                   rdma::FetchRegion(store, options.ns,
                                     absl::StrCat("target/", peer),
                                     options.timeout));
  RETURN_IF_ERROR(
      rdma::Barrier(store, options.ns, "start", 2, options.timeout));
  if (rank == 0 && options.on_connected) {
    options.on_connected(endpoint->Describe());
  }

  Link link{transport, *endpoint, source, remote, target,
            absl::Now() + options.timeout, options.reads_need_target,
            options.signal};
  link.read_post = options.read_post;
  std::vector<PingPongRow> rows;
  constexpr int kRounds = 4;
  for (size_t bytes : Sizes(options)) {
    link.deadline = absl::Now() + options.timeout;
    const int lat_iters = Iterations(options, bytes, 8);
    const int bw_iters = Iterations(options, bytes, 1);
    const int warmup = std::max(1, lat_iters / 10);
    std::vector<double> write_lat;
    std::pair<double, double> write_bw{0, 0};
    if (options.writes) {
      ASSIGN_OR_RETURN(write_lat,
                       WritePingPong(link, bytes, warmup, lat_iters));
      ASSIGN_OR_RETURN(write_bw, WriteBandwidth(link, bytes, bw_iters,
                                                kRounds, options.window));
    }
    std::optional<ReadResult> reads;
    if (options.reads) {
      ASSIGN_OR_RETURN(reads, Reads(link, bytes, warmup, lat_iters, bw_iters,
                                    kRounds, options.window));
    }
    std::vector<double> busy_reads;
    if (options.reads && options.owner_busy > absl::ZeroDuration()) {
      // The owner's compute is not the link's slowness: a fresh deadline
      // with room for it (--owner_busy_ms may be up to a minute).
      link.deadline =
          absl::Now() + options.timeout + kOwnerBusyReads * (options.owner_busy + kOwnerServe);
      ASSIGN_OR_RETURN(busy_reads, OwnerBusyReads(link, bytes, options.owner_busy));
    }
    if (rank != 0) continue;

    double memcpy_mbps = 0;
    if (options.reference) {
      ASSIGN_OR_RETURN(memcpy_mbps, options.reference(bytes, bw_iters));
    } else {
      memcpy_mbps = MeasureMemcpy(bytes, bw_iters);
    }
    PingPongRow write_row;
    write_row.set_op("write");
    write_row.set_bytes(static_cast<double>(bytes));
    write_row.set_iterations(bw_iters);
    write_row.set_bw_peak_mbps(write_bw.first);
    write_row.set_bw_avg_mbps(write_bw.second);
    write_row.set_msg_rate_mops(write_bw.second / bytes);
    FillLatency(write_lat, write_row);
    write_row.set_memcpy_mbps(memcpy_mbps);
    write_row.set_ratio_to_memcpy(write_row.bw_avg_mbps() / memcpy_mbps);
    if (options.writes) rows.push_back(write_row);
    if (reads.has_value()) {
      PingPongRow read_row = write_row;
      read_row.set_op("read");
      read_row.set_bw_peak_mbps(reads->peak);
      read_row.set_bw_avg_mbps(reads->average);
      read_row.set_msg_rate_mops(reads->average / bytes);
      FillLatency(reads->samples, read_row);
      read_row.set_ratio_to_memcpy(read_row.bw_avg_mbps() / memcpy_mbps);
      if (!busy_reads.empty()) {
        read_row.set_owner_busy_ms(absl::ToDoubleMilliseconds(options.owner_busy));
        read_row.set_busy_read_p50_us(Percentile(busy_reads, 50));
      }
      rows.push_back(read_row);
    }
    if (options.on_size_done) options.on_size_done(bytes);
  }
  RETURN_IF_ERROR(rdma::Barrier(store, options.ns, "end", 2, options.timeout));
  return rows;
}

}  // namespace rdmaflow::bench
