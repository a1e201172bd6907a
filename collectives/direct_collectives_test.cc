// DirectCollectives over the loopback transport, 3 ranks as threads:
// broadcast, reduce, gather and scatter from every root, all-gather,
// reduce-scatter against a local loop (bitwise), all-to-all with uneven
// and empty parts, barrier, exchange; mismatched sizes are errors naming the
// sender.
#include "collectives/direct_collectives.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rdma/rendezvous.h"
#include "rdma/testing/rank_threads.h"

namespace rdmaflow::collectives {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int kRanks = 3;

onesided::MessengerOptions Options() {
  onesided::MessengerOptions options;
  options.slot_bytes = 4096;
  options.slots = 4;
  options.timeout = absl::Seconds(60);
  return options;
}

float Value(int rank, int block, size_t i) {
  return 0.1f * static_cast<float>(i) + 1.7f * rank - 0.3f * block;
}

// Runs body(rank, direct) on `world` ranks as threads, each with
// DirectCollectives over a Messenger of its own; every rank's status. No
// rank tears its transport down before every rank's body is over (a rank
// whose sends land at once could otherwise go while a peer still connects
// to it).
std::vector<absl::Status> WithDirect(
    int world, const std::function<absl::Status(int rank, DirectCollectives& direct)>& body) {
  return rdma::testing::RunRankThreads(
      world, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ASSIGN_OR_RETURN(auto messenger, onesided::Messenger::Create(
                                             transport, store, "direct", rank, world,
                                             Options()));
        DirectCollectives direct(*messenger, absl::Seconds(60));
        absl::Status status = body(rank, direct);
        absl::Status end = rdma::Barrier(store, "direct", "end", world, absl::Seconds(60));
        return status.ok() ? end : status;
      });
}

