// File: trace_recorder.cc
#include "runtime/trace_recorder.h"

#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace rdmaflow::runtime {
namespace {

const char* LaneName(TraceRecorder::Lane lane) {
  switch (lane) {
    case TraceRecorder::Lane::kSend:
      return "send";
    case TraceRecorder::Lane::kRecv:
      return "recv";
    case TraceRecorder::Lane::kPull:
      return "pull";
    case TraceRecorder::Lane::kWait:
      return "slot wait";
  }
  return "?";
}

// Tensor names are graph node names ("layer/w:0"); escape what JSON needs.
std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

void TraceRecorder::Add(Lane lane, const std::string& tensor, absl::Time begin,
                        absl::Time end, int peer, int64_t step,
                        uint64_t bytes) {
  if (!enabled_) return;
  events_.push_back(Event{lane, tensor, absl::ToUnixMicros(begin),
                          absl::ToInt64Microseconds(end - begin), peer, step,
                          bytes});
}

std::string TraceRecorder::ToJson() const {
  std::string out = "{\"traceEvents\": [\n";
  // Name the rows: process = rank, threads = lanes.
  absl::StrAppend(&out, "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": ",
                  rank_, ", \"args\": {\"name\": \"rank ", rank_, "\"}}");
  for (int lane = 0; lane < 4; ++lane) {
    absl::StrAppend(
        &out, ",\n{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": ", rank_,
        ", \"tid\": ", lane, ", \"args\": {\"name\": \"",
        LaneName(static_cast<Lane>(lane)), "\"}}");
  }
  for (const Event& e : events_) {
    absl::StrAppend(&out, ",\n{\"ph\": \"X\", \"name\": \"",
                    JsonEscape(e.tensor), "\", \"cat\": \"",
                    LaneName(e.lane), "\", \"pid\": ", rank_, ", \"tid\": ",
                    static_cast<int>(e.lane), ", \"ts\": ", e.begin_us,
                    ", \"dur\": ", e.duration_us, ", \"args\": {\"peer\": ",
                    e.peer, ", \"step\": ", e.step, ", \"bytes\": ", e.bytes,
                    "}}");
  }
  out += "\n]}\n";
  return out;
}

absl::Status TraceRecorder::WriteFile(const std::string& path) const {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file << ToJson();
  file.close();
  if (!file) {
    return absl::UnavailableError(absl::StrCat(
        "cannot write the transfer trace to '", path,
        "': does the directory exist and is it writable?"));
  }
  return absl::OkStatus();
}

}  // namespace rdmaflow::runtime
