// SPDX-License-Identifier: MIT
// A blocking connection that its calling thread drives itself: connect, HELLO 3 (with AUTH and
// SETNAME), then one command at a time, written and answered on that thread, as a hiredis context
// is. For the calls whose round trip is their whole cost: handing a call to an io thread and being
// handed its answer back costs two cross-thread wakes beside the round trip (~20 us each on a
// small VM), which is what a client that talks to the server from its own thread never pays.
//
// CONTRACT
// - Threads: none inside. One thread at a time uses a link (open, call, close).
// - Plain TCP or a Unix socket (host starting with '/'); no TLS: the engine uses its io thread's
//   connection for a TLS server.
// - call() blocks until the answer or `deadline`. An error other than kServerError leaves the link
//   closed (its next call must open it again): after a lost socket, a timeout or bytes the decoder
//   refused, the stream's position is unknown.
// - Memory: the request buffer and the decoder keep their capacity, so a thread calling again and
//   again allocates nothing per call once warm (the answer's Resp3Owned keeps its own).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <system_error>

#include <echo/io/connection.h>
#include <echo/io/resp3_decoder.h>
#include <echo/io/resp3_value.h>
#include <echo/io/resp_encoder.h>
#include <echo/io/unique_fd.h>

namespace echo::io {

struct LinkTarget {
  std::string host;  // a name or literal; '/' first: a Unix socket's path
  int port = 0;
  std::string username = "default";
  std::string password;  // empty: no AUTH (the server's default user, nopass)
  std::string client_name;
};

class BlockingLink {
 public:
  using Clock = std::chrono::steady_clock;

  BlockingLink() = default;
  BlockingLink(const BlockingLink&) = delete;
  BlockingLink& operator=(const BlockingLink&) = delete;

  // Connects and boots by `deadline`. Errors: kConnectFailed (resolve or connect, with errno's
  // words in `detail`), kTimeout, kAuthRefused (NOAUTH / WRONGPASS), kBootRefused (any other
  // refusal of HELLO: the server's words in `detail`), kDisconnected, kProtocolError.
  std::error_code open(const LinkTarget& target, Clock::time_point deadline);
  bool is_open() const noexcept { return static_cast<bool>(fd_); }
  // Open, and the server has not closed it while it was idle (its idle `timeout`, CLIENT KILL, a
  // restart): nothing is owed on an idle link, so a readable socket is its end, found before a
  // call leaves rather than after, when whether the server ran the call would be unknown. One
  // non-blocking peek. A link found closed is closed here.
  bool usable() noexcept;
  void close() noexcept;

  // Sends `words` (one command) and reads its answer into `reply`. Empty: the server's answer;
  // kServerError: the server refused it (`reply` holds its words). `script` given (`words` an
  // EVALSHA of it): a NOSCRIPT answer loads the script (SCRIPT LOAD; kShaMismatch when the server
  // computes another SHA) and sends the call again. Any other error closes the link:
  // kDisconnected (the link was lost before the answer came), kTimeout, kProtocolError. `sent` says
  // whether any byte of the call left (the server may have run it): false, the call may be sent
  // elsewhere.
  std::error_code call(std::span<const std::string_view> words, const Script* script,
                       Clock::time_point deadline, Resp3Owned& reply, bool& sent);

  // What the last failed open() or call() saw, in words ("connect to 127.0.0.1:7000: Connection
  // refused").
  const std::string& detail() const noexcept { return detail_; }

 private:
  // A send or recv that moved no byte (`n` <= 0, errno its cause): empty to go on (interrupted,
  // or a slice passed before `deadline`), else the link closed with the cause.
  std::error_code stalled(ssize_t n, Clock::time_point deadline, const char* what);
  std::error_code send_all(Clock::time_point deadline, bool& sent);
  std::error_code read_one(Clock::time_point deadline, Resp3Owned& reply);
  std::error_code fail(std::error_code ec, std::string detail);

  UniqueFd fd_;
  RespEncoder out_;
  Resp3Decoder in_;
  std::string detail_;
};

}  // namespace echo::io
