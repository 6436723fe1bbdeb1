// SPDX-License-Identifier: MIT
// A plain blocking hiredis client (RESP2): the baseline every server-side figure is a ratio to,
// and the measurements' own eyes on the server. Owners for its context and replies, a connect
// that throws, and a command that keeps the reply.
#pragma once

#include <hiredis/hiredis.h>

#include <memory>
#include <string>

namespace echo::harness {

// Releases a hiredis handle with hiredis's own `Free` (freeReplyObject, redisFree).
template <auto Free>
struct FreeWith {
  template <class T>
  void operator()(T* p) const noexcept {
    Free(p);
  }
};
using Reply = std::unique_ptr<redisReply, FreeWith<freeReplyObject>>;
using Context = std::unique_ptr<redisContext, FreeWith<redisFree>>;

// A connection to host:port with a 5 s reply timeout (a lost reply fails the measurement instead
// of hanging it), authenticated with stage.h's credentials() when they carry a password; throws
// std::runtime_error naming the address when it cannot connect or the server refuses the AUTH.
Context connect(const std::string& host, int port);

// AUTH [user] password on `c` with stage.h's credentials(), when they carry one. Empty when it
// succeeded or there was nothing to send, else the server's refusal or the transport's error.
std::string authenticate(redisContext* c);

// One command, printf-style as redisCommand (%s, %b with a length). Null on a transport error.
template <class... Args>
Reply command(redisContext* c, const char* format, Args... args) {
  return Reply(static_cast<redisReply*>(redisCommand(c, format, args...)));
}

}  // namespace echo::harness
