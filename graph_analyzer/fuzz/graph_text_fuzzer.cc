// File: graph_text_fuzzer.cc
// -----------------------------------------------------------------------------
// libFuzzer target: arbitrary bytes through the text-format loader, the
// validator and shape inference, and, when the graph is valid, partitioning,
// planning, the printers and re-planning with a trace. Nothing may crash,
// hang, or trip a sanitizer; every bad input must come back as a Status.
//
// Built for real fuzzing with `bazel build --config=fuzz` (clang,
// -fsanitize=fuzzer,address; see tools/fuzz.sh). Without that config the
// same function is driven by graph_text_fuzz_test over a seed corpus and
// deterministic mutations.
#include <cstddef>
#include <cstdint>
#include <string>

#include "graph_analyzer/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  rdmaflow::graph::fuzz::RunOneInput(
      std::string(reinterpret_cast<const char*>(data), size));
  return 0;
}
