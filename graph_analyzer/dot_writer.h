// File: dot_writer.h
// -----------------------------------------------------------------------------
// GraphToDot: the analyzed graph in Graphviz DOT, one cluster per rank.
// Edges that cross ranks are drawn bold and labelled with the bytes moved per
// step ("dynamic" when the size is known only at run time). Names go through
// DisplayText (display_text.h), so control characters cannot break the file.
//
//   rdmaflow plan g.pbtxt --dot g.dot && dot -Tpng g.dot -o g.png
#ifndef RDMAFLOW_GRAPH_ANALYZER_DOT_WRITER_H_
#define RDMAFLOW_GRAPH_ANALYZER_DOT_WRITER_H_

#include <string>

#include "graph_analyzer/analyzed_graph.h"

namespace rdmaflow::graph {

std::string GraphToDot(const AnalyzedGraph& graph);

}  // namespace rdmaflow::graph

#endif  // RDMAFLOW_GRAPH_ANALYZER_DOT_WRITER_H_
