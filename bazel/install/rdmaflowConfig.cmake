# rdmaflow for CMake: find_package(rdmaflow CONFIG REQUIRED), then link
# rdmaflow::rdmaflow (installed by //:install under <prefix>/lib/cmake;
# docs/using_rdmaflow.md). Relocatable: paths are taken from this file's
# place. The target carries the include folder, C++17 and its dependencies
# (Abseil, protobuf, LibTorch), found with find_dependency.
get_filename_component(_rdmaflow_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT EXISTS "${_rdmaflow_prefix}/lib/librdmaflow.so")
  set(rdmaflow_FOUND FALSE)
  set(rdmaflow_NOT_FOUND_MESSAGE
      "${_rdmaflow_prefix}/lib/librdmaflow.so is missing: reinstall with 'bazel run -c opt //:install -- --prefix=${_rdmaflow_prefix}'")
  unset(_rdmaflow_prefix)
  return()
endif()

include(CMakeFindDependencyMacro)
find_dependency(absl CONFIG)
find_dependency(Protobuf)
find_dependency(Torch)

if(NOT TARGET rdmaflow::rdmaflow)
  add_library(rdmaflow::rdmaflow SHARED IMPORTED)
  set_target_properties(rdmaflow::rdmaflow PROPERTIES
    IMPORTED_LOCATION "${_rdmaflow_prefix}/lib/librdmaflow.so"
    IMPORTED_SONAME "librdmaflow.so"
    INTERFACE_INCLUDE_DIRECTORIES "${_rdmaflow_prefix}/include/rdmaflow"
    INTERFACE_COMPILE_FEATURES cxx_std_17
    INTERFACE_LINK_LIBRARIES
      "absl::status;absl::statusor;absl::strings;absl::str_format;absl::time;absl::synchronization;absl::flat_hash_map;absl::flat_hash_set;absl::hash;protobuf::libprotobuf;torch")
endif()
unset(_rdmaflow_prefix)
