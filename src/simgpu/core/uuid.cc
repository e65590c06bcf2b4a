// UUID derivation (FNV-1a over the namespace, mixed with the index by splitmix64), formatting, and
// the board serial derived from a UUID.
#include "simgpu/core/uuid.h"

namespace gpufrac::simgpu {
namespace {

std::uint64_t Fnv1a(std::string_view bytes) {
  std::uint64_t hash = 0xcbf29ce484222325ull;
  for (char c : bytes) {
    hash ^= static_cast<std::uint8_t>(c);
    hash *= 0x100000001b3ull;
  }
  return hash;
}

std::uint64_t SplitMix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

Uuid DeviceUuid(std::string_view name_space, int index) {
  const std::uint64_t seed = Fnv1a(name_space) ^ (static_cast<std::uint64_t>(index) << 32);
  const std::uint64_t high = SplitMix64(seed);
  const std::uint64_t low = SplitMix64(high ^ static_cast<std::uint64_t>(index));
  Uuid uuid{};
  for (int i = 0; i < 8; ++i) {
    uuid[i] = static_cast<std::uint8_t>(high >> (56 - 8 * i));
    uuid[8 + i] = static_cast<std::uint8_t>(low >> (56 - 8 * i));
  }
  return uuid;
}

Uuid MigUuid(const Uuid& gpu, int gpu_instance, int compute_instance) {
  std::uint64_t seed = 0;
  for (std::uint8_t byte : gpu) seed = SplitMix64(seed ^ byte);
  seed ^= (static_cast<std::uint64_t>(gpu_instance) << 40) ^
          (static_cast<std::uint64_t>(compute_instance) << 48) ^ 0x4d4947ull;  // "MIG"
  const std::uint64_t high = SplitMix64(seed);
  const std::uint64_t low = SplitMix64(high ^ seed);
  Uuid uuid{};
  for (int i = 0; i < 8; ++i) {
    uuid[i] = static_cast<std::uint8_t>(high >> (56 - 8 * i));
    uuid[8 + i] = static_cast<std::uint8_t>(low >> (56 - 8 * i));
  }
  return uuid;
}

namespace {

std::string FormatUuid(const char* prefix, const Uuid& uuid) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string text = prefix;
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) text += '-';
    text += kHex[uuid[i] >> 4];
    text += kHex[uuid[i] & 0xf];
  }
  return text;
}

}  // namespace

std::string FormatGpuUuid(const Uuid& uuid) { return FormatUuid("GPU-", uuid); }

std::string FormatMigUuid(const Uuid& uuid) { return FormatUuid("MIG-", uuid); }

std::string BoardSerial(const Uuid& gpu) {
  std::uint64_t seed = 0;
  for (std::uint8_t byte : gpu) seed = SplitMix64(seed ^ byte);
  std::string digits = "1";  // 1 followed by 12 digits, like 1320219027853
  for (int i = 0; i < 12; ++i, seed /= 10) digits += static_cast<char>('0' + seed % 10);
  return digits;
}

}  // namespace gpufrac::simgpu
