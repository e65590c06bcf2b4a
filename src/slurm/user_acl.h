// Letting one user (and root) reach a root-owned directory or file that no one else may, through
// a POSIX access ACL (the system.posix_acl_access extended attribute), set on a descriptor. The
// object stays root's and the user gets no write permission, so it can neither change nor
// replace it: what root wrote is what the user reads.
#pragma once

#include <sys/types.h>

#include "common/status.h"

namespace gpufrac::slurm {

// Whether the filesystem holding the open file `fd` keeps POSIX ACLs.
bool SupportsAcls(int fd);

// Sets the access ACL of `fd`: its owner gets `owner_perms`, user `uid` gets `user_perms`, its
// group and everyone else nothing (permission bits as in a mode: 4 read, 2 write, 1 execute or
// search). The mode's group bits then show `user_perms` (the ACL's mask). kUnavailable when the
// filesystem keeps no ACLs, with the reason.
Status GrantUserAccess(int fd, uid_t uid, unsigned owner_perms, unsigned user_perms);

}  // namespace gpufrac::slurm
