// File: display_text.cc
#include "graph_analyzer/display_text.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace rdmaflow::graph {
namespace {

// Length of the valid, non-control UTF-8 sequence starting `text[i]` (a
// byte >= 0x80), or 0 if there is none (then the byte is escaped).
size_t Utf8Printable(absl::string_view text, size_t i) {
  auto byte = [&](size_t k) { return static_cast<uint8_t>(text[k]); };
  uint8_t lead = byte(i);
  size_t length = 0;
  uint32_t code = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
    code = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    code = lead & 0x0F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    code = lead & 0x07;
  } else {
    return 0;  // A continuation byte or an invalid lead.
  }
  if (i + length > text.size()) return 0;
  for (size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    code = (code << 6) | (byte(i + k) & 0x3F);
  }
  // Overlong forms, surrogates, beyond U+10FFFF and C1 controls.
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (code < kMin[length] || (code >= 0xD800 && code <= 0xDFFF) ||
      code > 0x10FFFF || code <= 0x9F) {
    return 0;
  }
  return length;
}

// `lines`: keep newlines and backslashes (see DisplayLines).
void Append(absl::string_view text, bool lines, std::string& out) {
  for (size_t i = 0; i < text.size();) {
    char c = text[i];
    auto u = static_cast<uint8_t>(c);
    if (u >= 0x80) {
      if (size_t n = Utf8Printable(text, i); n > 0) {
        out.append(text.data() + i, n);
        i += n;
      } else {
        absl::StrAppendFormat(&out, "\\x%02x", u);
        ++i;
      }
      continue;
    }
    ++i;
    if (c == '\\') {
      out += lines ? "\\" : "\\\\";
    } else if (c == '\n') {
      out += lines ? "\n" : "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7F) {
      absl::StrAppendFormat(&out, "\\x%02x", u);
    } else {
      out.push_back(c);
    }
  }
}

}  // namespace

std::string DisplayText(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  Append(text, /*lines=*/false, out);
  return out;
}

std::string DisplayLines(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  Append(text, /*lines=*/true, out);
  return out;
}

}  // namespace rdmaflow::graph
