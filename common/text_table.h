// File: text_table.h
// -----------------------------------------------------------------------------
// TextTable: a plain-text table with aligned columns, for CLI output.
//
//   TextTable table({"rank", "bytes"});
//   table.AddRow({"0", "4096"});
//   std::cout << table.Render("  ");
//
// Also FormatBytes: "1.50 MiB".
#ifndef RDMAFLOW_COMMON_TEXT_TABLE_H_
#define RDMAFLOW_COMMON_TEXT_TABLE_H_

#include <cstdint>
#include <string>
#include <vector>

namespace rdmaflow {

// Thread-compatible.
class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header);

  // A row with fewer cells than the header is padded with empty ones.
  void AddRow(std::vector<std::string> cells);
  // A dashed line across all columns, before the next row.
  void AddSeparator();

  // Every line starts with `indent`; columns are separated by two spaces;
  // cells that look numeric are right-aligned.
  std::string Render(const std::string& indent = "") const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;  // Empty row = separator.
};

// Bytes in binary units with three significant digits: "512 B", "1.50 KiB",
// "25.6 MiB".
std::string FormatBytes(uint64_t bytes);

}  // namespace rdmaflow

#endif  // RDMAFLOW_COMMON_TEXT_TABLE_H_
