// File: strategy_params.cc
#include "strategies/strategy_params.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rdmaflow::strategies {

absl::Status StrategyParams::Int(const std::string& key, int64_t minimum,
                                 int64_t* value) {
  known_.push_back(key);
  auto it = params_.find(key);
  if (it == params_.end()) return absl::OkStatus();
  int64_t parsed = 0;
  if (!absl::SimpleAtoi(it->second, &parsed) || parsed < minimum) {
    return absl::InvalidArgumentError(absl::StrCat(
        strategy_, " ", key, " must be an integer >= ", minimum, ", got '",
        it->second, "'"));
  }
  *value = parsed;
  return absl::OkStatus();
}

absl::Status StrategyParams::Int(const std::string& key, int minimum, int* value) {
  int64_t wide = *value;
  absl::Status status = Int(key, static_cast<int64_t>(minimum), &wide);
  if (status.ok()) *value = static_cast<int>(wide);
  return status;
}

absl::Status StrategyParams::Real(const std::string& key, double minimum,
                                  double maximum, double* value) {
  known_.push_back(key);
  auto it = params_.find(key);
  if (it == params_.end()) return absl::OkStatus();
  double parsed = 0;
  if (!absl::SimpleAtod(it->second, &parsed) || !(parsed >= minimum) ||
      !(parsed <= maximum)) {
    return absl::InvalidArgumentError(absl::StrCat(
        strategy_, " ", key, " must be a number in [", minimum, ", ", maximum,
        "], got '", it->second, "'"));
  }
  *value = parsed;
  return absl::OkStatus();
}

absl::Status StrategyParams::Size(const std::string& key, int64_t minimum,
                                  int64_t* value) {
  known_.push_back(key);
  auto it = params_.find(key);
  if (it == params_.end()) return absl::OkStatus();
  std::string text = absl::AsciiStrToUpper(it->second);
  int64_t scale = 1;
  if (!text.empty() && (text.back() == 'K' || text.back() == 'M' || text.back() == 'G')) {
    scale = text.back() == 'K' ? 1 << 10 : text.back() == 'M' ? 1 << 20 : 1 << 30;
    text.pop_back();
  }
  int64_t parsed = 0;
  if (!absl::SimpleAtoi(text, &parsed) || parsed * scale < minimum) {
    return absl::InvalidArgumentError(absl::StrCat(
        strategy_, " ", key, " must be a byte size >= ", minimum,
        " (suffixes K, M, G), got '", it->second, "'"));
  }
  *value = parsed * scale;
  return absl::OkStatus();
}

absl::Status StrategyParams::Choice(const std::string& key,
                                    const std::vector<std::string>& choices,
                                    std::string* value) {
  known_.push_back(key);
  auto it = params_.find(key);
  if (it == params_.end()) return absl::OkStatus();
  for (const std::string& choice : choices) {
    if (it->second == choice) {
      *value = choice;
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      strategy_, " ", key, " must be one of ", absl::StrJoin(choices, ", "),
      "; got '", it->second, "'"));
}

absl::Status StrategyParams::Done() const {
  for (const auto& [key, value] : params_) {
    bool known = false;
    for (const std::string& k : known_) known = known || k == key;
    if (!known) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown ", strategy_, " parameter '", key, "'; known: ",
          known_.empty() ? std::string("none") : absl::StrJoin(known_, ", ")));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckTrainingOptions(const std::string& strategy, int64_t steps,
                                  double learning_rate, double momentum) {
  if (steps >= 1 && learning_rate > 0 && momentum >= 0 && momentum < 1) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      strategy, " needs steps >= 1, a positive learning rate and 0 <= momentum < 1 "
      "(got steps ", steps, ", lr ", learning_rate, ", momentum ", momentum, ")"));
}

}  // namespace rdmaflow::strategies
