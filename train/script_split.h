// File: script_split.h
// -----------------------------------------------------------------------------
// Cuts a TorchScript model in two for layer_separated, where the analyzer's
// placement cuts it by default (graph_analyzer/placement.h): before the
// first fully connected layer, at the input of the forward graph's first
// aten::linear. The inlined forward graph is split there into two graphs
// run by TorchScript's own executor: features(x) up to the cut, head(h)
// from it on. The head's parameters are the ones its graph reads.
//
//   ASSIGN_OR_RETURN(strategies::ModelSplit split, SplitScript(script, sample));
#ifndef RDMAFLOW_TRAIN_SCRIPT_SPLIT_H_
#define RDMAFLOW_TRAIN_SCRIPT_SPLIT_H_

#include <memory>

#include "absl/status/statusor.h"
#include "strategies/strategy.h"
#include "torch/script.h"
#include "train/sample_spec.h"

namespace rdmaflow::train {

// kInvalidArgument naming the reason when the model cannot be cut there:
// no aten::linear in its forward; a value other than the cut's crossing
// from the features to the head (a connection over the cut); a cut not
// computed from the input (a learned query, a tensor filled in place); a
// parameter read on both sides; token-id inputs; a forward that is not one
// tensor in and one out.
absl::StatusOr<strategies::ModelSplit> SplitScript(std::shared_ptr<torch::jit::Module> script,
                                                   const SampleSpec& sample);

}  // namespace rdmaflow::train

#endif  // RDMAFLOW_TRAIN_SCRIPT_SPLIT_H_
