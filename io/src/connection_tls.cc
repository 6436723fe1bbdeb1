// SPDX-License-Identifier: MIT
// The connection's TLS half: after the TCP connect, the handshake on the loop thread (ciphertext
// in through the same io_uring receive, out through the same io_uring send, OpenSSL between them
// on memory BIOs), then every record both ways; failures typed (tls_verify, tls_handshake) with
// OpenSSL's reason kept for cause(); close_notify sent at close and honoured when received.
#include <echo/io/connection.h>

#include <echo/base/counter.h>

#include <sys/socket.h>

#include <algorithm>

#include "connection_text.h"
#include "tls_session.h"

namespace echo::io {

namespace {
constexpr std::size_t kPlainChunk = std::size_t{16} * 1024;  // one TLS record's worth of plaintext
}  // namespace

void Connection::start_tls() {
  set_status(ConnStatus::kBooting);
  // The name to check and send as SNI: the knob, else the host dialled now (retarget moves it).
  // A Unix socket has no host to check: only server_name, when given, is.
  std::string name = options_.tls.server_name;
  if (name.empty() && options_.unix_path.empty()) name = options_.host;
  tls_ = std::make_unique<TlsSession>(tls_ctx_, name, options_.tls.verify);
  tls_handshaking_ = true;
  wake_tick();  // the handshake's deadline is the tick's to watch
  tls_began_ = std::chrono::steady_clock::now();
  boot_step_ = "TLS handshake";
  last_recv_full_ = false;
  decoder_.reset();
  // The first step writes the ClientHello into the session; the flush sends it.
  if (tls_->handshake() == TlsSession::Step::kFailed) return tls_failed();
  schedule_flush();
  arm_recv();
}

void Connection::tls_received(int res) {
  if (res <= 0) {
    // The peer closed the socket without close_notify (or the socket failed): a loss. During a
    // first handshake the server would have sent an alert if it refused us: a silent close is
    // retried like any other loss.
    std::string detail = where() + (res == 0 ? std::string(" closed the connection")
                                             : ": " + std::system_category().message(-res));
    if (status_.load(std::memory_order_relaxed) == ConnStatus::kBooting) {
      detail += " during the " + std::string(boot_step_);
    }
    lose(make_error_code(IoErrc::kDisconnected), std::move(detail));
    return;
  }
  last_recv_full_ = static_cast<std::size_t>(res) == recv_len_;
  if (tls_handshaking_ && first_bytes_.size() < kShownBytes) {
    // What a peer that is not TLS said instead (a RESP error, an HTTP status), for the cause.
    first_bytes_.append(tls_in_.data(), std::min<std::size_t>(kShownBytes - first_bytes_.size(),
                                                              static_cast<std::size_t>(res)));
  }
  // Receiving does not touch last_io_: the heartbeat counts from the last send (connection.cc).
  tls_->feed(std::span<const char>(tls_in_.data(), static_cast<std::size_t>(res)));
  if (tls_handshaking_) {
    switch (tls_->handshake()) {
      case TlsSession::Step::kFailed:
        return tls_failed();
      case TlsSession::Step::kWant:
        schedule_flush();  // the handshake's next flight, if it wrote one
        arm_recv();
        return;
      case TlsSession::Step::kDone:
        tls_handshaking_ = false;
        first_bytes_.clear();  // from here on the plaintext's, as a plain socket keeps them
        boot();                // queues HELLO behind the handshake's last flight; arms the receive
        if (!tls_) return;
        break;  // records that came with the last flight (session tickets) are read below
    }
  }
  const std::uint64_t gen = conn_gen_;
  // Every whole record buffered, decrypted into the decoder (a partial one waits for more).
  for (;;) {
    std::span<char> room = decoder_.prepare(std::max(kPlainChunk, decoder_.wanted()));
    const long n = tls_->read(room);
    if (n > 0) {
      if (first_bytes_.size() < kShownBytes) {
        first_bytes_.append(room.data(), std::min<std::size_t>(kShownBytes - first_bytes_.size(),
                                                               static_cast<std::size_t>(n)));
      }
      decoder_.commit(static_cast<std::size_t>(n));
      continue;
    }
    if (n == TlsSession::kWantMore) break;
    if (n == TlsSession::kClosed) {  // close_notify: the server is going away
      lose(make_error_code(IoErrc::kDisconnected), where() + " closed the TLS session");
      return;
    }
    return tls_failed();
  }
  schedule_flush();  // a record read may have queued an answer (a key update)
  dispatch();
  if (gen == conn_gen_ && fd_ && !closing_ && !recv_op_.armed) arm_recv();
}

void Connection::tls_send_some() {
  if (tls_sent_ == tls_out_.size()) {
    tls_out_.clear();
    tls_sent_ = 0;
    if (!tls_handshaking_ && !out_.empty()) {
      if (!tls_->write(out_.bytes())) return tls_failed();
      base::solo_add(pipelines_);
      base::solo_add(commands_, out_commands_);
      out_commands_ = 0;
      out_.clear();
    }
    if (tls_->drain(tls_out_) == 0) return;
  }
  loop_.send(fd_.get(), tls_out_.data() + tls_sent_, tls_out_.size() - tls_sent_, send_op_);
}

void Connection::tls_failed() {
  const std::error_code cause = tls_->failure();
  std::string detail = where() + ": " + tls_->detail();
  if (tls_handshaking_ && cause == IoErrc::kTlsHandshake && !first_bytes_.empty()) {
    detail += "; its first bytes: \"" + escaped(first_bytes_) + "\": is this a TLS port?";
  }
  // A certificate that fails verification never becomes acceptable by retrying; any other TLS
  // failure before the first ready (an alert for a missing client certificate, a server that is
  // not TLS) is a configuration error too. After a ready, a failed handshake is a loss (a server
  // restarting), and a broken record a protocol error.
  if (cause == IoErrc::kTlsVerify || !ever_ready_) return stop_fatal(cause, std::move(detail));
  if (tls_handshaking_) return lose(cause, std::move(detail));
  base::solo_add(wire_errors_);
  lose(make_error_code(IoErrc::kProtocolError), std::move(detail));
}

void Connection::tls_goodbye() {
  // Best effort: close_notify (or the alert a failure queued) with one non-blocking send, only
  // when no send is in flight (its bytes would interleave). The socket closes right after.
  if (!fd_ || send_op_.armed || tls_sent_ != tls_out_.size()) return;
  if (!tls_handshaking_) tls_->close_notify();
  std::string bye;
  if (tls_->drain(bye) == 0) return;
  (void)::send(fd_.get(), bye.data(), bye.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}

}  // namespace echo::io
