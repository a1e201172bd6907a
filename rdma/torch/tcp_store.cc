#include "rdma/torch/tcp_store.h"

#include <chrono>
#include <cstdlib>
#include <exception>
#include <optional>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "rdma/torch/run_scope.h"

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
  absl::StatusOr<RunScope> scope = RunScope::FromEnvironment();
  if (!scope.ok()) return scope.status();
  options.key_prefix = scope->prefix();
  return options;
}

TcpStore::TcpStore(c10::intrusive_ptr<c10d::Store> store, int port,
                   std::string where)
    : C10dStore(std::move(store), std::move(where)), port_(port) {}

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
  c10::intrusive_ptr<c10d::TCPStore> store;
  try {
    store = c10::make_intrusive<c10d::TCPStore>(options.host, opts);
  } catch (const std::exception& e) {
    const c10::Error* error = dynamic_cast<const c10::Error*>(&e);
    return absl::UnavailableError(absl::StrCat(
        options.is_server ? "starting" : "connecting to",
        " the rendezvous store at ", where,
        " (check MASTER_ADDR/MASTER_PORT, that rank 0 is up and the port is "
        "free): ",
        error != nullptr ? error->what_without_backtrace() : e.what()));
  }
  const int port = store->getPort();
  c10::intrusive_ptr<c10d::Store> scoped = store;
  if (!options.key_prefix.empty()) {
    scoped = c10::make_intrusive<c10d::PrefixStore>(options.key_prefix, store);
  }
  return std::unique_ptr<TcpStore>(
      new TcpStore(scoped, port, absl::StrCat(options.host, ":", port)));
}

int TcpStore::port() const { return port_; }

}  // namespace rdmaflow::rdma::torch
