// A POSIX access ACL written as the kernel's extended attribute (user_acl.h). The attribute's
// layout is the kernel's ABI (linux/posix_acl_xattr.h): a little-endian version word (2), then
// one (tag: 16 bits, permissions: 16 bits, id: 32 bits) entry per line of the ACL, sorted by tag
// and then by id.
#include "slurm/user_acl.h"

#include <sys/xattr.h>

#include <cerrno>
#include <cstdint>
#include <string>
#include <vector>

#include "common/posix.h"

namespace gpufrac::slurm {
namespace {

constexpr char kAccessAcl[] = "system.posix_acl_access";
constexpr uint32_t kAclVersion = 2;
// Tags, as the kernel numbers them.
constexpr uint16_t kUserObj = 0x01, kUser = 0x02, kGroupObj = 0x04, kMask = 0x10, kOther = 0x20;
constexpr uint32_t kNoId = 0xffffffff;

void PutLittleEndian(std::vector<unsigned char>* out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<unsigned char>(value >> (8 * i)));
}

void PutEntry(std::vector<unsigned char>* out, uint16_t tag, unsigned perms, uint32_t id) {
  PutLittleEndian(out, tag, 2);
  PutLittleEndian(out, perms & 7, 2);
  PutLittleEndian(out, id, 4);
}

}  // namespace

bool SupportsAcls(int fd) {
  // ENODATA: the filesystem keeps ACLs and this file has none beyond its mode.
  return fgetxattr(fd, kAccessAcl, nullptr, 0) >= 0 || errno == ENODATA || errno == ERANGE;
}

Status GrantUserAccess(int fd, uid_t uid, unsigned owner_perms, unsigned user_perms) {
  std::vector<unsigned char> acl;
  PutLittleEndian(&acl, kAclVersion, 4);
  PutEntry(&acl, kUserObj, owner_perms, kNoId);
  PutEntry(&acl, kUser, user_perms, static_cast<uint32_t>(uid));
  PutEntry(&acl, kGroupObj, 0, kNoId);
  PutEntry(&acl, kMask, user_perms, kNoId);
  PutEntry(&acl, kOther, 0, kNoId);
  if (fsetxattr(fd, kAccessAcl, acl.data(), acl.size(), 0) != 0) {
    return ErrnoStatus("cannot set an ACL", errno);
  }
  return OkStatus();
}

}  // namespace gpufrac::slurm
