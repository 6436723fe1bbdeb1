// SPDX-License-Identifier: MIT
#include "support/script_client.h"

#include <echo/lua/scripts.h>
#include <echo/table/names.h>

#include <climits>
#include <cstdint>

namespace echo::test {

::testing::AssertionResult is_integer(const RedisReply& r, long long expected) {
  if (r && r->type == REDIS_REPLY_INTEGER && r->integer == expected) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "expected integer " << expected << ", got "
         << (r && r->type == REDIS_REPLY_ERROR ? "error " : "") << text(r.get());
}

::testing::AssertionResult is_error(const RedisReply& r, std::string_view expected) {
  if (r && r->type == REDIS_REPLY_ERROR && text(r.get()) == expected) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "expected error \"" << expected << "\", got " << text(r.get());
}

::testing::AssertionResult refuses_across_slots(redisContext* c, const std::string& declared,
                                                const std::string& undeclared) {
  const std::string script =
      "#!lua\nredis.call('SET', KEYS[1], 1)\nreturn redis.call('SET', '" + undeclared + "', 1)";
  RedisReply r = command(c, "EVAL %s 1 %s", script.c_str(), declared.c_str());
  if (!r || r->type != REDIS_REPLY_ERROR) {
    return ::testing::AssertionFailure() << "expected a cross-slot error, got " << text(r.get());
  }
  if (text(r.get()).find("same slot") == std::string::npos) {
    return ::testing::AssertionFailure() << "expected a cross-slot error, got " << text(r.get());
  }
  return ::testing::AssertionSuccess();
}

// Every KEY, and every ARGV that names a key prefix, must sit in the slot of KEYS[1]: that is
// what lets the host send the script to one cluster node.
RedisReply ScriptClient::run(std::string_view name, const Args& keys, const Args& argv) {
  const lua::Script* script = lua::find_script(name);
  if (script == nullptr) {
    ADD_FAILURE() << "no embedded script " << name;
    return nullptr;
  }
  if (!keys.empty()) {
    const std::uint16_t slot = table::hash_slot(keys.front());
    for (const std::string& k : keys) {
      EXPECT_EQ(table::hash_slot(k), slot) << name << ": KEY " << k << " leaves the slot";
    }
    for (const std::string& a : argv) {
      if (a.starts_with("emq:") || a.starts_with("ecc:")) {
        EXPECT_EQ(table::hash_slot(a), slot) << name << ": ARGV " << a << " leaves the slot";
      }
    }
  }
  if (load_ == Load::kStrictSlot) {
    return send("EVAL", "#!lua\n" + std::string(script->source), keys, argv);
  }
  RedisReply r = send("EVALSHA", std::string(script->sha1), keys, argv);
  if (r && r->type == REDIS_REPLY_ERROR && text(r.get()).starts_with("NOSCRIPT")) {
    RedisReply loaded = command(c_, "SCRIPT LOAD %b", script->source.data(), script->source.size());
    EXPECT_EQ(text(loaded.get()), script->sha1) << name << ": the server hashes it otherwise";
    r = send("EVALSHA", std::string(script->sha1), keys, argv);
  }
  return r;
}

std::string ScriptClient::hget(const std::string& key, const std::string& field) {
  return text(command(c_, "HGET %s %s", key.c_str(), field.c_str()).get());
}

std::string ScriptClient::zscore(const std::string& key, const std::string& member) {
  return text(command(c_, "ZSCORE %s %s", key.c_str(), member.c_str()).get());
}

long long ScriptClient::integer(const char* format, const std::string& key) {
  RedisReply r = command(c_, format, key.c_str());
  EXPECT_TRUE(r && r->type == REDIS_REPLY_INTEGER) << format << " " << key << ": " << text(r.get());
  return r && r->type == REDIS_REPLY_INTEGER ? r->integer : LLONG_MIN;
}

long long ScriptClient::dbsize() {
  RedisReply r = command(c_, "DBSIZE");
  return r && r->type == REDIS_REPLY_INTEGER ? r->integer : LLONG_MIN;
}

long long ScriptClient::now_ms() {
  RedisReply r = command(c_, "TIME");
  EXPECT_TRUE(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2);
  return std::stoll(text(r->element[0])) * 1000 + std::stoll(text(r->element[1])) / 1000;
}

RedisReply ScriptClient::send(const char* verb, const std::string& script, const Args& keys,
                              const Args& argv) {
  Args args{verb, script, std::to_string(keys.size())};
  args.insert(args.end(), keys.begin(), keys.end());
  args.insert(args.end(), argv.begin(), argv.end());
  return command_argv(c_, args);
}

}  // namespace echo::test
