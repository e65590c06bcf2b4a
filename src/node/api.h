// The node service's HTTP+JSON API (version 1): routes, request validation, access control and
// the JSON shapes the command line reads. Every error is a 4xx/5xx with {"error": one line,
// "code": "INVALID_ARGUMENT"|...}; nothing a caller sends can crash the service. A path that
// exists with another method is a 405, any other path a 404.
//
// The routes ({id}: a job id; {gpu}: a GPU index). api_routes_test checks that this list is
// exactly the route table in api.cc (ApiRoutes).
//
//   GET  /v1/health                     {"ok": true, "simulated": bool}
//   POST /v1/jobs                       submit: {"command": [...], "cwd": "/abs", "env": [...],
//                                        "queue"?, "name"?, "request"?: {"gpu-memory": "4G",
//                                        ...: the fields of common/gpu_request.h},
//                                        "user"? (TCP callers only: required by a root service,
//                                        never root, see TcpUsers)} -> 201 job
//   GET  /v1/jobs                       ?all=1&active=1&limit=N: your jobs (everyone's with
//                                        all=1, admins only), newest first; at most 8 MiB of
//                                        them, with "truncated": true when some were left out
//   GET  /v1/jobs/{id}                  one job
//   POST /v1/jobs/{id}/cancel           cancel (owner or admin)
//   GET  /v1/jobs/{id}/output           ?stdout=OFF&stderr=OFF&wait=SECONDS: new output from the
//                                        byte offsets: body = stdout bytes then stderr bytes,
//                                        lengths in X-Gpufrac-Stdout-Bytes /
//                                        X-Gpufrac-Stderr-Bytes, the job's state in
//                                        X-Gpufrac-State; waits up to `wait` s (at most 30) for
//                                        output or the job's end.
//   GET  /v1/status                     GPUs with their allocations and workloads; "mig": each
//                                        MIG GPU's instances (profile, start, size, uuid, job)
//   POST /v1/gpus/{gpu}/mig             {"enabled": bool}: MIG mode on/off (admins; GPU idle)
//   POST /v1/gpus/{gpu}/mps             {"enabled": bool}: MPS mode on/off (admins; GPU idle)
//   POST /v1/mig/apply                  {"yaml": mig-parted file, "config": name} (admins)
//   GET  /v1/mig/export                 ?name=NAME: the current layout as a mig-parted file
//   GET  /v1/queues                     queues with pending/running jobs and quota use
//   GET  /metrics                       Prometheus text format
//
// Who may do what: the caller is known from the unix socket's peer credentials. Users see and
// cancel their own jobs; root, members of the admin group and TCP callers holding the token see
// and cancel all.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "node/http_server.h"
#include "node/service.h"

namespace gpufrac::node {

// Whom TCP callers (who hold the token) may run jobs as: members of `group` when it is set,
// else users with a uid in [min_uid, max_uid] (by default ordinary accounts, not system ones such
// as daemon or bin). Never root.
struct TcpUsers {
  uid_t min_uid = 1000;
  uid_t max_uid = 60000;
  std::optional<gid_t> group;
  std::string group_name;  // For messages.
};

struct ApiOptions {
  std::optional<gid_t> admin_group;  // Its members are admins.
  TcpUsers tcp_users;
};

// The handler for HttpServer. `service` must outlive it.
HttpHandler MakeApiHandler(Service* service, ApiOptions options);

// "METHOD /pattern" of every route, in the route table's order.
std::vector<std::string> ApiRoutes();

}  // namespace gpufrac::node
