// File: rdmaflow_profile_main.cc
// rdmaflow_profile: times a model's layers on one rank alone (one thread,
// as each rdmaflow_train rank computes) and writes the profile the
// step-time simulator reads (sim/sim.proto's ModelProfile; docs/scale.md).
//
//   rdmaflow_profile --model vgg --batch_size 64 --json vgg.profile.json
#include <cstdio>
#include <string>

#include "ATen/Parallel.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/program_flags.h"
#include "common/status_macros.h"
#include "results/json.h"
#include "train/layer_profile.h"
#include "train/models.h"
#include "train/sample_spec.h"

ABSL_FLAG(std::string, model, "lenet5",
          "mlp | lenet5 | vgg | resnet, or PATH.pt: a TorchScript module giving "
          "[batch, --classes] logits");
ABSL_FLAG(std::string, input, "1x28x28",
          "--model PATH.pt: one sample's shape, without the batch (1x28x28, "
          "3x32x32, or 16:int64 for token ids)");
ABSL_FLAG(int, classes, 10, "--model PATH.pt: classes of its logits");
ABSL_FLAG(int, vocab, 100, "--input ...:int64: token ids are in [0, vocab)");
ABSL_FLAG(int, batch_size, 64, "samples per batch (1..65536)");
ABSL_FLAG(int, iterations, 10, "timed runs of each part (the median is kept; 1..1000)");
ABSL_FLAG(int, threads, 1, "LibTorch threads (rdmaflow_train uses 1 per rank)");
ABSL_FLAG(std::string, json, "", "write the profile here (else to stdout)");

namespace rdmaflow::train {
namespace {

absl::Status Run() {
  const int batch = absl::GetFlag(FLAGS_batch_size);
  const int iterations = absl::GetFlag(FLAGS_iterations);
  const int threads = absl::GetFlag(FLAGS_threads);
  if (batch < 1 || batch > 65536) {
    return absl::InvalidArgumentError(absl::StrCat("--batch_size must be in 1..65536, got ", batch));
  }
  if (iterations < 1 || iterations > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("--iterations must be in 1..1000, got ", iterations));
  }
  if (threads < 1 || threads > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("--threads must be in 1..1024, got ", threads));
  }
  SampleSpec sample;
  ASSIGN_OR_RETURN(sample.shape, ParseSampleShape(absl::GetFlag(FLAGS_input), &sample.int64));
  sample.classes = absl::GetFlag(FLAGS_classes);
  sample.vocab = absl::GetFlag(FLAGS_vocab);
  at::set_num_threads(threads);
  ASSIGN_OR_RETURN(Model model, MakeModel(absl::GetFlag(FLAGS_model), 1, sample));
  ASSIGN_OR_RETURN(sim::ModelProfile profile,
                   ProfileLayers(model, sample, {batch, iterations}));
  // Progress and a human-readable summary go to stderr.
  double forward = 0, backward = 0;
  for (const sim::LayerProfile& layer : profile.layers()) {
    std::fprintf(stderr, "  %-24s %-8s fwd %8.3f ms  bwd %8.3f ms  params %10.0f B  out %10.0f B\n",
                 layer.name().c_str(), layer.head() ? "head" : "features", layer.forward_ms(),
                 layer.backward_ms(), layer.param_bytes(), layer.output_bytes());
    forward += layer.forward_ms();
    backward += layer.backward_ms();
  }
  std::fprintf(stderr,
               "%s, batch %d: layers %.2f ms (fwd %.2f + bwd %.2f) + loss %.3f ms; "
               "whole step %.2f ms; optimizer %.3f ms\n",
               profile.model().c_str(), batch, forward + backward, forward, backward,
               profile.loss_ms(), profile.step_ms(), profile.optimizer_ms());
  const std::string path = absl::GetFlag(FLAGS_json);
  if (!path.empty()) return results::WriteJsonFile(profile, path);
  ASSIGN_OR_RETURN(std::string json, results::ToJson(profile));
  std::fputs(json.c_str(), stdout);
  return absl::OkStatus();
}

}  // namespace
}  // namespace rdmaflow::train

int main(int argc, char** argv) {
  rdmaflow::ParseProgramFlags(argc, argv,
      "times a model's layers on one rank alone, for the step-time simulator.\n"
      "  rdmaflow_profile --model vgg --batch_size 64 --json vgg.profile.json\n"
      "See docs/scale.md.");
  const absl::Status status = rdmaflow::train::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "rdmaflow_profile: %s\n", status.ToString().c_str());
    return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  return 0;
}
