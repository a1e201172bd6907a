// File: plan_printer.h
// -----------------------------------------------------------------------------
// Human-readable views of a plan: a table per link (every tensor with its
// spec, kind, bytes, slot offset and live interval; the region's size) and a
// table per rank (receive, send and registered bytes, regions).
#ifndef RDMAFLOW_GRAPH_ANALYZER_PLAN_PRINTER_H_
#define RDMAFLOW_GRAPH_ANALYZER_PLAN_PRINTER_H_

#include <string>

#include "graph_analyzer/plan.pb.h"

namespace rdmaflow::graph {

// One line: graph, ranks, links, tensors, registered bytes.
std::string PlanSummaryLine(const plan::TransferPlan& plan);

// The link tables, then the rank table.
std::string FormatPlan(const plan::TransferPlan& plan);

}  // namespace rdmaflow::graph

#endif  // RDMAFLOW_GRAPH_ANALYZER_PLAN_PRINTER_H_
