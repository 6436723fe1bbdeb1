// SPDX-License-Identifier: MIT
// What the contestants that cache plain Redis keys share (the textbook ones, classic_lanes.cc,
// and the real client, real_clients.cc): the keys seeded before the run, and a refused reply in
// words.
#pragma once

#include <echo/harness/hiredis.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "referee/referee.h"

namespace echo::cli::referee {

// What a command's reply says went wrong, `what` first: the connection's error, the server's
// error, or the unexpected reply type.
std::string reply_why(const harness::Reply& r, redisContext* c, const char* what);

// Seeds every name of the stage as the plain key prefix + name, value "0", told to the oracle as
// written and acknowledged; `keys` gets the keys in name order and `index` each key's name index.
// Throws std::runtime_error naming a refused SET.
void seed_plain_keys(Stage& stage, const std::string& prefix, std::vector<std::string>& keys,
                     std::unordered_map<std::string, std::uint32_t>& index);

}  // namespace echo::cli::referee
