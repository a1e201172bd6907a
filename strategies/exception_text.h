// File: exception_text.h
// -----------------------------------------------------------------------------
// ExceptionText: what an exception from a model's code (LibTorch, a user's
// TorchScript) says, for an absl::Status message: a c10::Error's message
// without the C++ backtrace LibTorch appends, any other exception's what().
#ifndef RDMAFLOW_STRATEGIES_EXCEPTION_TEXT_H_
#define RDMAFLOW_STRATEGIES_EXCEPTION_TEXT_H_

#include <c10/util/Exception.h>

#include <exception>
#include <string>

namespace rdmaflow::strategies {

inline std::string ExceptionText(const std::exception& e) {
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) {
    return c10->what_without_backtrace();
  }
  return e.what();
}

}  // namespace rdmaflow::strategies

#endif  // RDMAFLOW_STRATEGIES_EXCEPTION_TEXT_H_
