// SPDX-License-Identifier: MIT
// connect(): redisConnect with the measurements' 5 s reply timeout and the staged credentials.
#include <echo/harness/hiredis.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include <echo/harness/stage.h>

namespace echo::harness {

Context connect(const std::string& host, int port) {
  Context c(redisConnect(host.c_str(), port));
  if (!c || c->err) {
    throw std::runtime_error("plain hiredis connection to " + host + ':' + std::to_string(port) +
                             " failed" + (c ? std::string(": ") + c->errstr : std::string()));
  }
  const timeval five{5, 0};
  redisSetTimeout(c.get(), five);
  if (std::string refused = authenticate(c.get()); !refused.empty()) {
    throw std::runtime_error("plain hiredis connection to " + host + ':' + std::to_string(port) +
                             ": AUTH refused: " + refused);
  }
  return c;
}

std::string authenticate(redisContext* c) {
  const Credentials& who = credentials();
  if (who.password.empty()) return {};
  std::vector<const char*> argv = {"AUTH"};
  std::vector<std::size_t> lens = {4};
  if (who.username != "default") {
    argv.push_back(who.username.c_str());
    lens.push_back(who.username.size());
  }
  argv.push_back(who.password.c_str());
  lens.push_back(who.password.size());
  Reply r(static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data())));
  if (!r) return c->errstr[0] != '\0' ? c->errstr : "no reply";
  if (r->type == REDIS_REPLY_ERROR) return std::string(r->str, r->len);
  return {};
}

}  // namespace echo::harness
