// File: key_value_params.cc
#include "common/key_value_params.h"

#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"

namespace rdmaflow {

absl::Status KeyValueParams::Int(const std::string& key, int64_t minimum,
                                 int64_t* value) {
  known_.push_back(key);
  auto it = params_.find(key);
  if (it == params_.end()) return absl::OkStatus();
  int64_t parsed = 0;
  if (!absl::SimpleAtoi(it->second, &parsed) || parsed < minimum) {
    return absl::InvalidArgumentError(absl::StrCat(
        owner_, " ", key, " must be an integer >= ", minimum, ", got '",
        it->second, "'"));
  }
  *value = parsed;
  return absl::OkStatus();
}

absl::Status KeyValueParams::Int(const std::string& key, int minimum, int* value) {
  int64_t wide = *value;
  RETURN_IF_ERROR(Int(key, static_cast<int64_t>(minimum), &wide));
  if (wide > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(owner_, " ", key, " must be an integer in ",
                                                   minimum, "..",
                                                   std::numeric_limits<int>::max(), ", got '",
                                                   params_.at(key), "'"));
  }
  *value = static_cast<int>(wide);
  return absl::OkStatus();
}

absl::Status KeyValueParams::Real(const std::string& key, double minimum,
                                  double maximum, double* value) {
  known_.push_back(key);
  auto it = params_.find(key);
  if (it == params_.end()) return absl::OkStatus();
  double parsed = 0;
  if (!absl::SimpleAtod(it->second, &parsed) || !(parsed >= minimum) ||
      !(parsed <= maximum)) {
    return absl::InvalidArgumentError(absl::StrCat(
        owner_, " ", key, " must be a number in [", minimum, ", ", maximum,
        "], got '", it->second, "'"));
  }
  *value = parsed;
  return absl::OkStatus();
}

absl::Status KeyValueParams::Size(const std::string& key, int64_t minimum,
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
  if (!absl::SimpleAtoi(text, &parsed) || parsed < 0 ||
      parsed > std::numeric_limits<int64_t>::max() / scale || parsed * scale < minimum) {
    return absl::InvalidArgumentError(absl::StrCat(
        owner_, " ", key, " must be a byte size >= ", minimum,
        " (suffixes K, M, G), got '", it->second, "'"));
  }
  *value = parsed * scale;
  return absl::OkStatus();
}

absl::Status KeyValueParams::SizeOrAuto(const std::string& key, int64_t minimum,
                                        int64_t automatic, int64_t* value) {
  if (auto it = params_.find(key); it != params_.end() && it->second == "auto") {
    known_.push_back(key);
    *value = automatic;
    return absl::OkStatus();
  }
  absl::Status size = Size(key, minimum, value);
  if (size.ok()) return size;
  return absl::InvalidArgumentError(absl::StrCat(size.message(), ", or auto"));
}

absl::Status KeyValueParams::Choice(const std::string& key,
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
      owner_, " ", key, " must be one of ", absl::StrJoin(choices, ", "),
      "; got '", it->second, "'"));
}

absl::Status KeyValueParams::Done() const {
  for (const auto& [key, value] : params_) {
    bool known = false;
    for (const std::string& k : known_) known = known || k == key;
    if (!known) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown ", owner_, " parameter '", key, "'; known: ",
          known_.empty() ? std::string("none") : absl::StrJoin(known_, ", ")));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, std::string>> ParseKeyValues(absl::string_view text,
                                                                  absl::string_view what) {
  std::map<std::string, std::string> params;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (item.find('=') == absl::string_view::npos || kv.first.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " '", item, "' is not of the form key=value"));
    }
    if (!params.emplace(std::string(kv.first), std::string(kv.second)).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " '", kv.first, "' is given twice ('", params[std::string(kv.first)], "' and '",
          kv.second, "'); give it once"));
    }
  }
  return params;
}

}  // namespace rdmaflow
