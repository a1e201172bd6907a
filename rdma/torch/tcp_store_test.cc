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

}  // namespace
}  // namespace rdmaflow::rdma::torch
