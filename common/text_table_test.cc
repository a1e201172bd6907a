// File: text_table_test.cc
#include "common/text_table.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow {
namespace {

TEST(TextTableTest, AlignsColumnsAndRightAlignsNumbers) {
  TextTable table({"name", "bytes"});
  table.AddRow({"a", "5"});
  table.AddRow({"longer", "1234"});
  table.AddSeparator();
  table.AddRow({"total", "1239"});
  EXPECT_EQ(table.Render("> "),
            "> name    bytes\n"
            "> -------------\n"
            "> a           5\n"
            "> longer   1234\n"
            "> -------------\n"
            "> total    1239\n");
}

TEST(TextTableTest, PadsShortRows) {
  TextTable table({"a", "b", "c"});
  table.AddRow({"x"});
  EXPECT_EQ(table.Render(), "a  b  c\n-------\nx\n");
}

TEST(FormatBytesTest, UsesBinaryUnitsWithThreeDigits) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1024), "1.00 KiB");
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  EXPECT_EQ(FormatBytes(25600 * 1024), "25.0 MiB");
  EXPECT_EQ(FormatBytes(uint64_t{300} << 30), "300 GiB");
}

}  // namespace
}  // namespace rdmaflow
