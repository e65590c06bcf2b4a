// Heap-free reader and writer of the limit file (see limit_config.h for the format).
#include "limiter/limit_config.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "limiter/file_stat.h"

namespace gpufrac::limiter {
namespace {

constexpr long kProcSuperMagic = 0x9fa0;  // statfs(2)'s f_type of procfs.

bool IsIdChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.';
}

// An absolute path of plain components: no "." or "..", nothing a shell or a reader of logs
// would take for something else.
bool ValidDir(const char* dir) {
  bool valid = dir[0] == '/' && strstr(dir, "/./") == nullptr && strstr(dir, "/../") == nullptr &&
               strstr(dir, "//") == nullptr;
  const size_t n = strlen(dir);
  if (n >= 2 && strcmp(dir + n - 2, "/.") == 0) valid = false;
  if (n >= 3 && strcmp(dir + n - 3, "/..") == 0) valid = false;
  for (const char* p = dir; *p; ++p) valid = valid && (IsIdChar(*p) || *p == '/');
  return valid;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Splits one line into at most `max` whitespace-separated tokens, NUL-terminating them in place.
int Tokenize(char* line, char** tokens, int max) {
  int n = 0;
  char* p = line;
  while (*p) {
    while (*p == ' ' || *p == '\t' || *p == '\r') ++p;
    if (!*p || *p == '#') break;
    if (n == max) return max + 1;
    tokens[n++] = p;
    while (*p && *p != ' ' && *p != '\t' && *p != '\r') ++p;
    if (*p) *p++ = '\0';
  }
  return n;
}

bool ParseU64(const char* s, uint64_t* out) {
  if (!*s) return false;
  uint64_t v = 0;
  for (; *s; ++s) {
    if (*s < '0' || *s > '9') return false;
    uint64_t d = static_cast<uint64_t>(*s - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

bool CopyBounded(const char* src, char* dst, size_t cap) {
  size_t n = strlen(src);
  if (n > cap) return false;
  memcpy(dst, src, n + 1);
  return true;
}

// Whether this process's effective user is the host's root: uid 0 in the initial user namespace,
// or a uid that /proc/self/uid_map maps to host uid 0. Root of a user namespace an ordinary user
// made (`unshare -Ur`) is that user, not root. Without a readable map, uid 0 counts as root.
bool HostRoot() {
  const uid_t euid = geteuid();
  int fd = open("/proc/self/uid_map", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return euid == 0;
  char buf[4096];
  size_t len = 0;
  ssize_t r;
  while (len < sizeof(buf) - 1 && (r = read(fd, buf + len, sizeof(buf) - 1 - len)) != 0) {
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) break;
    len += static_cast<size_t>(r);
  }
  close(fd);
  buf[len] = '\0';
  // Lines of "<first uid inside> <first uid outside> <count>".
  for (char* line = buf; *line;) {
    char* end = strchr(line, '\n');
    if (end) *end = '\0';
    char* tok[4];
    uint64_t inside, outside, count;
    if (Tokenize(line, tok, 3) == 3 && ParseU64(tok[0], &inside) && ParseU64(tok[1], &outside) &&
        ParseU64(tok[2], &count) && euid >= inside && euid - inside < count) {
      return outside + (euid - inside) == 0;
    }
    if (!end) break;
    line = end + 1;
  }
  return false;
}

// The steps of ParseLimitConfig. Each writes a message for the user into `err` and returns false
// when its part of the file is wrong.

constexpr size_t kMaxLineLen = 511;
constexpr int kMaxFields = 10;

// Copies the line that starts at *pos into `line` and moves *pos past its newline.
bool NextLine(const char* text, size_t len, size_t* pos, char (&line)[kMaxLineLen + 1], int line_no,
              char* err, size_t err_len) {
  size_t end = *pos;
  while (end < len && text[end] != '\n') ++end;
  const size_t n = end - *pos;
  if (n >= sizeof(line)) {
    snprintf(err, err_len, "line %d is longer than %zu characters", line_no, sizeof(line) - 1);
    return false;
  }
  memcpy(line, text + *pos, n);
  line[n] = '\0';
  *pos = end + 1;
  return true;
}

// The first line that is not blank: "gpufrac-limits 1".
bool ParseHeader(char** tok, int count, int line_no, char* err, size_t err_len) {
  if (count != 2 || strcmp(tok[0], "gpufrac-limits") != 0) {
    snprintf(err, err_len, "line %d: expected the header 'gpufrac-limits 1'", line_no);
    return false;
  }
  if (strcmp(tok[1], "1") != 0) {
    snprintf(err, err_len, "line %d: unsupported limit file version %s (this build reads 1)",
             line_no, tok[1]);
    return false;
  }
  return true;
}

bool ParseWorkload(const char* id, int line_no, LimitConfig* out, char* err, size_t err_len) {
  bool valid = id[0] != '\0';
  for (const char* p = id; *p; ++p) valid = valid && IsIdChar(*p);
  if (!valid || !CopyBounded(id, out->workload, kMaxWorkloadIdLen)) {
    snprintf(err, err_len, "line %d: workload id must be 1-%zu letters, digits, '-', '_' or '.'",
             line_no, kMaxWorkloadIdLen);
    return false;
  }
  return true;
}

// "budgets <dir>" or "arbiters <dir>".
bool ParseDirLine(char** tok, int line_no, LimitConfig* out, char* err, size_t err_len) {
  char* dir = tok[0][0] == 'b' ? out->budget_dir : out->arbiter_dir;
  if (!ValidDir(tok[1]) || !CopyBounded(tok[1], dir, kMaxBudgetDirLen)) {
    snprintf(err, err_len,
             "line %d: %s must be an absolute directory of at most %zu letters, digits, "
             "'-', '_', '.' and '/'",
             line_no, tok[0], kMaxBudgetDirLen);
    return false;
  }
  return true;
}

// "gpu <uuid> limit <bytes>" and then the optional pairs, each at most once and in this order:
// "context <bytes>", "compute <thousandths>", "compute-limit <thousandths>".
bool ParseGpuLine(char** tok, int count, int line_no, LimitConfig* out, char* err, size_t err_len) {
  if (out->gpu_count == kMaxLimitedGpus) {
    snprintf(err, err_len, "line %d: more than %d gpu lines", line_no, kMaxLimitedGpus);
    return false;
  }
  GpuLimit& g = out->gpus[out->gpu_count];
  g = GpuLimit{};
  if (!CopyBounded(tok[1], g.uuid, kMaxUuidLen) || !ParseUuid(tok[1], g.uuid_bytes)) {
    snprintf(err, err_len, "line %d: '%s' is not a GPU or MIG UUID", line_no, tok[1]);
    return false;
  }
  for (int i = 0; i < out->gpu_count; ++i) {
    if (memcmp(out->gpus[i].uuid_bytes, g.uuid_bytes, 16) == 0) {
      snprintf(err, err_len, "line %d: GPU %s is listed twice", line_no, tok[1]);
      return false;
    }
  }
  if (strcmp(tok[2], "limit") != 0 || !ParseU64(tok[3], &g.limit_bytes) || g.limit_bytes == 0) {
    snprintf(err, err_len, "line %d: expected 'limit <bytes>' with bytes > 0", line_no);
    return false;
  }
  static const char* const kKeys[] = {"context", "compute", "compute-limit"};
  uint64_t* const values[] = {&g.context_bytes, &g.compute_milli, &g.compute_limit_milli};
  bool seen[3] = {false, false, false};
  int key = 0;
  for (int t = 4; t < count; t += 2) {
    while (key < 3 && strcmp(tok[t], kKeys[key]) != 0) ++key;
    if (key == 3 || !ParseU64(tok[t + 1], values[key])) {
      snprintf(err, err_len,
               "line %d: expected 'context <bytes>', 'compute <thousandths>' or "
               "'compute-limit <thousandths>', in that order, after the limit",
               line_no);
      return false;
    }
    seen[key++] = true;
  }
  g.arbitrated = seen[1];
  if (seen[1] != seen[2] ||
      (g.arbitrated && (g.compute_milli == 0 || g.compute_limit_milli > 1000 ||
                        g.compute_limit_milli < g.compute_milli))) {
    snprintf(err, err_len,
             "line %d: compute and compute-limit go together, 1..1000 thousandths, the limit "
             "at least the request",
             line_no);
    return false;
  }
  // Budgets are signed 44-bit quantities in shared memory (see budget.h).
  if (g.limit_bytes >= (uint64_t{1} << 42) || g.context_bytes >= (uint64_t{1} << 42)) {
    snprintf(err, err_len, "line %d: limit or context larger than 4 TiB", line_no);
    return false;
  }
  ++out->gpu_count;
  return true;
}

bool IsFlag(const char* value) { return strcmp(value, "0") == 0 || strcmp(value, "1") == 0; }

// One line after the header.
bool ParseDirective(char** tok, int count, int line_no, LimitConfig* out, char* err,
                    size_t err_len) {
  if (strcmp(tok[0], "workload") == 0 && count == 2) {
    return ParseWorkload(tok[1], line_no, out, err, err_len);
  }
  if ((strcmp(tok[0], "budgets") == 0 || strcmp(tok[0], "arbiters") == 0) && count == 2) {
    return ParseDirLine(tok, line_no, out, err, err_len);
  }
  if (strcmp(tok[0], "advisory") == 0 && count == 2 && IsFlag(tok[1])) {
    out->advisory = tok[1][0] == '1';
    return true;
  }
  if (strcmp(tok[0], "quiet") == 0 && count == 2 && IsFlag(tok[1])) {
    out->quiet = tok[1][0] == '1';
    return true;
  }
  if (strcmp(tok[0], "gpu") == 0 && count >= 4 && count % 2 == 0) {
    return ParseGpuLine(tok, count, line_no, out, err, err_len);
  }
  snprintf(err, err_len, "line %d: unknown or malformed directive '%s'", line_no, tok[0]);
  return false;
}

// What every file must have had once it is read to the end.
bool CheckComplete(const LimitConfig& config, bool have_header, char* err, size_t err_len) {
  if (!have_header) {
    snprintf(err, err_len, "the file is empty (expected 'gpufrac-limits 1')");
    return false;
  }
  if (config.workload[0] == '\0') {
    snprintf(err, err_len, "no 'workload' line");
    return false;
  }
  if (config.gpu_count == 0) {
    snprintf(err, err_len, "no 'gpu' line");
    return false;
  }
  return true;
}

}  // namespace

bool ParseUuid(const char* text, unsigned char out[16]) {
  if (strncmp(text, "GPU-", 4) == 0 || strncmp(text, "MIG-", 4) == 0) text += 4;
  int nibbles = 0;
  for (const char* p = text; *p; ++p) {
    if (*p == '-') continue;
    int v = HexValue(*p);
    if (v < 0 || nibbles == 32) return false;
    if (nibbles % 2 == 0) {
      out[nibbles / 2] = static_cast<unsigned char>(v << 4);
    } else {
      out[nibbles / 2] |= static_cast<unsigned char>(v);
    }
    ++nibbles;
  }
  return nibbles == 32;
}

bool BudgetName(const char* workload, const char* uuid, char* buf, size_t buf_len) {
  int n = snprintf(buf, buf_len, "/gpufrac.%s.%s", workload, uuid);
  return n > 0 && static_cast<size_t>(n) < buf_len;
}

bool ParseLimitConfig(const char* text, size_t len, LimitConfig* out, char* err, size_t err_len) {
  memset(out, 0, sizeof(*out));
  char line[kMaxLineLen + 1];
  bool have_header = false;
  int line_no = 0;
  size_t pos = 0;
  while (pos < len) {
    ++line_no;
    if (!NextLine(text, len, &pos, line, line_no, err, err_len)) return false;
    char* tok[12];
    const int count = Tokenize(line, tok, kMaxFields);
    if (count == 0) continue;
    if (count > kMaxFields) {
      snprintf(err, err_len, "line %d has too many fields", line_no);
      return false;
    }
    const bool parsed = have_header ? ParseDirective(tok, count, line_no, out, err, err_len)
                                    : ParseHeader(tok, count, line_no, err, err_len);
    if (!parsed) return false;
    have_header = true;
  }
  return CheckComplete(*out, have_header, err, err_len);
}

bool SystemServiceRuns(const char* system_dir) {
  struct stat st;
  return StatPath(system_dir, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == 0;
}

bool LoadLimitFile(const char* path, LimitConfig* out, char* err, size_t err_len,
                   const char* system_dir) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    snprintf(err, err_len, "cannot open limit file %s: %s", path, strerror(errno));
    return false;
  }
  struct stat st;
  if (StatFd(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    snprintf(err, err_len, "limit file %s is not a regular file", path);
    return false;
  }
  // A file in /proc is the content of a process (a non-dumpable process's cmdline is root's and
  // read-only, yet says what that process wants).
  struct statfs fs;
  if (syscall(SYS_fstatfs, fd, &fs) == 0 && fs.f_type == kProcSuperMagic) {
    close(fd);
    snprintf(err, err_len, "limit file %s is in /proc, not a file a launcher wrote", path);
    return false;
  }
  // A file this process could rewrite is no limit at all. Root may write anything, so the check
  // only applies to other users (root of a user namespace is one: it can write its own user's
  // files, which appear there as root's).
  // The kernel's own answer (supplementary groups, ACLs) about the open file itself, besides the
  // mode bits.
  const bool root = HostRoot();
  char self[64];
  snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
  bool writable = (st.st_mode & S_IWOTH) || ((st.st_mode & S_IWGRP) && st.st_gid == getegid()) ||
                  ((st.st_mode & S_IWUSR) && st.st_uid == geteuid()) ||
                  faccessat(AT_FDCWD, self, W_OK, AT_EACCESS) == 0;
  if (writable && !root) {
    close(fd);
    snprintf(err, err_len,
             "limit file %s is writable by this workload; the launcher must make it read-only",
             path);
    return false;
  }
  char buf[kMaxLimitFileBytes];
  size_t len = 0;
  while (len < sizeof(buf)) {
    ssize_t r = read(fd, buf + len, sizeof(buf) - len);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      close(fd);
      snprintf(err, err_len, "cannot read limit file %s: %s", path, strerror(errno));
      return false;
    }
    if (r == 0) break;
    len += static_cast<size_t>(r);
  }
  close(fd);
  if (len == sizeof(buf)) {
    snprintf(err, err_len, "limit file %s is larger than %zu bytes", path, sizeof(buf) - 1);
    return false;
  }
  char reason[256];
  if (!ParseLimitConfig(buf, len, out, reason, sizeof(reason))) {
    snprintf(err, err_len, "limit file %s: %s", path, reason);
    return false;
  }
  if (root || st.st_uid != geteuid()) return true;
  // The workload's own user owns it, so could make it writable again and raise the limit.
  if (!out->advisory) {
    snprintf(err, err_len,
             "limit file %s belongs to this workload's user (uid %u), who could rewrite it; a "
             "launcher running as root must write it",
             path, static_cast<unsigned>(st.st_uid));
    return false;
  }
  if (system_dir != nullptr && SystemServiceRuns(system_dir)) {
    snprintf(err, err_len,
             "limit file %s is this user's own (advisory), but gpufrac's system service runs this "
             "machine's GPUs (%s exists): run GPU work through it (gpufrac run)",
             path, system_dir);
    return false;
  }
  return true;
}

size_t FormatLimitConfig(const LimitConfig& config, char* buf, size_t buf_len) {
  size_t used = 0;
  auto append = [&](int n) {
    if (n < 0 || used + static_cast<size_t>(n) >= buf_len) return false;
    used += static_cast<size_t>(n);
    return true;
  };
  if (!append(snprintf(buf, buf_len, "gpufrac-limits 1\nworkload %s\nquiet %d\n", config.workload,
                       config.quiet ? 1 : 0))) {
    return 0;
  }
  if (config.advisory && !append(snprintf(buf + used, buf_len - used, "advisory 1\n"))) return 0;
  if (config.budget_dir[0] != '\0' &&
      !append(snprintf(buf + used, buf_len - used, "budgets %s\n", config.budget_dir))) {
    return 0;
  }
  if (config.arbiter_dir[0] != '\0' &&
      !append(snprintf(buf + used, buf_len - used, "arbiters %s\n", config.arbiter_dir))) {
    return 0;
  }
  for (int i = 0; i < config.gpu_count; ++i) {
    const GpuLimit& g = config.gpus[i];
    if (!append(snprintf(buf + used, buf_len - used, "gpu %s limit %llu context %llu", g.uuid,
                         static_cast<unsigned long long>(g.limit_bytes),
                         static_cast<unsigned long long>(g.context_bytes)))) {
      return 0;
    }
    if (g.arbitrated &&
        !append(snprintf(buf + used, buf_len - used, " compute %llu compute-limit %llu",
                         static_cast<unsigned long long>(g.compute_milli),
                         static_cast<unsigned long long>(g.compute_limit_milli)))) {
      return 0;
    }
    if (!append(snprintf(buf + used, buf_len - used, "\n"))) return 0;
  }
  return used;
}

}  // namespace gpufrac::limiter
