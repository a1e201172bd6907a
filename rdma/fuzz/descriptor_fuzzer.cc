// File: descriptor_fuzzer.cc
// -----------------------------------------------------------------------------
// libFuzzer target for what the rendezvous reads back from the store: the
// input is a value as a store writer would have left it, parsed as a region
// descriptor (RemoteRegion::Parse) and as a proven record (FetchProven,
// which must refuse it unless it carries the job token's proof). Built by
// tools/fuzz.sh with --config=fuzz; without it, a no-op binary.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rdma/remote_region.h"
#include "rdma/rendezvous.h"
#include "rdma/testing/in_memory_store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  rdmaflow::rdma::RemoteRegion::Parse(bytes).IgnoreError();
  static rdmaflow::rdma::testing::InMemoryStore store;
  if (store.Set("fuzz/region", bytes).ok()) {
    rdmaflow::rdma::FetchRegion(store, "fuzz", "region", absl::Milliseconds(1)).IgnoreError();
  }
  return 0;
}
