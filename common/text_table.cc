// File: text_table.cc
#include "common/text_table.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace rdmaflow {
namespace {

bool LooksNumeric(const std::string& cell) {
  return !cell.empty() &&
         (absl::ascii_isdigit(cell[0]) ||
          (cell.size() > 1 && cell[0] == '-' && absl::ascii_isdigit(cell[1])));
}

}  // namespace

TextTable::TextTable(std::vector<std::string> header)
    : header_(std::move(header)) {}

void TextTable::AddRow(std::vector<std::string> cells) {
  cells.resize(std::max(cells.size(), header_.size()));
  if (std::all_of(cells.begin(), cells.end(),
                  [](const std::string& c) { return c.empty(); })) {
    cells[0] = " ";  // Keep an all-empty row distinct from a separator.
  }
  rows_.push_back(std::move(cells));
}

void TextTable::AddSeparator() { rows_.emplace_back(); }

std::string TextTable::Render(const std::string& indent) const {
  std::vector<size_t> width(header_.size(), 0);
  auto measure = [&](const std::vector<std::string>& row) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) {
      width[i] = std::max(width[i], row[i].size());
    }
  };
  measure(header_);
  for (const auto& row : rows_) measure(row);
  size_t total = 0;
  for (size_t w : width) total += w + 2;
  std::string out;
  auto render = [&](const std::vector<std::string>& row, bool header) {
    std::string line = indent;
    for (size_t i = 0; i < width.size(); ++i) {
      const std::string cell = i < row.size() ? row[i] : "";
      std::string pad(width[i] - cell.size(), ' ');
      bool right = !header && LooksNumeric(cell);
      absl::StrAppend(&line, right ? pad : "", cell, right ? "" : pad,
                      i + 1 < width.size() ? "  " : "");
    }
    absl::StrAppend(&out, absl::StripTrailingAsciiWhitespace(line), "\n");
  };
  render(header_, true);
  absl::StrAppend(&out, indent, std::string(total > 2 ? total - 2 : 0, '-'),
                  "\n");
  for (const auto& row : rows_) {
    if (row.empty()) {
      absl::StrAppend(&out, indent, std::string(total > 2 ? total - 2 : 0, '-'),
                      "\n");
    } else {
      render(row, false);
    }
  }
  return out;
}

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B",   "KiB", "MiB",
                                           "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  double value = bytes;
  int unit = 0;
  while (value >= 1024 && unit < 6) {
    value /= 1024;
    ++unit;
  }
  int decimals = value < 10 ? 2 : value < 100 ? 1 : 0;
  return absl::StrFormat("%.*f %s", decimals, value, kUnits[unit]);
}

}  // namespace rdmaflow
