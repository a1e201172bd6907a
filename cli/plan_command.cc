// File: plan_command.cc
#include "cli/plan_command.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cli/args.h"
#include "cli/model_source.h"
#include "common/program_flags.h"
#include "common/status_macros.h"
#include "google/protobuf/message.h"
#include "graph_analyzer/analyzed_graph.h"
#include "graph_analyzer/display_text.h"
#include "graph_analyzer/dot_writer.h"
#include "graph_analyzer/partition.h"
#include "graph_analyzer/plan_printer.h"
#include "graph_analyzer/placement.h"
#include "graph_analyzer/planner.h"
#include "graph_analyzer/text_io.h"
#include "graph_analyzer/torch/export_import.h"
#include "graph_analyzer/torch/torchscript_import.h"
#include "graph_analyzer/tracing.h"

namespace rdmaflow::cli {
namespace {

using graph::PlannerOptions;

const std::vector<FlagSpec>& PlanFlags() {
  static const auto* flags = new std::vector<FlagSpec>{
      {"pipeline_depth", true}, {"alignment", true}, {"metadata_bytes", true},
      {"no_share", false},      {"trace", true},     {"min_trace_steps", true},
      {"min_shared_bytes", true},
      {"out", true},            {"dot", true},       {"partitions", true},
      {"quiet", false},         {"max_input_bytes", true},
      {"input", true},          {"strategy", true},  {"graph", true},
  };
  return *flags;
}

// Everything the command line sets, checked before any input is read: a
// bad value here is a usage error (exit 2).
struct PlanSettings {
  PlannerOptions options;
  int64_t max_input_bytes = 0;
  int min_trace_steps = 0;
  std::optional<std::vector<graph::TensorSpec>> inputs;  // --input
  std::optional<graph::PlacementSpec> placement;         // --strategy
};

absl::StatusOr<PlannerOptions> OptionsFromArgs(const ParsedArgs& args) {
  PlannerOptions options;
  ASSIGN_OR_RETURN(int64_t depth,
                   args.GetInt("pipeline_depth", options.pipeline_depth, 1,
                               16));
  ASSIGN_OR_RETURN(int64_t alignment,
                   args.GetInt("alignment", options.alignment, 64, 1 << 30));
  ASSIGN_OR_RETURN(int64_t metadata,
                   args.GetInt("metadata_bytes", options.metadata_bytes, 64,
                               4096));
  options.pipeline_depth = static_cast<int>(depth);
  options.alignment = alignment;
  options.metadata_bytes = metadata;
  options.share_slots = !args.Has("no_share");
  ASSIGN_OR_RETURN(int64_t min_shared,
                   args.GetInt("min_shared_bytes", options.min_shared_bytes, 0, 1 << 30));
  options.min_shared_bytes = min_shared;
  RETURN_IF_ERROR(graph::CheckPlannerOptions(options));
  return options;
}

// The largest --max_input_bytes: protobuf's text parser indexes its input
// with an int, and 1 GiB of text already takes minutes to parse.
constexpr int64_t kMaxInputBytesLimit = int64_t{1} << 30;

absl::StatusOr<PlanSettings> SettingsFromArgs(const ParsedArgs& args) {
  PlanSettings settings;
  ASSIGN_OR_RETURN(settings.options, OptionsFromArgs(args));
  ASSIGN_OR_RETURN(
      settings.max_input_bytes,
      args.GetInt("max_input_bytes",
                  static_cast<int64_t>(graph::kDefaultMaxFileBytes), 1,
                  kMaxInputBytesLimit));
  ASSIGN_OR_RETURN(int64_t min_steps,
                   args.GetInt("min_trace_steps",
                               graph::TracingOptions().min_steps, 1, 1 << 20));
  settings.min_trace_steps = static_cast<int>(min_steps);
  if (args.Has("input")) {
    ASSIGN_OR_RETURN(settings.inputs, ParseInputSpecs(args.Get("input")));
  }
  if (args.Has("strategy")) {
    ASSIGN_OR_RETURN(settings.placement,
                     graph::ParsePlacementSpec(args.Get("strategy")));
  }
  return settings;
}

// ReadTextProto with the CLI's hint when the file is too large.
absl::Status ReadInput(const std::string& path,
                       google::protobuf::Message* message, uint64_t max_bytes) {
  absl::Status status = graph::ReadTextProto(path, message, max_bytes);
  if (absl::IsResourceExhausted(status)) {
    return absl::ResourceExhaustedError(
        absl::StrCat(status.message(), "; --max_input_bytes raises it"));
  }
  return status;
}

// This machine's memory, if the system says.
std::optional<uint64_t> PhysicalMemoryBytes() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return std::nullopt;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
}

absl::Status WritePartitions(const graph::Partition& partition,
                             const std::string& dir, std::ostream& out) {
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create directory '", dir, "'"));
  }
  for (size_t r = 0; r < partition.rank_graphs.size(); ++r) {
    std::string path = absl::StrCat(dir, "/rank", r, ".pbtxt");
    RETURN_IF_ERROR(graph::WriteTextProto(
        path, partition.rank_graphs[r],
        absl::StrCat("rank ", r, " of the partitioned graph (rdmaflow plan)")));
    out << "wrote " << graph::DisplayText(path) << "\n";
  }
  return absl::OkStatus();
}

