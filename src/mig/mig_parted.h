// NVIDIA mig-parted configuration files (`version: v1`), parsed and validated in one place before
// anything is applied, the explicit placements that realise a GPU's layout whatever the order
// of its entries, and the export of a node's current layout in the same format.
//
//   version: v1
//   mig-configs:
//     balanced:
//       - devices: all                   # or a list of GPU indexes: [0, 1]
//         device-filter: ["0x233010DE"]  # optional: PCI device ids (device << 16 | 0x10DE)
//         mig-enabled: true
//         mig-devices:
//           "1g.10gb": 2
//           "2g.20gb": 1
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "gpu/catalogue.h"
#include "gpu/mig_catalogue.h"

namespace gpufrac::mig {

struct MigPartedEntry {
  bool all_devices = false;
  std::vector<int> devices;                // When not all_devices.
  std::vector<std::string> device_filter;  // Empty: every model.
  bool mig_enabled = false;
  std::vector<std::pair<std::string, int>> mig_devices;  // Profile name -> count, file order.
  int line = 0;                                          // For messages.
};

struct MigPartedConfig {
  std::string name;
  std::vector<MigPartedEntry> entries;
};

struct MigPartedFile {
  std::vector<MigPartedConfig> configs;
  // The config called `name`, or nullptr.
  const MigPartedConfig* Find(const std::string& name) const;
};

// Parses and validates (version, keys, types, counts >= 0, profile names well-formed); errors
// are kInvalidArgument "SOURCE:LINE: what to fix", one line. Unknown keys are errors.
StatusOr<MigPartedFile> ParseMigParted(const std::string& yaml, const std::string& source);
StatusOr<MigPartedFile> LoadMigParted(const std::string& path);

// Whether `entry` applies to GPU `index` of `model` (devices and device-filter).
bool EntryMatches(const MigPartedEntry& entry, int index, const gpu::GpuModel& model);

struct LayoutInstance {
  int profile = 0;  // Index into the model's profiles.
  gpu::MigPlacement placement;
};

// Explicit placements for the instances `mig_devices` asks for on an empty GPU of `model`,
// found by search, so that a layout that fits at all is found whatever the order it is written
// in (creating instances in file order at the driver's lowest free start can fail where another
// order succeeds). Errors, one line: a profile the model does not have (kNotFound, listing its
// profiles); more than a profile's max count or no arrangement that fits (kInvalidArgument,
// naming the layout and the model).
StatusOr<std::vector<LayoutInstance>> PlaceLayout(
    const gpu::MigModel& model, const std::vector<std::pair<std::string, int>>& mig_devices);

// One GPU's current layout, for export.
struct GpuLayout {
  int index = 0;
  const gpu::MigModel* model = nullptr;  // Null for a GPU without MIG.
  bool mig_enabled = false;
  std::vector<int> profiles;  // Profile index of each instance.
};

// The layout as a mig-parted file with one config called `name`: one entry per GPU (devices:
// [i]), profiles counted by name in catalogue order. ParseMigParted reads it back.
std::string ExportMigParted(const std::string& name, const std::vector<GpuLayout>& gpus);

}  // namespace gpufrac::mig
