// libgpufrac.so must load into programs on glibc 2.17 and later (containers run older
// distributions than the build machine): reads the built library's ELF version needs and
// DT_NEEDED entries itself and fails on anything an older C library could not satisfy.
#include <elf.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace {

std::string Library() { return std::string(GPUFRAC_BUILD_DIR) + "/lib/libgpufrac.so"; }

// What the dynamic loader will ask of the C library for this object.
struct Needs {
  uint16_t machine = 0;
  std::vector<std::string> needed;                     // DT_NEEDED
  std::map<std::string, std::set<std::string>> files;  // .gnu.version_r: file -> versions
  // Undefined dynamic symbols: name -> version ("" when unversioned), and whether weak.
  std::map<std::string, std::string> undefined;
  std::set<std::string> weak;
};

bool ReadFile(const std::string& path, std::vector<unsigned char>* out) {
  FILE* f = fopen(path.c_str(), "rb");
  if (!f) return false;
  unsigned char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out->insert(out->end(), buf, buf + n);
  fclose(f);
  return true;
}

bool Fail(const char* what) {
  ADD_FAILURE() << what;
  return false;
}

// Reads the section-header view of a 64-bit little-endian ELF object; fails the test on anything
// malformed, so a broken parser cannot pass by finding nothing.
bool Parse(const std::vector<unsigned char>& elf, Needs* needs) {
  auto in_bounds = [&](uint64_t off, uint64_t len) {
    return off <= elf.size() && len <= elf.size() - off;
  };
  if (!in_bounds(0, sizeof(Elf64_Ehdr)) || memcmp(elf.data(), ELFMAG, SELFMAG) != 0 ||
      elf[EI_CLASS] != ELFCLASS64 || elf[EI_DATA] != ELFDATA2LSB) {
    return Fail("not a 64-bit little-endian ELF file");
  }
  Elf64_Ehdr eh;
  memcpy(&eh, elf.data(), sizeof(eh));
  needs->machine = eh.e_machine;
  if (eh.e_shentsize != sizeof(Elf64_Shdr) ||
      !in_bounds(eh.e_shoff, eh.e_shnum * sizeof(Elf64_Shdr))) {
    return Fail("bad section header table");
  }
  std::vector<Elf64_Shdr> sh(eh.e_shnum);
  memcpy(sh.data(), elf.data() + eh.e_shoff, eh.e_shnum * sizeof(Elf64_Shdr));
  auto str = [&](const Elf64_Shdr& strtab, uint64_t off) -> std::string {
    if (off >= strtab.sh_size || !in_bounds(strtab.sh_offset, strtab.sh_size)) return "?";
    const char* s = reinterpret_cast<const char*>(elf.data() + strtab.sh_offset + off);
    return std::string(s, strnlen(s, strtab.sh_size - off));
  };
  const Elf64_Shdr* dynsym = nullptr;
  const Elf64_Shdr* versym = nullptr;
  const Elf64_Shdr* verneed = nullptr;
  const Elf64_Shdr* dynamic = nullptr;
  for (const Elf64_Shdr& s : sh) {
    if (s.sh_type == SHT_DYNSYM) dynsym = &s;
    if (s.sh_type == SHT_GNU_versym) versym = &s;
    if (s.sh_type == SHT_GNU_verneed) verneed = &s;
    if (s.sh_type == SHT_DYNAMIC) dynamic = &s;
  }
  if (!dynsym || !dynamic || dynsym->sh_link >= sh.size() || dynamic->sh_link >= sh.size() ||
      !in_bounds(dynsym->sh_offset, dynsym->sh_size) ||
      !in_bounds(dynamic->sh_offset, dynamic->sh_size)) {
    return Fail("no usable .dynsym or .dynamic");
  }

  for (uint64_t off = 0; off + sizeof(Elf64_Dyn) <= dynamic->sh_size; off += sizeof(Elf64_Dyn)) {
    Elf64_Dyn d;
    memcpy(&d, elf.data() + dynamic->sh_offset + off, sizeof(d));
    if (d.d_tag == DT_NULL) break;
    if (d.d_tag == DT_NEEDED) needs->needed.push_back(str(sh[dynamic->sh_link], d.d_un.d_val));
  }

  // Version indices (as .gnu.version stores them) to names; 0 and 1 mean "unversioned".
  std::map<uint16_t, std::string> version_of;
  if (verneed) {
    if (verneed->sh_link >= sh.size() || !in_bounds(verneed->sh_offset, verneed->sh_size)) {
      return Fail("bad .gnu.version_r");
    }
    const Elf64_Shdr& strtab = sh[verneed->sh_link];
    uint64_t off = verneed->sh_offset;
    for (uint64_t i = 0; i < verneed->sh_info; ++i) {
      Elf64_Verneed vn;
      if (!in_bounds(off, sizeof(vn))) return Fail("truncated .gnu.version_r");
      memcpy(&vn, elf.data() + off, sizeof(vn));
      std::string file = str(strtab, vn.vn_file);
      std::set<std::string>& versions = needs->files[file];
      uint64_t aux = off + vn.vn_aux;
      for (uint16_t j = 0; j < vn.vn_cnt; ++j) {
        Elf64_Vernaux va;
        if (!in_bounds(aux, sizeof(va))) return Fail("truncated .gnu.version_r");
        memcpy(&va, elf.data() + aux, sizeof(va));
        std::string name = str(strtab, va.vna_name);
        versions.insert(name);
        version_of[va.vna_other] = name;
        aux += va.vna_next;
        if (va.vna_next == 0) break;
      }
      off += vn.vn_next;
      if (vn.vn_next == 0) break;
    }
  }

  const size_t count = dynsym->sh_size / sizeof(Elf64_Sym);
  if (versym && (!in_bounds(versym->sh_offset, versym->sh_size) ||
                 versym->sh_size != count * sizeof(Elf64_Half))) {
    return Fail("bad .gnu.version");
  }
  for (size_t i = 1; i < count; ++i) {
    Elf64_Sym sym;
    memcpy(&sym, elf.data() + dynsym->sh_offset + i * sizeof(sym), sizeof(sym));
    if (sym.st_shndx != SHN_UNDEF) continue;
    std::string name = str(sh[dynsym->sh_link], sym.st_name);
    if (name.empty()) continue;
    std::string version;
    if (versym) {
      Elf64_Half v;
      memcpy(&v, elf.data() + versym->sh_offset + i * sizeof(v), sizeof(v));
      v &= 0x7fff;  // the top bit marks a hidden version
      if (v > 1) version = version_of.count(v) ? version_of[v] : "<unknown index>";
    }
    needs->undefined[name] = version;
    if (ELF64_ST_BIND(sym.st_info) == STB_WEAK) needs->weak.insert(name);
  }
  return true;
}

