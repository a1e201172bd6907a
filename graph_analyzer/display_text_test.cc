// File: display_text_test.cc
#include "graph_analyzer/display_text.h"

#include "gtest/gtest.h"

namespace rdmaflow::graph {
namespace {

TEST(DisplayTextTest, PrintableTextIsUnchanged) {
  EXPECT_EQ(DisplayText("conv1/weight:0"), "conv1/weight:0");
  EXPECT_EQ(DisplayText("caf\xc3\xa9 \xe2\x86\x92 \xf0\x9f\x98\x80"),
            "caf\xc3\xa9 \xe2\x86\x92 \xf0\x9f\x98\x80");
}

TEST(DisplayTextTest, ControlCharactersAreEscaped) {
  EXPECT_EQ(DisplayText("a\x1b[2Jb"), "a\\x1b[2Jb");
  EXPECT_EQ(DisplayText("x\ny\rz\t"), "x\\ny\\rz\\t");
  EXPECT_EQ(DisplayText(std::string("nul\0bell\a del\x7f", 14)),
            "nul\\x00bell\\x07 del\\x7f");
  EXPECT_EQ(DisplayText("back\\slash"), "back\\\\slash");
}

TEST(DisplayTextTest, InvalidUtf8AndC1ControlsAreEscapedBytewise) {
  EXPECT_EQ(DisplayText("\x9b"
                        "31m"),
            "\\x9b31m");  // 8-bit CSI.
  EXPECT_EQ(DisplayText("\xc2\x9b"
                        "31m"),
            "\\xc2\\x9b31m");                                 // U+009B.
  EXPECT_EQ(DisplayText("\xc3"), "\\xc3");                    // Truncated.
  EXPECT_EQ(DisplayText("\xc0\xaf"), "\\xc0\\xaf");           // Overlong '/'.
  EXPECT_EQ(DisplayText("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // Surrogate.
}

TEST(DisplayTextTest, LinesKeepNewlinesAndBackslashes) {
  EXPECT_EQ(DisplayLines("f.pbtxt:1:2: bad\nnode 'a\x1b' C:\\x"),
            "f.pbtxt:1:2: bad\nnode 'a\\x1b' C:\\x");
}

}  // namespace
}  // namespace rdmaflow::graph
