// File: fuzz_target.h
// -----------------------------------------------------------------------------
// The body of the graph text fuzzer, shared by the libFuzzer entry point
// (graph_text_fuzzer.cc) and the corpus-replay test.
#ifndef RDMAFLOW_GRAPH_ANALYZER_FUZZ_FUZZ_TARGET_H_
#define RDMAFLOW_GRAPH_ANALYZER_FUZZ_FUZZ_TARGET_H_

#include <string>

namespace rdmaflow::graph::fuzz {

// Inputs longer than this are ignored: the loader is linear, and long inputs
// only slow the fuzzer down.
inline constexpr size_t kMaxInputBytes = 1 << 16;

// What happened to one input, for the replay test's statistics.
enum class Outcome { kTooLong, kParseError, kInvalidGraph, kPlanError, kPlanned };

// Parses `text` as a GraphDef and runs it through the whole analyzer.
// Returns how far it got; never crashes on any input.
Outcome RunOneInput(const std::string& text);

}  // namespace rdmaflow::graph::fuzz

#endif  // RDMAFLOW_GRAPH_ANALYZER_FUZZ_FUZZ_TARGET_H_