// "GLIBC_2.3.2" -> {2, 3, 2}; empty when it is not a numbered glibc version.
std::vector<int> GlibcVersion(const std::string& name) {
  std::vector<int> parts;
  if (name.rfind("GLIBC_", 0) != 0) return parts;
  const char* p = name.c_str() + 6;
  while (*p >= '0' && *p <= '9') {
    int n = 0;
    while (*p >= '0' && *p <= '9') n = n * 10 + (*p++ - '0');
    parts.push_back(n);
    if (*p == '.') ++p;
  }
  if (*p != '\0') parts.clear();
  return parts;
}

const std::vector<int> kOldestGlibc = {2, 17};

bool IsAllowedLibrary(const std::string& lib) {
  return lib == "libc.so.6" || lib == "libdl.so.2" || lib == "libpthread.so.0" ||
         lib == "ld-linux-x86-64.so.2" || lib == "ld-linux-aarch64.so.1";
}

class LimiterGlibcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<unsigned char> elf;
    ASSERT_TRUE(ReadFile(Library(), &elf)) << Library();
    ASSERT_TRUE(Parse(elf, &needs_));
    // The parser found what every such library has; otherwise the checks below prove nothing.
    ASSERT_FALSE(needs_.needed.empty());
    ASSERT_FALSE(needs_.files.empty());
    ASSERT_EQ(needs_.undefined.count("dlopen"), 1u);
  }
  Needs needs_;
};