absl::Status Run(const ParsedArgs& args, const PlanSettings& settings,
                 std::ostream& out, std::ostream& err) {
  const int64_t max_input = settings.max_input_bytes;
  const std::string& path = args.positional[0];
  graph::GraphDef def;
  if (graph::IsExportedProgramFile(path)) {
    // The program carries its example's sizes; --input changes a dynamic
    // dimension (a static one must match).
    ASSIGN_OR_RETURN(def, graph::ImportExportedProgram(
                              path, settings.inputs.value_or(
                                        std::vector<graph::TensorSpec>())));
  } else if (IsTorchScriptFile(path)) {
    if (!settings.inputs.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, " is a TorchScript model: give the sizes of its inputs with --input "
          "(e.g. --input 64x1x28x28)"));
    }
    ASSIGN_OR_RETURN(def, graph::ImportTorchScript(path, *settings.inputs));
  } else {
    if (settings.inputs.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--input gives a model's input sizes (a .pt or .pt2 file); ", path,
          " is not one (a graph file carries its own shapes)"));
    }
    RETURN_IF_ERROR(ReadInput(path, &def, max_input));
  }
  if (settings.placement.has_value()) {
    ASSIGN_OR_RETURN(def, graph::PlaceTrainingGraph(def, *settings.placement));
  }
  if (args.Has("graph")) {
    RETURN_IF_ERROR(graph::WriteTextProto(
        args.Get("graph"), def, absl::StrCat("the graph planned from ", path,
                                             " (rdmaflow plan)")));
    out << "wrote " << graph::DisplayText(args.Get("graph")) << "\n";
  }
  if (def.node_size() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path,
                     ": graph has no nodes (is the file empty or only "
                     "comments?); nothing to plan"));
  }
  absl::StatusOr<graph::AnalyzedGraph> analyzed =
      graph::AnalyzeGraph(std::move(def));
  if (!analyzed.ok()) {
    return absl::Status(analyzed.status().code(),
                        absl::StrCat(path, ": ", analyzed.status().message()));
  }
  graph::Partition partition = graph::PartitionGraph(*analyzed);
  ASSIGN_OR_RETURN(plan::TransferPlan plan,
                   graph::BuildPlan(*analyzed, partition, settings.options));
  if (args.Has("trace")) {
    plan::SizeTrace trace;
    RETURN_IF_ERROR(ReadInput(args.Get("trace"), &trace, max_input));
    graph::TracingOptions tracing;
    tracing.min_steps = settings.min_trace_steps;
    ASSIGN_OR_RETURN(plan, graph::PromoteStableTensors(plan, trace, tracing));
  }
  out << (args.Has("quiet") ? graph::PlanSummaryLine(plan) + "\n"
                            : graph::FormatPlan(plan));
  if (plan.link_size() == 0 && settings.placement.has_value() &&
      settings.placement->strategy == "allreduce") {
    out << "note: under allreduce no tensor crosses between ranks in the plan: "
           "each replica keeps its own parameters and the gradients are "
           "all-reduced by the collective (docs/collectives.md), not written "
           "into slots\n";
  }
  if (std::optional<uint64_t> physical = PhysicalMemoryBytes()) {
    for (const std::string& warning :
         graph::RegisteredMemoryWarnings(plan, *physical)) {
      err << "rdmaflow plan: warning: " << warning << "\n";
    }
  }
  if (args.Has("out")) {
    RETURN_IF_ERROR(graph::WriteTextProto(
        args.Get("out"), plan,
        absl::StrCat("TransferPlan of ", path, " (rdmaflow plan)")));
    out << "wrote " << graph::DisplayText(args.Get("out")) << "\n";
  }
  if (args.Has("dot")) {
    RETURN_IF_ERROR(
        graph::WriteStringToFile(args.Get("dot"), graph::GraphToDot(*analyzed)));
    out << "wrote " << graph::DisplayText(args.Get("dot")) << "\n";
  }
  if (args.Has("partitions")) {
    RETURN_IF_ERROR(WritePartitions(partition, args.Get("partitions"), out));
  }
  return absl::OkStatus();
}

}  // namespace

