// File: plan_printer.h
// -----------------------------------------------------------------------------
// Human-readable views of a plan: a table per link (every tensor with its
// spec, kind, bytes, slot offset and live interval; the region's size) and a
// table per rank (receive, send and registered bytes, regions). Names are
// printed through DisplayText (display_text.h): control characters escaped.
#ifndef RDMAFLOW_GRAPH_ANALYZER_PLAN_PRINTER_H_
#define RDMAFLOW_GRAPH_ANALYZER_PLAN_PRINTER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "graph_analyzer/plan.pb.h"

namespace rdmaflow::graph {

// One line: graph, ranks, links, tensors, registered bytes.
std::string PlanSummaryLine(const plan::TransferPlan& plan);

// The link tables, then the rank table.
std::string FormatPlan(const plan::TransferPlan& plan);

// One line for each rank whose registered bytes exceed `physical_bytes`
// (the memory of the machine planning, as a stand-in for the ranks' own):
// such a plan cannot be registered there. Empty when every rank fits.
std::vector<std::string> RegisteredMemoryWarnings(
    const plan::TransferPlan& plan, uint64_t physical_bytes);

}  // namespace rdmaflow::graph

#endif  // RDMAFLOW_GRAPH_ANALYZER_PLAN_PRINTER_H_
