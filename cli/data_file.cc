// File: data_file.cc
#include "cli/data_file.h"

#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <vector>

namespace rdmaflow::cli {

std::optional<std::string> FindDataFile(const std::string& relative) {
  namespace fs = std::filesystem;
  std::vector<fs::path> roots = {fs::path(".")};
  if (const char* workspace = std::getenv("BUILD_WORKSPACE_DIRECTORY");
      workspace != nullptr && *workspace != '\0') {
    roots.emplace_back(workspace);
  }
  std::error_code error;
  fs::path exe = fs::read_symlink("/proc/self/exe", error);
  if (!error) {
    for (fs::path dir = exe.parent_path(); !dir.empty() && dir != dir.root_path();
         dir = dir.parent_path()) {
      roots.push_back(dir);
    }
  }
  for (const fs::path& root : roots) {
    const fs::path candidate = root / relative;
    if (fs::is_regular_file(candidate, error)) {
      return root == fs::path(".") ? relative : candidate.string();
    }
  }
  return std::nullopt;
}

}  // namespace rdmaflow::cli
