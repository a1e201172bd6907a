// File: display_text.h
// -----------------------------------------------------------------------------
// Names in a graph are arbitrary strings from its author: a node called
// "\x1b[2J" would clear the terminal of whoever prints the plan, and one
// with a newline would forge lines of a table. DisplayText makes such text
// safe to print: control characters, backslashes and bytes that are not
// valid UTF-8 become C-style escapes; everything printable (UTF-8 included)
// is kept, so ordinary names print as they are.
#ifndef RDMAFLOW_GRAPH_ANALYZER_DISPLAY_TEXT_H_
#define RDMAFLOW_GRAPH_ANALYZER_DISPLAY_TEXT_H_

#include <string>

#include "absl/strings/string_view.h"

namespace rdmaflow::graph {

// `text` with "\\" for a backslash, "\n", "\r", "\t" for those, and "\xHH"
// for every other C0 control, DEL, C1 control (U+0080 .. U+009F) and byte
// that is not part of valid UTF-8. Injective: distinct texts stay distinct.
std::string DisplayText(absl::string_view text);

// For messages (which quote names and input): newlines and backslashes are
// kept, so multi-line parse errors and paths read as before; every other
// byte is escaped as by DisplayText. Not injective.
std::string DisplayLines(absl::string_view text);

}  // namespace rdmaflow::graph

#endif  // RDMAFLOW_GRAPH_ANALYZER_DISPLAY_TEXT_H_
