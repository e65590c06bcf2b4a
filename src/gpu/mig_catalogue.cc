// The MIG GPU instance profile tables of every MIG-capable catalogue model, the names derived from
// them, and their lookups. Profile data is constexpr; the only run-time step binds each table to
// its catalogue model once. No heap (except MigProfileName's string), no exceptions.
#include "gpu/mig_catalogue.h"

#include <array>
#include <initializer_list>

namespace gpufrac::gpu {
namespace {

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;

// NVML's GPU instance profile selectors (nvml.h, NVML_GPU_INSTANCE_PROFILE_*): what
// nvmlDeviceGetGpuInstanceProfileInfo takes.
constexpr unsigned kNvml1Slice = 0;
constexpr unsigned kNvml2Slice = 1;
constexpr unsigned kNvml3Slice = 2;
constexpr unsigned kNvml4Slice = 3;
constexpr unsigned kNvml7Slice = 4;
constexpr unsigned kNvml1SliceRev1 = 7;  // 1g with media extensions.
constexpr unsigned kNvml2SliceRev1 = 8;  // 2g with media extensions (A30).
constexpr unsigned kNvml1SliceRev2 = 9;  // 1g with two memory slices.

// One profile row: the NVML selector and profile id, slices, memory in MiB, the most instances,
// +me, and the legal starts (each placement is `memory_slices` wide).
constexpr MigProfile Row(unsigned nvml_id, unsigned profile_id, int compute_slices,
                         int memory_slices, std::uint64_t memory_mib, int max_count,
                         bool media_extensions, std::initializer_list<int> starts) {
  MigProfile p;
  p.nvml_id = nvml_id;
  p.profile_id = profile_id;
  p.compute_slices = compute_slices;
  p.memory_slices = memory_slices;
  p.memory_bytes = memory_mib * kMiB;
  p.max_count = max_count;
  p.media_extensions = media_extensions;
  for (int start : starts) {
    p.starts[p.start_count++] = MigPlacement{.start = start, .size = memory_slices};
  }
  return p;
}

// Per-instance memory in MiB of the seven profiles of an 8-slice GPU, by memory slices.
struct EightSliceMemory {
  std::uint64_t one, two, four, eight;
};

// The profile set every 8-memory-slice, 7-compute-slice GPU has (A100, H100, H200, B200): the
// placements NVIDIA's MIG user guide draws for A100 and H100 and nvidia-smi's -lgip profile ids.
constexpr MigModel EightSliceModel(int nominal_gb, EightSliceMemory mib) {
  MigModel m;
  m.memory_slices = 8;
  m.compute_slices = 7;
  m.nominal_memory_gb = nominal_gb;
  const MigProfile rows[] = {
      Row(kNvml1Slice, 19, 1, 1, mib.one, 7, false, {0, 1, 2, 3, 4, 5, 6}),
      Row(kNvml1SliceRev1, 20, 1, 1, mib.one, 1, true, {0, 1, 2, 3, 4, 5, 6}),
      Row(kNvml1SliceRev2, 15, 1, 2, mib.two, 4, false, {0, 2, 4, 6}),
      Row(kNvml2Slice, 14, 2, 2, mib.two, 3, false, {0, 2, 4}),
      Row(kNvml3Slice, 9, 3, 4, mib.four, 2, false, {0, 4}),
      Row(kNvml4Slice, 5, 4, 4, mib.four, 1, false, {0}),
      Row(kNvml7Slice, 0, 7, 8, mib.eight, 1, false, {0}),
  };
  for (const MigProfile& p : rows) m.profiles[m.profile_count++] = p;
  return m;
}

// A30-24GB: 4 memory and 4 compute slices (MIG user guide, "A30 MIG Profiles"). Profile ids,
// placements (-lgipp) and memory as nvidia-smi shows them on an A30, from a public A30 session log
// on driver 535.183.01 (repository not identified): MIG devices of a 1g and a 2g instance report
// 5952 and 11968 MiB, -lgip lists 5.81 / 11.69 / 23.44 GiB (4g.24gb: 24000 MiB), 2g.12gb+me is
// id 6, and -lgipp gives {0,1,2,3}:1, {0,2}:2 and {0}:4. Summer-Lo/Docker_configuration
// (000-MIG/README.md) shows the same ids, placements and 5.81 / 11.69 GiB on an older driver, with
// 4g.24gb at 23.50 GiB.
constexpr MigModel A30Model() {
  MigModel m;
  m.memory_slices = 4;
  m.compute_slices = 4;
  m.nominal_memory_gb = 24;
  const MigProfile rows[] = {
      Row(kNvml1Slice, 14, 1, 1, 5952, 4, false, {0, 1, 2, 3}),
      Row(kNvml1SliceRev1, 21, 1, 1, 5952, 1, true, {0, 1, 2, 3}),
      Row(kNvml2Slice, 5, 2, 2, 11968, 2, false, {0, 2}),
      Row(kNvml2SliceRev1, 6, 2, 2, 11968, 1, true, {0, 2}),
      Row(kNvml4Slice, 0, 4, 4, 24000, 1, false, {0}),
  };
  for (const MigProfile& p : rows) m.profiles[m.profile_count++] = p;
  return m;
}

// Memory figures are nvmlGpuInstanceProfileInfo_t.memorySizeMB as `nvidia-smi mig -lgip` prints
// it (GiB with two decimals; x.62 and x.38 are x.625 and x.375), or the MiB total nvidia-smi shows
// for a MIG device where one was captured. Sources:
// - A100-40GB: the MIG user guide's -lgip example for A100-SXM4-40GB (1g.5gb 4.75, 2g.10gb 9.75,
//   3g.20gb 19.62, 7g.40gb 39.50 GiB); 1g.10gb has 2g.10gb's two memory slices.
// - A100-80GB: -lgip on A100 80GB (1g 9.50, 2g 19.50, 3g/4g 39.25, 7g 79.00 GiB), quoted in several
//   public MIG walkthroughs; 2g.20gb 19968 MiB per nvidia-smi (nvitop PR 8); the 3g.39gb/7g.79gb
//   names older drivers printed (mig-parted issue 31, gpu-operator issue 351) come from these.
// - H100-80GB: nvidia-smi mig -lgip on H100 80GB HBM3 (9.75 / 19.62 / 39.50 / 79.25 GiB).
// - H100-94GB (H100 NVL): -lgip in gpu-operator PR 900 / mig-parted PR 101 (10.75 / 21.62 /
//   46.38 GiB); MIG devices of 11008, 22144 and 47488 MiB and 7g.94gb at 93.12 GiB on driver
//   560.35.03 (an Azure NC40ads_H100_v5 MIG walkthrough, AlizeeChen11/mig-and-mps, mig/README.md).
// - GH200-96GB ("NVIDIA GH200 480GB"): -lgip in
//   kf-cuanschutz/NVIDIA_Grace_Hopper_benchmarking_logs_, Daily_installs_loggings/
//   Lessons_learned_from_the_slurm_MIG_installation.md (11.00 / 23.00 / 46.50 / 93.00 GiB); MIG
//   devices of 23552 and 47616 MiB on driver 570.133.20 (sgawe11/RAG-on-GH200-with-MIG,
//   README.md).
// - H200-141GB: mig-parted issue 120 -lgip (16.00 / 32.25 / 69.50 / 139.75 GiB).
// - B200: mig-parted PR 166 / gpu-operator PR 1242 -lgip (1g.23gb 22.00, 1g.45gb/2g.45gb 44.25
//   GiB; mig-parted PR 187 shows 1g.23gb at 20.50 on another driver). ESTIMATES: 3g/4g.90gb and
//   7g.180gb are not shown in any source found; they are two and four times the two-slice figure.
constexpr std::array kMigSpecs = {
    EightSliceModel(40, {.one = 4864, .two = 9984, .four = 20096, .eight = 40448}),
    EightSliceModel(80, {.one = 9728, .two = 19968, .four = 40192, .eight = 80896}),
    EightSliceModel(80, {.one = 9984, .two = 20096, .four = 40448, .eight = 81152}),
    EightSliceModel(94, {.one = 11008, .two = 22144, .four = 47488, .eight = 95360}),
    EightSliceModel(96, {.one = 11264, .two = 23552, .four = 47616, .eight = 95232}),
    EightSliceModel(141, {.one = 16384, .two = 33024, .four = 71168, .eight = 143104}),
    A30Model(),
    EightSliceModel(180, {.one = 22528, .two = 45312, .four = 90624, .eight = 181248}),
};

// The catalogue short name of each kMigSpecs entry, in the same order.
constexpr std::array<std::string_view, kMigSpecs.size()> kMigShortNames = {
    "A100-40GB",  "A100-80GB",  "H100-80GB", "H100-94GB",
    "GH200-96GB", "H200-141GB", "A30-24GB",  "B200",
};

// The tables with their catalogue models bound: built once, on first use, without the heap.
const std::array<MigModel, kMigSpecs.size()>& MigTable() {
  static const std::array<MigModel, kMigSpecs.size()> table = [] {
    std::array<MigModel, kMigSpecs.size()> t = kMigSpecs;
    for (std::size_t i = 0; i < t.size(); ++i) t[i].model = FindModel(kMigShortNames[i]);
    return t;
  }();
  return table;
}

// The GB figure of a profile's name: its memory slices' share of the model's nominal size,
// rounded half up. That one rule gives every name NVIDIA documents, e.g. 141 x 4/8 = 70.5 ->
// "3g.71gb", 94 x 2/8 = 23.5 -> "1g.24gb", 180 x 1/8 = 22.5 -> "1g.23gb".
constexpr long long NameGigabytes(const MigModel& model, const MigProfile& profile) {
  if (model.memory_slices <= 0) return 0;
  const long long numerator = 2LL * model.nominal_memory_gb * profile.memory_slices;
  const long long denominator = 2LL * model.memory_slices;
  return (numerator + model.memory_slices) / denominator;
}

// Writes `value` in decimal at buf[pos...] if it fits before `len`; returns the new position or
// `len` + 1 when it does not fit.
std::size_t AppendNumber(long long value, char* buf, std::size_t len, std::size_t pos) {
  char digits[24];
  int n = 0;
  if (value < 0) value = 0;
  do {
    digits[n++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value > 0);
  if (pos + n > len) return len + 1;
  while (n > 0) buf[pos++] = digits[--n];
  return pos;
}

std::size_t AppendText(std::string_view text, char* buf, std::size_t len, std::size_t pos) {
  if (pos > len || text.size() > len - pos) return len + 1;
  for (char c : text) buf[pos++] = c;
  return pos;
}

// The longest name we can produce ("<compute>g.<GB>gb+me" with 20-digit numbers) fits in this.
constexpr std::size_t kMaxNameLength = 64;

}  // namespace

const MigModel* FindMigModel(const GpuModel& model) {
  for (const MigModel& m : MigTable()) {
    if (m.model == &model) return &m;
  }
  return FindMigModel(model.short_name);
}

const MigModel* FindMigModel(std::string_view short_name) {
  for (const MigModel& m : MigTable()) {
    if (m.model != nullptr && NamesEqualIgnoringCase(m.model->short_name, short_name)) return &m;
  }
  return nullptr;
}

std::span<const MigModel> AllMigModels() { return MigTable(); }

size_t FormatMigProfileName(const MigModel& model, const MigProfile& profile, char* buf,
                            size_t len) {
  if (buf == nullptr || len == 0) return 0;
  // Room for the terminating NUL is kept out of `room`.
  const std::size_t room = len - 1;
  std::size_t pos = AppendNumber(profile.compute_slices, buf, room, 0);
  pos = AppendText("g.", buf, room, pos);
  pos = AppendNumber(NameGigabytes(model, profile), buf, room, pos);
  pos = AppendText("gb", buf, room, pos);
  if (profile.media_extensions) pos = AppendText("+me", buf, room, pos);
  if (pos > room) {
    buf[0] = '\0';
    return 0;
  }
  buf[pos] = '\0';
  return pos;
}

std::string MigProfileName(const MigModel& model, const MigProfile& profile) {
  char buf[kMaxNameLength];
  const std::size_t n = FormatMigProfileName(model, profile, buf, sizeof(buf));
  return std::string(buf, n);
}

const MigProfile* FindMigProfile(const MigModel& model, std::string_view name) {
  if (name.size() >= kMaxNameLength) return nullptr;
  for (int i = 0; i < model.profile_count; ++i) {
    char buf[kMaxNameLength];
    const std::size_t n = FormatMigProfileName(model, model.profiles[i], buf, sizeof(buf));
    if (n != 0 && NamesEqualIgnoringCase(std::string_view(buf, n), name)) return &model.profiles[i];
  }
  return nullptr;
}

}  // namespace gpufrac::gpu