std::string PlanUsage() {
  return R"(usage: rdmaflow plan GRAPH [options]
       rdmaflow plan MODEL.pt --input SIZES [--strategy STRATEGY[:key=value,...]] [options]
       rdmaflow plan MODEL.pt2 [--input SIZES] [--strategy ...] [options]

Reads a training dataflow graph (protobuf text format, rdmaflow.graph.GraphDef;
see graph_analyzer/graph.proto and docs/graph_analyzer.md), or a PyTorch
model saved as TorchScript (torch.jit.save of a traced or scripted module)
or by torch.export (torch.export.save: a .pt2 file), and imports its
training step: every parameter, activation and gradient
with its dtype and shape (docs/bring_your_model.md). It validates it,
infers every tensor's shape, partitions it by rank, and prints the transfer
plan: for each directed link (src -> dst rank) the tensors that cross it with
their dtype, shape, kind (static: a preallocated slot the sender writes every
step; dynamic: a metadata slot, then a one-sided read), bytes, slot offset and
live interval, and the receive region's size; then each rank's registered
memory. GRAPH must be a regular file (not a directory or a device) of at
most --max_input_bytes and hold at least one node. Control characters in
names are printed escaped (\x1b, \n, ...). A rank that would register more
memory than this machine has gets a warning on stderr (registration pins
memory; the plan is still printed and the exit status is unchanged).

options:
  --input SIZES          a model's input sizes: 64x1x28x28 (float32) or
                         64x16:int64; several separated by ','. Needed for
                         TorchScript; a .pt2 defaults to its export example's
                         (a dynamic dimension takes the size given here)
  --strategy SPEC        place the model's step (a model file's, or a
                         single-rank graph as rdmaflow_torch.export_graph
                         writes it) on a strategy's ranks, then plan:
                           ps[:servers=S,workers=W]           (default 1, 2)
                           allreduce[:workers=W]              (default 2)
                           layer_separated[:conv=C,fc=K,cut=NODE]
                                 (default 2, 1, before the first FC layer)
  --graph FILE           write the graph that was planned (imported, placed)
  --pipeline_depth N     buffers per slot, 1..16 (default 2): with 2 or more,
                         step t+1 can be written while step t is read
  --alignment BYTES      slot alignment, a power of two >= 64 (default 64)
  --metadata_bytes N     size of a dynamic tensor's metadata slot (default 128)
  --no_share             give every slot its own memory (by default slots of
                         tensors that are never live together share it)
  --min_shared_bytes N   only slots of at least N bytes share (default 262144:
                         a shared slot waits for its earlier tensor's release,
                         a round trip; 0 lets every slot share)
  --trace FILE           a SizeTrace (text format, graph_analyzer/plan.proto)
                         of shapes seen at run time: dynamic tensors whose
                         shape never changed are promoted to static slots
  --min_trace_steps N    steps a tensor must be seen to be promoted (default 2)
  --out FILE             write the plan (text format, rdmaflow.plan.TransferPlan)
  --dot FILE             write the graph as Graphviz DOT, one cluster per rank,
                         cross-rank edges labelled with their bytes per step
                         (render: dot -Tpng FILE -o graph.png)
  --partitions DIR       write each rank's graph, with its Send and Recv nodes,
                         to DIR/rank<N>.pbtxt
  --quiet                print only the one-line summary
  --max_input_bytes N    refuse a GRAPH or --trace file larger than N bytes
                         (default 67108864 = 64 MiB, at most 1073741824)
  -h, --help             this text
  --version              the version

exit status: 0 planned (also with warnings); 1 invalid graph or trace, an
empty graph, an input that is not a regular file or too large, --input for
a file that is not a model, or an I/O error (the message names the node,
tensor or file); 2 usage error: an unknown option, a missing GRAPH, a value
out of range or unparsable (--pipeline_depth, --input, --strategy, ...).
Flags may also be spelled with dashes (--pipeline-depth).

examples:
  rdmaflow plan graph_analyzer/testdata/mlp_2ranks.pbtxt --pipeline_depth 3 \
      --out plan.pbtxt --dot mlp.dot
  rdmaflow plan resnet.pt --input 64x3x32x32 --strategy ps:servers=2,workers=4 \
      --dot resnet_ps.dot
  rdmaflow plan resnet.pt2 --input 256x3x32x32 --strategy allreduce:workers=4
)";
}

int RunPlanCommand(const std::vector<std::string>& args, std::ostream& out,
                   std::ostream& err) {
  absl::StatusOr<ParsedArgs> parsed = ParseArgs(args, PlanFlags());
  if (!parsed.ok()) {
    err << "rdmaflow plan: " << graph::DisplayLines(parsed.status().message())
        << "\n";
    return kExitUsage;
  }
  if (parsed->help) {
    out << PlanUsage();
    return kExitOk;
  }
  if (parsed->positional.size() != 1) {
    err << "rdmaflow plan: expected one GRAPH file, got "
        << parsed->positional.size() << " (see rdmaflow plan --help)\n";
    return kExitUsage;
  }
  absl::StatusOr<PlanSettings> settings = SettingsFromArgs(*parsed);
  if (!settings.ok()) {
    err << "rdmaflow plan: " << graph::DisplayLines(settings.status().message())
        << " (see rdmaflow plan --help)\n";
    return kExitUsage;
  }
  absl::Status status = Run(*parsed, *settings, out, err);
  if (!status.ok()) {
    // Messages quote names and paths from the input: escape their control
    // characters.
    err << "rdmaflow plan: " << graph::DisplayLines(status.message()) << "\n";
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace rdmaflow::cli
