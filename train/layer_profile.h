// File: layer_profile.h
// -----------------------------------------------------------------------------
// ProfileLayers(): a model's compute, layer by layer, measured on this rank
// alone with one thread (as rdmaflow_train runs each rank), for the
// step-time simulator (sim/, docs/scale.md). The presets built as one
// sequence (mlp, lenet5, vgg) are timed per module; other models (resnet,
// TorchScript files) as two parts, the features and the head, where they
// can be cut (models.h), else as one. Each part's forward and backward are
// timed on its own: its input is the previous part's output, detached.
// The loss, the optimizer's update of every parameter (a vectorized
// momentum SGD over one flat buffer, as the strategies apply it) and a whole
// step are timed too. Times are medians over `iterations`.
#ifndef RDMAFLOW_TRAIN_LAYER_PROFILE_H_
#define RDMAFLOW_TRAIN_LAYER_PROFILE_H_

#include "absl/status/statusor.h"
#include "sim/sim.pb.h"
#include "train/models.h"
#include "train/sample_spec.h"

namespace rdmaflow::train {

struct ProfileOptions {
  int batch_size = 64;
  int iterations = 10;  // timed, after 2 untimed
};

// kInvalidArgument for bad options or a model that fails on a batch (the
// message names the part).
absl::StatusOr<sim::ModelProfile> ProfileLayers(const Model& model,
                                                const SampleSpec& sample,
                                                const ProfileOptions& options);

}  // namespace rdmaflow::train

#endif  // RDMAFLOW_TRAIN_LAYER_PROFILE_H_
