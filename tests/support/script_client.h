// SPDX-License-Identifier: MIT
// The embedded scripts (lua/scripts) run from a test through a blocking hiredis client, as the
// host runs them: EVALSHA with the embedded SHA1, SCRIPT LOAD on NOSCRIPT; or, on a
// cluster-enabled server, EVAL under `#!lua` so the server refuses a key outside the first key's
// slot. Every call also checks that its KEYS, and every ARGV naming a key prefix, share one slot.
// Plus the reply assertions the script tests share.
#pragma once

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <string>
#include <string_view>
#include <vector>

#include "support/redis_fixture.h"

namespace echo::test {

using Args = std::vector<std::string>;

// An integer reply equal to `expected`.
::testing::AssertionResult is_integer(const RedisReply& r, long long expected);
// An error reply with exactly this text (its first word is the class, never a generic ERR).
::testing::AssertionResult is_error(const RedisReply& r, std::string_view expected);

// On a cluster-enabled server: a `#!lua` script that writes its declared key `declared`, then
// `undeclared` of another slot, is refused with the server's cross-slot error (so the strict-slot
// runs prove something).
::testing::AssertionResult refuses_across_slots(redisContext* c, const std::string& declared,
                                                const std::string& undeclared);

// Runs embedded scripts, and reads keys, on one connection (not owned).
class ScriptClient {
 public:
  // kEvalsha: what the host does. kStrictSlot: EVAL of the same body under a `#!lua` shebang.
  enum class Load { kEvalsha, kStrictSlot };

  explicit ScriptClient(redisContext* c, Load load = Load::kEvalsha) : c_(c), load_(load) {}

  // The script `name` with these KEYS and ARGV; a missing script is a test failure (nullptr).
  RedisReply run(std::string_view name, const Args& keys, const Args& argv);

  redisContext* context() const { return c_; }

  std::string hget(const std::string& key, const std::string& field);
  std::string zscore(const std::string& key, const std::string& member);
  // `format` takes the key as its one %s; a non-integer answer fails the test (LLONG_MIN).
  long long integer(const char* format, const std::string& key);
  long long dbsize();
  // The server's clock, the one leases and schedules are measured on.
  long long now_ms();

 private:
  RedisReply send(const char* verb, const std::string& script, const Args& keys, const Args& argv);

  redisContext* c_;
  Load load_;
};

// One embedded script by EVALSHA on `c` (ScriptClient(c).run).
inline RedisReply run_script(redisContext* c, std::string_view name, const Args& keys,
                             const Args& argv) {
  return ScriptClient(c).run(name, keys, argv);
}

}  // namespace echo::test
