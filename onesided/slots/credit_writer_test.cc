// CreditWriter over a loopback pair: a burst of releases goes back in one
// write covering the changed words, releases made while a write is in
// flight go in the next one, values never go back, and a dead sender fails
// the writer.
#include "onesided/slots/credit_writer.h"

#include <cstring>
#include <memory>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rdma/loopback/loopback_transport.h"
#include "rdma/testing/loopback_pair.h"

namespace rdmaflow::onesided {
namespace {

using ::rdmaflow::testing::IsOk;
using ::rdmaflow::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int kWords = 8;

class CreditWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<rdma::testing::LoopbackPair> pair = rdma::testing::LoopbackPair::Create();
    ASSERT_THAT(pair, IsOk());
    transports_ = std::move(pair->transports);
    auto source = transports_[1]->Allocate(kWords * 8);
    auto target = transports_[0]->Allocate(kWords * 8);
    ASSERT_THAT(source, IsOk());
    ASSERT_THAT(target, IsOk());
    source_ = std::make_unique<rdma::MemoryRegion>(*std::move(source));
    target_ = std::make_unique<rdma::MemoryRegion>(*std::move(target));
    remote_ = target_->descriptor();
    to_0_ = std::move(pair->to_0);
    CreditWriter::Options options;
    options.words = kWords;
    options.peer = "rank 0";
    options.endpoint = to_0_.get();
    options.source = source_.get();
    options.remote = &remote_;
    writer_ = std::make_unique<CreditWriter>(options);
  }

  void Settle() {
    for (int i = 0; i < 100 && writer_->outstanding() > 0; ++i) {
      ASSERT_THAT(transports_[1]->Progress(), IsOk());
    }
    ASSERT_EQ(writer_->outstanding(), 0);
  }

  std::vector<uint64_t> Remote() const {
    std::vector<uint64_t> words(kWords);
    std::memcpy(words.data(), target_->data(), kWords * 8);
    return words;
  }

  std::vector<std::unique_ptr<rdma::loopback::LoopbackTransport>> transports_;
  std::unique_ptr<rdma::MemoryRegion> source_, target_;
  rdma::RemoteRegion remote_;
  std::unique_ptr<rdma::Endpoint> to_0_;
  std::unique_ptr<CreditWriter> writer_;
};

TEST_F(CreditWriterTest, ABurstOfReleasesGoesBackInOneWrite) {
  writer_->Set(1, 3);
  writer_->Set(5, 1);
  writer_->Set(2, 7);
  ASSERT_THAT(writer_->Post(), IsOk());
  Settle();
  EXPECT_EQ(writer_->writes(), 1);
  EXPECT_THAT(Remote(), ElementsAre(0, 3, 7, 0, 0, 1, 0, 0));
  EXPECT_FALSE(writer_->pending());
  ASSERT_THAT(writer_->Post(), IsOk());  // nothing changed: no write
  EXPECT_EQ(writer_->writes(), 1);
}

TEST_F(CreditWriterTest, ReleasesDuringAWriteGoInTheNextAndNeverGoBack) {
  writer_->Set(0, 1);
  ASSERT_THAT(writer_->Post(), IsOk());
  writer_->Set(7, 2);
  writer_->Set(0, 4);
  writer_->Set(0, 3);  // lower than what is wanted: ignored
  ASSERT_THAT(writer_->Post(), IsOk());  // in flight: waits
  EXPECT_EQ(writer_->writes(), 1);
  EXPECT_TRUE(writer_->pending());
  Settle();
  ASSERT_THAT(writer_->Post(), IsOk());
  Settle();
  EXPECT_EQ(writer_->writes(), 2);
  EXPECT_THAT(Remote(), ElementsAre(4, 0, 0, 0, 0, 0, 0, 2));
}

TEST_F(CreditWriterTest, ADeadSenderFailsTheWriter) {
  transports_[0].reset();
  writer_->Set(3, 1);
  absl::Status status = writer_->Post();
  for (int i = 0; i < 100 && status.ok(); ++i) {
    transports_[1]->Progress().IgnoreError();
    status = writer_->failure();
  }
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kUnavailable,
                               HasSubstr("returning credits to rank 0")));
}

}  // namespace
}  // namespace rdmaflow::onesided
