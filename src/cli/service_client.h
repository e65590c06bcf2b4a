// How the command line talks to gpufracd: finds its socket (--socket, $GPUFRAC_SOCKET, the
// system service's, then the user's own), starts a per-user service in the background when none
// is running (saying so in one line), and makes JSON API calls.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"

namespace httplib {
class Client;
}

namespace gpufrac::cli {

class ServiceClient {
 public:
  // `socket_flag`: the --socket value ("" = look as above). With `autostart`, a missing per-user
  // service is started (never when a socket was named explicitly).
  static StatusOr<std::unique_ptr<ServiceClient>> Connect(const std::string& socket_flag,
                                                          bool autostart = true);
  ~ServiceClient();

  // The parsed JSON body of a 2xx answer; otherwise the service's error as a Status with the
  // code it sent (kInvalidArgument for 400, kNotFound for 404, ...).
  StatusOr<nlohmann::json> Get(const std::string& path);
  StatusOr<nlohmann::json> Post(const std::string& path, const nlohmann::json& body);
  // The body of a 2xx answer as text (for non-JSON replies such as a YAML export).
  StatusOr<std::string> GetText(const std::string& path);

  // New output of job `id` from the given offsets (see the API's /output).
  struct Output {
    std::string out, err;
    std::string state;
  };
  StatusOr<Output> ReadOutput(int64_t id, uint64_t out_offset, uint64_t err_offset,
                              int wait_seconds);

  const std::string& socket() const { return socket_; }

 private:
  explicit ServiceClient(std::string socket);
  std::string socket_;
  std::unique_ptr<httplib::Client> http_;
};

// Exit status for a failed call: 2 when the caller's input was wrong, 1 otherwise.
int ExitCodeFor(const Status& status);

}  // namespace gpufrac::cli
