// SPDX-License-Identifier: MIT
// connect(): redisConnect with the measurements' 5 s reply timeout.
#include <echo/harness/hiredis.h>

#include <stdexcept>

namespace echo::harness {

Context connect(const std::string& host, int port) {
  Context c(redisConnect(host.c_str(), port));
  if (!c || c->err) {
    throw std::runtime_error("plain hiredis connection to " + host + ':' + std::to_string(port) +
                             " failed" + (c ? std::string(": ") + c->errstr : std::string()));
  }
  const timeval five{5, 0};
  redisSetTimeout(c.get(), five);
  return c;
}

}  // namespace echo::harness
