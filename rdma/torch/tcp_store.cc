#include "rdma/torch/tcp_store.h"

#include <chrono>
#include <cstdlib>
#include <exception>
#include <optional>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rdmaflow::rdma::torch {
namespace {

std::chrono::milliseconds ToChrono(absl::Duration d) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
}

absl::StatusOr<int> IntFromEnv(const char* name, std::optional<int> fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') {
    if (fallback.has_value()) return *fallback;
    return absl::InvalidArgumentError(absl::StrCat(
        "environment variable ", name,
        " is not set; launch with torchrun, mpirun or Slurm, or set it"));
  }
  int value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "environment variable ", name, "='", text,
        "' is not a non-negative integer"));
  }
  return value;
}

// c10d reports timeouts and I/O errors as exceptions; this is the one place
// they become Status.
template <typename Fn>
auto Guard(Fn fn, const std::string& what, absl::StatusCode code)
    -> absl::StatusOr<decltype(fn())> {
  try {
    return fn();
  } catch (const c10::Error& e) {
    return absl::Status(code,
                        absl::StrCat(what, ": ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::Status(code, absl::StrCat(what, ": ", e.what()));
  }
}

}  // namespace

absl::StatusOr<TcpStoreOptions> TcpStoreOptions::FromEnvironment() {
  TcpStoreOptions options;
  if (const char* host = std::getenv("MASTER_ADDR"); host && *host) {
    options.host = host;
  }
  absl::StatusOr<int> port = IntFromEnv("MASTER_PORT", 29500);
  if (!port.ok()) return port.status();
  absl::StatusOr<int> r = IntFromEnv("RANK", std::nullopt);
  if (!r.ok()) return r.status();
  absl::StatusOr<int> world = IntFromEnv("WORLD_SIZE", std::nullopt);
  if (!world.ok()) return world.status();
  if (*r >= *world) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RANK=", *r, " is not below WORLD_SIZE=", *world));
  }
  options.port = *port;
  options.world_size = *world;
  // Rank 0 hosts the store, unless torchrun's agent already does (it says
  // so with TORCHELASTIC_USE_AGENT_STORE=True).
  const char* agent_store = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  options.is_server =
      *r == 0 && !(agent_store != nullptr && std::string(agent_store) == "True");
  options.rank = *r;
  return options;
}

TcpStore::TcpStore(std::unique_ptr<c10d::TCPStore> store, std::string where)
    : store_(std::move(store)), where_(std::move(where)) {}

TcpStore::~TcpStore() = default;

absl::StatusOr<std::unique_ptr<TcpStore>> TcpStore::Create(
    const TcpStoreOptions& options) {
  if (options.port < 0 || options.port > 65535 ||
      (options.port == 0 && !options.is_server)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "store port ", options.port,
        " is invalid (0 is allowed for the server only)"));
  }
  if (options.world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("store world size must be >= 1, got ", options.world_size));
  }
  const std::string where = absl::StrCat(options.host, ":", options.port);
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(options.port);
  opts.isServer = options.is_server;
  opts.numWorkers = options.world_size;
  opts.waitWorkers = false;
  opts.timeout = ToChrono(options.connect_timeout);
  auto store = Guard(
      [&] { return std::make_unique<c10d::TCPStore>(options.host, opts); },
      absl::StrCat(options.is_server ? "starting" : "connecting to",
                   " the rendezvous store at ", where,
                   " (check MASTER_ADDR/MASTER_PORT, that rank 0 is up and "
                   "the port is free)"),
      absl::StatusCode::kUnavailable);
  if (!store.ok()) return store.status();
  const std::string actual =
      absl::StrCat(options.host, ":", (*store)->getPort());
  return std::unique_ptr<TcpStore>(new TcpStore(*std::move(store), actual));
}

int TcpStore::port() const { return store_->getPort(); }

absl::Status TcpStore::Set(absl::string_view key, absl::string_view value) {
  return Guard(
             [&] {
               store_->set(std::string(key),
                           std::vector<uint8_t>(value.begin(), value.end()));
               return 0;
             },
             absl::StrCat("store set of '", key, "' at ", where_),
             absl::StatusCode::kUnavailable)
      .status();
}

absl::StatusOr<std::string> TcpStore::Get(absl::string_view key,
                                          absl::Duration timeout) {
  if (absl::Status status = Wait({std::string(key)}, timeout); !status.ok()) {
    return status;
  }
  return Guard(
      [&] {
        std::vector<uint8_t> value = store_->get(std::string(key));
        return std::string(value.begin(), value.end());
      },
      absl::StrCat("store get of '", key, "' at ", where_),
      absl::StatusCode::kUnavailable);
}

absl::Status TcpStore::Wait(const std::vector<std::string>& keys,
                            absl::Duration timeout) {
  return Guard(
             [&] {
               store_->wait(keys, ToChrono(timeout));
               return 0;
             },
             absl::StrCat("waiting ", absl::FormatDuration(timeout),
                          " for store keys [", absl::StrJoin(keys, ", "),
                          "] at ", where_),
             absl::StatusCode::kDeadlineExceeded)
      .status();
}

absl::StatusOr<int64_t> TcpStore::Add(absl::string_view key, int64_t delta) {
  return Guard([&] { return store_->add(std::string(key), delta); },
               absl::StrCat("store add to '", key, "' at ", where_),
               absl::StatusCode::kUnavailable);
}

}  // namespace rdmaflow::rdma::torch
