// CUDA_VISIBLE_DEVICES restricted to a workload's GPUs (see visible_devices.h).
#include "limiter/visible_devices.h"

#include <cstring>

namespace gpufrac::limiter {
namespace {

char Lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool StartsWithIgnoreCase(const char* text, const char* prefix, size_t prefix_len) {
  for (size_t i = 0; i < prefix_len; ++i) {
    if (text[i] == '\0' || Lower(text[i]) != Lower(prefix[i])) return false;
  }
  return true;
}

// The workload's GPU that the entry [begin, begin + len) names, or -1: an index into the limit
// file, or a GPU-/MIG- UUID prefix matching exactly one of its GPUs.
int Resolve(const char* begin, size_t len, const LimitConfig& config) {
  if (len == 0) return -1;
  bool digits = true;
  for (size_t i = 0; i < len; ++i) digits = digits && begin[i] >= '0' && begin[i] <= '9';
  if (digits) {
    if (len > 2) return -1;  // more than kMaxLimitedGpus
    int index = 0;
    for (size_t i = 0; i < len; ++i) index = index * 10 + (begin[i] - '0');
    return index < config.gpu_count ? index : -1;
  }
  if (len <= 4 ||
      !(StartsWithIgnoreCase(begin, "GPU-", 4) || StartsWithIgnoreCase(begin, "MIG-", 4))) {
    return -1;
  }
  int match = -1;
  for (int g = 0; g < config.gpu_count; ++g) {
    if (!StartsWithIgnoreCase(config.gpus[g].uuid, begin, len)) continue;
    if (match >= 0) return -1;  // not unique
    match = g;
  }
  return match;
}

// Whether the entry names a device at all (an index or a UUID), as opposed to an entry such as
// "-1" that a program writes to hide every device.
bool NamesADevice(const char* begin, size_t len) {
  if (len > 4 &&
      (StartsWithIgnoreCase(begin, "GPU-", 4) || StartsWithIgnoreCase(begin, "MIG-", 4))) {
    return true;
  }
  if (len == 0) return false;
  for (size_t i = 0; i < len; ++i) {
    if (begin[i] < '0' || begin[i] > '9') return false;
  }
  return true;
}

void Append(VisibleDevices* out, const char* uuid) {
  size_t used = strlen(out->value);
  size_t n = strlen(uuid);
  if (used + n + 2 > sizeof(out->value)) return;  // cannot happen: kMaxLimitedGpus UUIDs fit
  if (used > 0) out->value[used++] = ',';
  memcpy(out->value + used, uuid, n + 1);
  ++out->count;
}

}  // namespace

void RestrictVisibleDevices(const char* requested, const LimitConfig& config, VisibleDevices* out) {
  out->value[0] = '\0';
  out->count = 0;
  out->refused[0] = '\0';
  if (requested == nullptr) {
    for (int g = 0; g < config.gpu_count; ++g) Append(out, config.gpus[g].uuid);
  } else {
    bool taken[kMaxLimitedGpus] = {};
    for (const char* p = requested; *p != '\0';) {
      const char* end = strchr(p, ',');
      if (end == nullptr) end = p + strlen(p);
      const char* begin = p;
      const char* last = end;
      while (begin < last && (*begin == ' ' || *begin == '\t')) ++begin;
      while (last > begin && (last[-1] == ' ' || last[-1] == '\t')) --last;
      const size_t len = static_cast<size_t>(last - begin);
      const int g = Resolve(begin, len, config);
      if (g < 0 || taken[g]) {
        if (g < 0 && NamesADevice(begin, len)) {
          const size_t shown = len < kMaxUuidLen ? len : kMaxUuidLen;
          memcpy(out->refused, begin, shown);
          out->refused[shown] = '\0';
        }
        break;
      }
      taken[g] = true;
      Append(out, config.gpus[g].uuid);
      if (*end == '\0') break;
      p = end + 1;
    }
  }
  if (out->count == 0) strcpy(out->value, kNoVisibleDevice);
}

}  // namespace gpufrac::limiter
