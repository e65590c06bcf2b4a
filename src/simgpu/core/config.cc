// Parsing of the simulated machine's environment configuration.
#include "simgpu/core/config.h"

#include <charconv>
#include <cstdlib>

#include "gpu/mig_catalogue.h"

namespace gpufrac::simgpu {
namespace {

std::string_view Trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

std::string EnvOr(const char* name, std::string_view fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::string(fallback);
  return value;
}

// Splits "3xA30-24GB" into a count and a model name; a bare "A30-24GB" means one.
bool ParseItem(std::string_view item, int* count, std::string_view* name) {
  *count = 1;
  *name = item;
  const std::size_t x = item.find_first_of("xX");
  if (x == std::string_view::npos || x == 0) return true;
  std::string_view digits = item.substr(0, x);
  int parsed = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), parsed);
  if (ec != std::errc() || end != digits.data() + digits.size()) return true;  // no count prefix
  *count = parsed;
  *name = item.substr(x + 1);
  return true;
}

}  // namespace

bool ParseMachineConfig(std::string_view text, MachineConfig* config, std::string* error) {
  *config = MachineConfig{};
  std::string_view rest = text;
  while (true) {
    const std::size_t comma = rest.find(',');
    const std::string_view item = Trim(rest.substr(0, comma));
    if (item.empty()) {
      *error = "empty item in SIMGPU_CONFIG \"" + std::string(text) + "\"";
      return false;
    }
    int count = 0;
    std::string_view name;
    ParseItem(item, &count, &name);
    bool mig = false;
    if (const std::size_t colon = name.find(':'); colon != std::string_view::npos) {
      const std::string_view option = Trim(name.substr(colon + 1));
      name = Trim(name.substr(0, colon));
      if (option != "mig" && option != "MIG") {
        *error = "unknown option \"" + std::string(option) + "\" in SIMGPU_CONFIG item \"" +
                 std::string(item) + "\" (the only option is \":mig\")";
        return false;
      }
      mig = true;
    }
    const gpu::GpuModel* model = gpu::FindModel(name);
    if (model == nullptr) {
      std::string known;
      for (const gpu::GpuModel& m : gpu::AllModels()) {
        if (!known.empty()) known += ", ";
        known += m.short_name;
      }
      *error =
          "unknown GPU model \"" + std::string(name) + "\" in SIMGPU_CONFIG (known: " + known + ")";
      return false;
    }
    if (count < 1 || count > kMaxDevices - config->device_count) {
      *error = "SIMGPU_CONFIG \"" + std::string(text) + "\" must describe 1 to " +
               std::to_string(kMaxDevices) + " GPUs";
      return false;
    }
    if (mig && gpu::FindMigModel(*model) == nullptr) {
      *error = "SIMGPU_CONFIG item \"" + std::string(item) + "\": the " +
               std::string(model->short_name) + " has no MIG";
      return false;
    }
    for (int i = 0; i < count; ++i) {
      config->mig[config->device_count] = mig;
      config->models[config->device_count++] = model;
    }
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return true;
}

std::string FormatMachineConfig(const MachineConfig& config) {
  std::string text;
  int i = 0;
  while (i < config.device_count) {
    int run = 1;
    while (i + run < config.device_count && config.models[i + run] == config.models[i] &&
           config.mig[i + run] == config.mig[i]) {
      ++run;
    }
    if (!text.empty()) text += ',';
    text += std::to_string(run) + "x" + std::string(config.models[i]->short_name);
    if (config.mig[i]) text += ":mig";
    i += run;
  }
  return text;
}

std::string ConfigTextFromEnv() { return EnvOr("SIMGPU_CONFIG", kDefaultConfig); }

std::string NamespaceFromEnv() { return EnvOr("SIMGPU_NAMESPACE", kDefaultNamespace); }

std::uint64_t TimesliceNsFromEnv() {
  constexpr std::uint64_t kMaxUs = 10000000;
  const std::string text = EnvOr("SIMGPU_TIMESLICE_US", "");
  std::uint64_t us = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), us);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || us == 0 ||
      us > kMaxUs) {
    return kDefaultTimesliceNs;
  }
  return us * 1000;
}

int DriverVersionFromEnv() {
  const std::string text = EnvOr("SIMGPU_DRIVER_VERSION", "");
  int version = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), version);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || version <= 0) {
    return kDefaultDriverVersion;
  }
  return version;
}

}  // namespace gpufrac::simgpu