TEST(DirectCollectivesTest, EveryCollectiveMatchesALocalReference) {
  constexpr size_t kCount = 3001;  // several slots
  std::vector<absl::Status> results = WithDirect(
      kRanks, [&](int rank, DirectCollectives& direct) -> absl::Status {
        for (int root = 0; root < kRanks; ++root) {
          std::vector<float> data(kCount);
          for (size_t i = 0; i < kCount; ++i) data[i] = Value(rank, root, i);
          RETURN_IF_ERROR(direct.Broadcast(root, data.data(), kCount * sizeof(float)));
          std::vector<float> expected(kCount);
          for (size_t i = 0; i < kCount; ++i) expected[i] = Value(root, root, i);
          EXPECT_EQ(data, expected) << "root " << root;
        }
        std::vector<float> mine(kCount);
        for (size_t i = 0; i < kCount; ++i) mine[i] = Value(rank, 0, i);
        std::vector<std::vector<float>> gathered(kRanks, std::vector<float>(kCount));
        std::vector<void*> outputs;
        for (auto& g : gathered) outputs.push_back(g.data());
        RETURN_IF_ERROR(direct.AllGather(mine.data(), kCount * sizeof(float), outputs));
        for (int r = 0; r < kRanks; ++r) {
          std::vector<float> expected(kCount);
          for (size_t i = 0; i < kCount; ++i) expected[i] = Value(r, 0, i);
          EXPECT_EQ(gathered[r], expected) << "from rank " << r;
        }
        // inputs[b] of rank r: Value(r, b, i); output of rank b: op over r.
        std::vector<std::vector<float>> blocks(kRanks, std::vector<float>(kCount));
        std::vector<const void*> inputs;
        for (int b = 0; b < kRanks; ++b) {
          for (size_t i = 0; i < kCount; ++i) blocks[b][i] = Value(rank, b, i);
          inputs.push_back(blocks[b].data());
        }
        for (ReduceOp op :
             {ReduceOp::kSum, ReduceOp::kMax}) {
          std::vector<float> out(kCount);
          RETURN_IF_ERROR(direct.ReduceScatter(inputs, out.data(), kCount,
                                               DataType::kFloat32, op));
          std::vector<float> expected(kCount);
          for (size_t i = 0; i < kCount; ++i) {
            expected[i] = Value(0, rank, i);
            for (int r = 1; r < kRanks; ++r) {
              const float v = Value(r, rank, i);
              expected[i] = op == ReduceOp::kSum ? expected[i] + v
                                                              : std::max(expected[i], v);
            }
          }
          EXPECT_EQ(out, expected) << ReduceOpName(op);
          // In place: the output is this rank's own input block.
          std::vector<std::vector<float>> again = blocks;
          std::vector<const void*> in_place;
          for (auto& block : again) in_place.push_back(block.data());
          RETURN_IF_ERROR(direct.ReduceScatter(in_place, again[rank].data(), kCount,
                                               DataType::kFloat32, op));
          EXPECT_EQ(again[rank], expected) << ReduceOpName(op) << " in place";
        }
        // Reduce, gather and scatter to and from every root.
        for (int root = 0; root < kRanks; ++root) {
          std::vector<float> data = mine;
          RETURN_IF_ERROR(direct.Reduce(root, data.data(), kCount,
                                        DataType::kFloat32,
                                        ReduceOp::kSum));
          std::vector<float> expected = mine;  // untouched off the root
          if (rank == root) {
            for (size_t i = 0; i < kCount; ++i) {
              expected[i] = Value(0, 0, i);
              for (int r = 1; r < kRanks; ++r) expected[i] += Value(r, 0, i);
            }
          }
          EXPECT_EQ(data, expected) << "reduce to " << root;
          std::vector<std::vector<float>> at_root(kRanks, std::vector<float>(kCount));
          std::vector<void*> slots;
          for (auto& g : at_root) slots.push_back(g.data());
          RETURN_IF_ERROR(direct.Gather(root, mine.data(), kCount * sizeof(float),
                                        rank == root ? slots : std::vector<void*>{}));
          for (int r = 0; r < kRanks && rank == root; ++r) {
            std::vector<float> from(kCount);
            for (size_t i = 0; i < kCount; ++i) from[i] = Value(r, 0, i);
            EXPECT_EQ(at_root[r], from) << "gather from " << r << " to " << root;
          }
          std::vector<float> part(kCount);
          RETURN_IF_ERROR(direct.Scatter(root, rank == root ? inputs : std::vector<const void*>{},
                                         part.data(), kCount * sizeof(float)));
          std::vector<float> block(kCount);
          for (size_t i = 0; i < kCount; ++i) block[i] = Value(root, rank, i);
          EXPECT_EQ(part, block) << "scatter from " << root;
        }
        RETURN_IF_ERROR(direct.Barrier());
        ASSIGN_OR_RETURN(std::vector<std::string> records,
                         direct.Exchange(std::string(rank + 1, 'x')));
        for (int r = 0; r < kRanks; ++r) EXPECT_EQ(records[r], std::string(r + 1, 'x'));
        return absl::OkStatus();
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
}

TEST(DirectCollectivesTest, AllToAllWithUnevenPartsMatchesALocalReference) {
  // Rank s sends rank d a part of (s + 2 d) * 1000 + 1 bytes (0 bytes from
  // rank 0 to itself would be 1: every part at least one byte, several
  // slots for the larger ones), byte i of it (s * 7 + d * 13 + i) % 251.
  auto bytes_of = [](int s, int d) { return static_cast<size_t>(s + 2 * d) * 1000 + 1; };
  auto byte = [](int s, int d, size_t i) {
    return static_cast<uint8_t>((s * 7 + d * 13 + i) % 251);
  };
  std::vector<absl::Status> results = WithDirect(
      kRanks, [&](int rank, DirectCollectives& direct) -> absl::Status {
        std::vector<std::vector<uint8_t>> parts(kRanks), received(kRanks);
        std::vector<const void*> inputs;
        std::vector<void*> outputs;
        std::vector<size_t> input_bytes, output_bytes;
        for (int peer = 0; peer < kRanks; ++peer) {
          parts[peer].resize(bytes_of(rank, peer));
          for (size_t i = 0; i < parts[peer].size(); ++i) parts[peer][i] = byte(rank, peer, i);
          received[peer].assign(bytes_of(peer, rank), 0);
          inputs.push_back(parts[peer].data());
          input_bytes.push_back(parts[peer].size());
          outputs.push_back(received[peer].data());
          output_bytes.push_back(received[peer].size());
        }
        // Rank 1 sends and receives nothing from rank 2: empty parts work.
        if (rank == 1) input_bytes[2] = output_bytes[2] = 0;
        if (rank == 2) input_bytes[1] = output_bytes[1] = 0;
        RETURN_IF_ERROR(direct.AllToAll(inputs, input_bytes, outputs, output_bytes));
        for (int peer = 0; peer < kRanks; ++peer) {
          std::vector<uint8_t> expected(bytes_of(peer, rank), 0);
          if (output_bytes[peer] > 0) {
            for (size_t i = 0; i < expected.size(); ++i) expected[i] = byte(peer, rank, i);
          }
          EXPECT_EQ(received[peer], expected) << "from rank " << peer << " at rank " << rank;
        }
        return absl::OkStatus();
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
}

TEST(DirectCollectivesTest, AllToAllPartsOfTheWrongSizeAreNamed) {
  std::vector<absl::Status> results = WithDirect(
      2, [&](int rank, DirectCollectives& direct) -> absl::Status {
        std::vector<float> in(100), out(100);
        // Rank 1 expects 100 floats from rank 0, which sends 60.
        const std::vector<size_t> input_bytes = {400, rank == 0 ? size_t{240} : size_t{400}};
        absl::Status status = direct.AllToAll({in.data(), in.data()}, input_bytes,
                                              {out.data(), out.data()}, {400, 400});
        if (rank == 0) return status;
        EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("rank 0 sent 240 bytes where 400")));
        EXPECT_THAT(direct.AllToAll({in.data()}, {4}, {out.data()}, {4}),
                    StatusIs(absl::StatusCode::kInvalidArgument,
                             HasSubstr("one buffer per rank (2), got 1")));
        return absl::OkStatus();
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
}

TEST(DirectCollectivesTest, MismatchedSizesAreAnError) {
  std::vector<absl::Status> results = WithDirect(
      2, [&](int rank, DirectCollectives& direct) -> absl::Status {
        std::vector<float> data(100);
        // Rank 1 expects 100 floats, rank 0 sends 50.
        absl::Status status =
            direct.Broadcast(0, data.data(), (rank == 0 ? 50 : 100) * sizeof(float));
        if (rank == 0) return status;
        EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("rank 0 sent 200 bytes where 400")));
        return absl::OkStatus();
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
}

// Members 2 and 0 of a world of 4 (in that order; ranks 1 and 3 stay out):
// buffers are per member, in the members' order, and messages of each
// member's own size arrive whole; a root outside them is refused.
TEST(DirectCollectivesTest, ASubsetOfMembersGathersMessagesOfTheirOwnSizes) {
  constexpr int kWorld = 4;
  const std::vector<int> members = {2, 0};
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      kWorld, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        if (rank == 1 || rank == 3) return absl::OkStatus();
        onesided::MessengerOptions options = Options();
        options.members = members;
        ASSIGN_OR_RETURN(auto messenger, onesided::Messenger::Create(
                                             transport, store, "subset", rank, kWorld, options));
        DirectCollectives direct(*messenger, absl::Seconds(60));
        // Rank r sends 100 * (r + 1) bytes of value r + 1.
        std::vector<std::byte> mine(100 * (rank + 1), std::byte(rank + 1));
        std::vector<std::vector<std::byte>> outputs(members.size(),
                                                    std::vector<std::byte>(1000));
        std::vector<void*> pointers;
        for (auto& o : outputs) pointers.push_back(o.data());
        ASSIGN_OR_RETURN(std::vector<size_t> sizes,
                         direct.AllGatherV(mine.data(), mine.size(), pointers,
                                           std::vector<size_t>(members.size(), 1000)));
        for (size_t m = 0; m < members.size(); ++m) {
          const int from = members[m];
          EXPECT_EQ(sizes[m], size_t{100} * (from + 1)) << "from rank " << from;
          EXPECT_EQ(outputs[m][0], std::byte(from + 1)) << "from rank " << from;
          EXPECT_EQ(outputs[m][sizes[m] - 1], std::byte(from + 1)) << "from rank " << from;
        }
        // Too small an output for a peer's message: named.
        std::vector<size_t> small(members.size(), 1000);
        small[rank == 2 ? 1 : 0] = 10;
        absl::Status refused = direct.AllGatherV(mine.data(), mine.size(), pointers, small)
                                   .status();
        EXPECT_THAT(refused, StatusIs(absl::StatusCode::kInvalidArgument));
        char byte = 0;
        EXPECT_THAT(direct.Broadcast(1, &byte, 1),
                    StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a member")));
        return rdma::Barrier(store, "subset", "end", 2, absl::Seconds(60));
      });
  for (int rank = 0; rank < kWorld; ++rank) EXPECT_OK(results[rank]) << "rank " << rank;
}

}  // namespace
}  // namespace rdmaflow::collectives
