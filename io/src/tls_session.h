// SPDX-License-Identifier: MIT
// The connector's TLS engine (private: OpenSSL stays out of public headers). A TlsContext is one
// SSL_CTX, shared by every connection built from equal TlsOptions; a TlsSession is one SSL over
// two memory BIOs: the connection feeds it the ciphertext its io_uring receive read and sends
// the ciphertext it drains, so no socket call ever happens inside OpenSSL.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <system_error>

#include <echo/io/tls_options.h>

struct ssl_ctx_st;
struct ssl_st;
struct bio_st;

namespace echo::io {

// One SSL_CTX: the CA store, the client certificate and key, TLS 1.2..1.3, no renegotiation.
class TlsContext {
 public:
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;
  ssl_ctx_st* get() const noexcept { return ctx_; }

  // The context for `o`, shared with every live connection whose options name the same files
  // and verify flag. Loads the files on first use: std::invalid_argument naming the knob
  // (TlsOptions::ca_file, cert_file, key_file) and OpenSSL's reason. Any thread; may block on
  // file reads (call it off the loop thread: the Connection's constructor does).
  static std::shared_ptr<TlsContext> for_options(const TlsOptions& o);

 private:
  explicit TlsContext(ssl_ctx_st* ctx) noexcept : ctx_(ctx) {}
  ssl_ctx_st* ctx_;
};

// One TLS session of one socket. Loop thread only; never blocks, never touches a socket.
class TlsSession {
 public:
  enum class Step : unsigned char { kDone, kWant, kFailed };
  // read()'s answers besides a byte count > 0.
  static constexpr long kWantMore = 0;  // no whole record buffered: feed more ciphertext
  static constexpr long kClosed = -1;   // the peer sent close_notify
  static constexpr long kFailed = -2;   // a record or alert failure: failure() says which

  // A client session that checks the server's certificate for `peer_name` (when verify is on)
  // and sends it as SNI when it is a host name. Throws std::bad_alloc if OpenSSL cannot allocate.
  TlsSession(std::shared_ptr<TlsContext> ctx, const std::string& peer_name, bool verify);
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  // Ciphertext the socket delivered (partial records are fine: OpenSSL buffers them).
  void feed(std::span<const char> cipher);
  // One handshake step: kDone once complete, kWant while it waits for the peer (send what
  // drain() yields, receive, feed, call again), kFailed (see failure()).
  Step handshake();
  bool handshaking() const noexcept;
  // Decrypted bytes into `out`: a count > 0, kWantMore, kClosed or kFailed.
  long read(std::span<char> out);
  // Encrypts all of `plain` (the write BIO grows: never a partial write). False: failure().
  bool write(std::span<const char> plain);
  // Appends every ciphertext byte waiting to be sent (handshake messages, records, alerts) to
  // `out`; the count appended.
  std::size_t drain(std::string& out);
  // Queues close_notify (when the session is established and has not failed).
  void close_notify() noexcept;

  // After a failure: tls_verify when the certificate check failed, else tls_handshake; and the
  // cause as text ("certificate verify failed: unable to get local issuer certificate", or
  // OpenSSL's error queue).
  std::error_code failure() const noexcept { return failure_; }
  const std::string& detail() const noexcept { return detail_; }

 private:
  void fail(int ssl_result, const char* during);

  std::shared_ptr<TlsContext> ctx_;
  ssl_st* ssl_ = nullptr;
  bio_st* in_ = nullptr;   // ciphertext from the peer (owned by ssl_)
  bio_st* out_ = nullptr;  // ciphertext to the peer (owned by ssl_)
  bool failed_ = false;
  std::error_code failure_;
  std::string detail_;
};

}  // namespace echo::io
