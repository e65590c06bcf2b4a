// Typed reads of JSON fields with one-line errors naming the field, shared by the documents
// gpufrac keeps on Kubernetes objects (inventory, assignment).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

#include "common/status.h"

namespace gpufrac::k8s {

// object[key] as T. A missing key gives `fallback` when one is passed, else an error; a value of
// the wrong type (or a negative number for an unsigned T) is always an error.
template <typename T>
StatusOr<T> JsonField(const nlohmann::json& object, std::string_view key, std::string_view where,
                      const T* fallback = nullptr) {
  std::string name = std::string(where) + "." + std::string(key);
  if (!object.is_object()) return InvalidArgumentError(std::string(where) + " is not an object");
  auto it = object.find(std::string(key));
  if (it == object.end()) {
    if (fallback != nullptr) return *fallback;
    return InvalidArgumentError(name + " is missing");
  }
  const nlohmann::json& v = *it;
  bool ok;
  if constexpr (std::is_same_v<T, bool>) {
    ok = v.is_boolean();
  } else if constexpr (std::is_same_v<T, std::string>) {
    ok = v.is_string();
  } else if constexpr (std::is_unsigned_v<T>) {
    ok = v.is_number_unsigned();
  } else if constexpr (std::is_integral_v<T>) {
    ok = v.is_number_integer();
  } else {
    ok = v.is_object() || v.is_array();
  }
  if (!ok) return InvalidArgumentError(name + " has the wrong type: " + v.dump());
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (std::is_unsigned_v<T> ? v.get<uint64_t>() > std::numeric_limits<T>::max()
                              : (v.get<int64_t>() < std::numeric_limits<T>::min() ||
                                 v.get<int64_t>() > std::numeric_limits<T>::max())) {
      return InvalidArgumentError(name + " is out of range: " + v.dump());
    }
  }
  return v.get<T>();
}

}  // namespace gpufrac::k8s