TEST_F(LimiterGlibcTest, NeedsNoGlibcVersionNewerThan2_17) {
  std::vector<int> highest;
  std::string highest_name;
  for (const auto& [file, versions] : needs_.files) {
    for (const std::string& version : versions) {
      std::vector<int> v = GlibcVersion(version);
      EXPECT_FALSE(v.empty()) << file << " " << version
                              << ": not a numbered GLIBC_ version (GLIBC_PRIVATE, GLIBCXX_, "
                                 "GCC_ ...) is never allowed";
      if (v.empty()) continue;
      if (v > highest) highest = v, highest_name = version;
      if (v > kOldestGlibc) {
        std::string symbols;
        for (const auto& [name, needed] : needs_.undefined) {
          if (needed == version) symbols += " " + name;
        }
        ADD_FAILURE() << version << " (from " << file
                      << ") is newer than GLIBC_2.17, needed by:" << symbols
                      << "\n  bind the old version in src/limiter/glibc_symbols.h, or stop calling"
                         " it (docs/limiter.md, \"Which systems it loads on\")";
      }
    }
  }
  printf("libgpufrac.so needs at most %s\n", highest_name.c_str());
}

TEST_F(LimiterGlibcTest, NeedsOnlyTheCLibraryAndItsOldHomes) {
  std::set<std::string> needed(needs_.needed.begin(), needs_.needed.end());
  for (const std::string& lib : needed) EXPECT_TRUE(IsAllowedLibrary(lib)) << "DT_NEEDED " << lib;
  for (const auto& [file, versions] : needs_.files) {
    EXPECT_TRUE(IsAllowedLibrary(file)) << "version needs of " << file;
  }
  // Before glibc 2.34 dlopen & co. lived only in libdl.so.2 and most pthread_* functions only in
  // libpthread.so.0; a program that did not link them would leave our references unresolved.
  EXPECT_EQ(needed.count("libdl.so.2"), 1u);
  EXPECT_EQ(needed.count("libpthread.so.0"), 1u);
}

TEST_F(LimiterGlibcTest, EveryStrongReferenceIsVersioned) {
  // An unversioned reference binds to whatever default version the running glibc has (or to
  // nothing on an older one) and escapes the version check above.
  for (const auto& [name, version] : needs_.undefined) {
    if (needs_.weak.count(name)) continue;
    if (name.rfind("cu", 0) == 0 || name.rfind("nvml", 0) == 0) continue;  // driver, via dlsym
    EXPECT_FALSE(version.empty()) << name << " is referenced without a symbol version";
  }
}

TEST_F(LimiterGlibcTest, CallsNothingThatOldGlibcKeepsElsewhere) {
  // Lived in librt.so.1 before glibc 2.34 (budget.cc opens /dev/shm itself instead), or exist
  // only under a version newer than 2.17 whatever the binding; listed so the failure says why.
  const char* kForbidden[] = {
      "shm_open",     "shm_unlink", "timer_create",   "mq_open", "aio_read",
      "stat",         "fstat",      "lstat",          "fstatat", "statx",
      "reallocarray", "getrandom",  "explicit_bzero", "fcntl64", "__libc_single_threaded"};
  for (const char* name : kForbidden) {
    EXPECT_EQ(needs_.undefined.count(name), 0u) << name;
  }
  for (const auto& [name, version] : needs_.undefined) {
    EXPECT_NE(name.rfind("__isoc23_", 0), 0u)
        << name << ": C23 strto*/scanf variants need GLIBC_2.38; parse by hand";
  }
}

TEST(LimiterGlibcVersionTest, ComparesVersionsNumerically) {
  EXPECT_EQ(GlibcVersion("GLIBC_2.2.5"), (std::vector<int>{2, 2, 5}));
  EXPECT_LT(GlibcVersion("GLIBC_2.3.2"), GlibcVersion("GLIBC_2.17"));
  EXPECT_GT(GlibcVersion("GLIBC_2.34"), kOldestGlibc);
  EXPECT_TRUE(GlibcVersion("GLIBC_PRIVATE").empty());
  EXPECT_TRUE(GlibcVersion("GLIBCXX_3.4").empty());
}

}  // namespace
