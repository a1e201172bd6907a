#include "rdma/torch/tcp_store.h"

#include <cstdlib>
#include <thread>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow::rdma::torch {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

TEST(TcpStoreTest, ServerAndClientShareKeysAndCounters) {
  TcpStoreOptions server_options;
  server_options.port = 0;
  server_options.is_server = true;
  server_options.world_size = 2;
  ASSERT_OK_AND_ASSIGN(auto server, TcpStore::Create(server_options));
  TcpStoreOptions client_options = server_options;
  client_options.is_server = false;
  client_options.port = server->port();
  ASSERT_OK_AND_ASSIGN(auto client, TcpStore::Create(client_options));

  // A Get that waits for a key another rank sets later.
  std::thread setter([&] { EXPECT_OK(server->Set("addr/0", "hello")); });
  ASSERT_OK_AND_ASSIGN(std::string value,
                       client->Get("addr/0", absl::Seconds(30)));
  setter.join();
  EXPECT_EQ(value, "hello");
  ASSERT_OK(client->Set("binary", std::string("a\0b", 3)));
  ASSERT_OK_AND_ASSIGN(std::string binary,
                       server->Get("binary", absl::Seconds(5)));
  EXPECT_EQ(binary, std::string("a\0b", 3));

  ASSERT_OK_AND_ASSIGN(int64_t one, server->Add("count", 1));
  ASSERT_OK_AND_ASSIGN(int64_t two, client->Add("count", 1));
  EXPECT_EQ(one, 1);
  EXPECT_EQ(two, 2);
}

TEST(TcpStoreTest, MissingKeyTimesOutNamingIt) {
  TcpStoreOptions options;
  options.port = 0;
  options.is_server = true;
  ASSERT_OK_AND_ASSIGN(auto store, TcpStore::Create(options));
  EXPECT_THAT(store->Get("never/set", absl::Milliseconds(200)),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("never/set")));
}

TEST(TcpStoreTest, UnreachableServerIsUnavailable) {
  TcpStoreOptions options;
  options.port = 1;  // Nothing listens there.
  options.connect_timeout = absl::Milliseconds(500);
  EXPECT_THAT(TcpStore::Create(options),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("127.0.0.1:1")));
}

TEST(TcpStoreTest, EnvironmentIsValidated) {
  setenv("RANK", "3", 1);
  setenv("WORLD_SIZE", "2", 1);
  EXPECT_THAT(TcpStoreOptions::FromEnvironment(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("RANK")));
  unsetenv("WORLD_SIZE");
  EXPECT_THAT(TcpStoreOptions::FromEnvironment(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("WORLD_SIZE")));
  setenv("WORLD_SIZE", "4", 1);
  setenv("MASTER_PORT", "1234", 1);
  ASSERT_OK_AND_ASSIGN(TcpStoreOptions options,
                       TcpStoreOptions::FromEnvironment());
  EXPECT_EQ(options.rank, 3);
  EXPECT_EQ(options.port, 1234);
  EXPECT_FALSE(options.is_server);
}

// After an elastic restart the new attempt's workers share the store with
// the old attempt's keys: those must be out of sight (a barrier key set by
// attempt 0 does not let attempt 1 through).
TEST(TcpStoreTest, KeysOfAnEarlierAttemptAreOutOfSight) {
  TcpStoreOptions server_options;
  server_options.port = 0;
  server_options.is_server = true;
  server_options.world_size = 3;
  server_options.key_prefix = "run/job/attempt/0";
  ASSERT_OK_AND_ASSIGN(auto attempt0, TcpStore::Create(server_options));
  ASSERT_OK(attempt0->Set("barrier/start", "1"));
  ASSERT_OK_AND_ASSIGN(int64_t arrived0, attempt0->Add("arrived", 2));
  EXPECT_EQ(arrived0, 2);

  TcpStoreOptions client_options = server_options;
  client_options.is_server = false;
  client_options.port = attempt0->port();
  client_options.key_prefix = "run/job/attempt/1";
  ASSERT_OK_AND_ASSIGN(auto attempt1, TcpStore::Create(client_options));
  EXPECT_THAT(attempt1->Get("barrier/start", absl::Milliseconds(200)),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  ASSERT_OK_AND_ASSIGN(int64_t arrived1, attempt1->Add("arrived", 1));
  EXPECT_EQ(arrived1, 1);

  client_options.key_prefix = "run/job/attempt/0";
  ASSERT_OK_AND_ASSIGN(auto same, TcpStore::Create(client_options));
  ASSERT_OK_AND_ASSIGN(std::string value, same->Get("barrier/start", absl::Seconds(5)));
  EXPECT_EQ(value, "1");
}

TEST(TcpStoreTest, EnvironmentScopesKeysByRunAndRestart) {
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "1", 1);
  setenv("TORCHELASTIC_RUN_ID", "r1", 1);
  setenv("TORCHELASTIC_RESTART_COUNT", "2", 1);
  ASSERT_OK_AND_ASSIGN(TcpStoreOptions options, TcpStoreOptions::FromEnvironment());
  EXPECT_EQ(options.key_prefix, "run/r1/attempt/2");
  setenv("TORCHELASTIC_RESTART_COUNT", "two", 1);
  EXPECT_THAT(TcpStoreOptions::FromEnvironment(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("TORCHELASTIC_RESTART_COUNT")));
  unsetenv("TORCHELASTIC_RUN_ID");
  unsetenv("TORCHELASTIC_RESTART_COUNT");
}

}  // namespace
}  // namespace rdmaflow::rdma::torch
