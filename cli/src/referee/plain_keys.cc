// SPDX-License-Identifier: MIT
#include "referee/plain_keys.h"

#include <stdexcept>

namespace echo::cli::referee {

std::string reply_why(const harness::Reply& r, redisContext* c, const char* what) {
  if (!r) return std::string(what) + ": " + (c->errstr[0] != '\0' ? c->errstr : "no reply");
  if (r->type == REDIS_REPLY_ERROR) return std::string(what) + ": " + std::string(r->str, r->len);
  return std::string(what) + " answered reply type " + std::to_string(r->type);
}

void seed_plain_keys(Stage& stage, const std::string& prefix, std::vector<std::string>& keys,
                     std::unordered_map<std::string, std::uint32_t>& index) {
  keys.clear();
  index.clear();
  harness::Context seeder = harness::connect(stage.target.host, stage.target.port);
  for (std::size_t i = 0; i < stage.names.size(); ++i) {
    keys.push_back(prefix + stage.names[i]);
    index.emplace(keys.back(), static_cast<std::uint32_t>(i));
    stage.oracle.begin_write(i, 0, nullptr, false);
    harness::Reply r = harness::command(seeder.get(), "SET %b 0", keys[i].data(), keys[i].size());
    if (!r || r->type != REDIS_REPLY_STATUS) {
      throw std::runtime_error(reply_why(r, seeder.get(), "seeding SET"));
    }
    stage.oracle.acked(i, 0);
  }
}

}  // namespace echo::cli::referee
