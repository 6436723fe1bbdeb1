// SPDX-License-Identifier: MIT
// OpenSSL 3 behind the connector: shared SSL_CTXs keyed by their options, and client sessions
// over memory BIOs (the io_uring receive fills one, the io_uring send drains the other).
#include "tls_session.h"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <climits>
#include <filesystem>
#include <map>
#include <mutex>
#include <new>
#include <stdexcept>

#include <echo/io/io_error.h>

namespace echo::io {
namespace {

// OpenSSL's error queue as one line ("error:0A000086:SSL routines::certificate verify failed;
// ..."), emptied. Thread-local in OpenSSL: each call site clears it first.
std::string drain_errors() {
  std::string text;
  char buf[256];
  while (const unsigned long e = ERR_get_error()) {
    ERR_error_string_n(e, buf, sizeof buf);
    if (!text.empty()) text += "; ";
    text += buf;
  }
  return text;
}

[[noreturn]] void refuse(const char* knob, const std::string& path, const std::string& why) {
  throw std::invalid_argument(std::string("TlsOptions::") + knob + " '" + path + "' " + why);
}

void check_readable(const char* knob, const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) refuse(knob, path, "is not a readable file");
}

bool is_ip_literal(const std::string& name) {
  unsigned char buf[sizeof(in6_addr)];
  return ::inet_pton(AF_INET, name.c_str(), buf) == 1 ||
         ::inet_pton(AF_INET6, name.c_str(), buf) == 1;
}

}  // namespace

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

std::shared_ptr<TlsContext> TlsContext::for_options(const TlsOptions& o) {
  if (o.cert_file.empty() != o.key_file.empty()) {
    throw std::invalid_argument(
        "TlsOptions::cert_file and key_file: give both (a client certificate) or neither");
  }
  // Live contexts by their options: connections of one engine (command, subscriber, parkers,
  // cluster nodes) share one CA store and one parsed key. A context dies with its last session.
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<TlsContext>> live;
  const std::string key =
      o.ca_file + '\0' + o.cert_file + '\0' + o.key_file + '\0' + (o.verify ? '1' : '0');
  std::lock_guard lock(mu);
  if (auto found = live.find(key); found != live.end()) {
    if (auto ctx = found->second.lock()) return ctx;
  }
  ERR_clear_error();
  SSL_CTX* raw = SSL_CTX_new(TLS_client_method());
  if (raw == nullptr) throw std::bad_alloc();
  std::shared_ptr<TlsContext> ctx(new TlsContext(raw));
  // TLS 1.2 and 1.3 only, and never a renegotiation (a 1.2 server asking for one is refused).
  SSL_CTX_set_min_proto_version(raw, TLS1_2_VERSION);
  SSL_CTX_set_options(raw, SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_verify(raw, o.verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, nullptr);
  if (!o.ca_file.empty()) {
    check_readable("ca_file", o.ca_file);
    if (SSL_CTX_load_verify_locations(raw, o.ca_file.c_str(), nullptr) != 1) {
      refuse("ca_file", o.ca_file, "holds no usable PEM certificate: " + drain_errors());
    }
  } else if (o.verify && SSL_CTX_set_default_verify_paths(raw) != 1) {
    throw std::invalid_argument(
        "TlsOptions::ca_file is empty and the system trust store does "
        "not load: " +
        drain_errors());
  }
  if (!o.cert_file.empty()) {
    check_readable("cert_file", o.cert_file);
    check_readable("key_file", o.key_file);
    if (SSL_CTX_use_certificate_chain_file(raw, o.cert_file.c_str()) != 1) {
      refuse("cert_file", o.cert_file, "holds no usable PEM certificate: " + drain_errors());
    }
    if (SSL_CTX_use_PrivateKey_file(raw, o.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
      refuse("key_file", o.key_file, "holds no usable PEM private key: " + drain_errors());
    }
    if (SSL_CTX_check_private_key(raw) != 1) {
      refuse("key_file", o.key_file, "does not match cert_file: " + drain_errors());
    }
  }
  // Entries of dead contexts are swept here, so the map holds only the live ones.
  std::erase_if(live, [](const auto& e) { return e.second.expired(); });
  live[key] = ctx;
  return ctx;
}

TlsSession::TlsSession(std::shared_ptr<TlsContext> ctx, const std::string& peer_name, bool verify)
    : ctx_(std::move(ctx)) {
  ERR_clear_error();
  ssl_ = SSL_new(ctx_->get());
  in_ = BIO_new(BIO_s_mem());
  out_ = BIO_new(BIO_s_mem());
  if (ssl_ == nullptr || in_ == nullptr || out_ == nullptr) {
    BIO_free(in_);
    BIO_free(out_);
    SSL_free(ssl_);
    throw std::bad_alloc();
  }
  // An empty input BIO means "not yet" (retry), never end of stream: the socket says EOF.
  BIO_set_mem_eof_return(in_, -1);
  BIO_set_mem_eof_return(out_, -1);
  SSL_set_bio(ssl_, in_, out_);  // ssl_ owns both from here
  SSL_set_connect_state(ssl_);
  if (!peer_name.empty()) {
    const bool ip = is_ip_literal(peer_name);
    // RFC 6066: SNI carries host names only, never an address.
    if (!ip) SSL_set_tlsext_host_name(ssl_, peer_name.c_str());
    if (verify) {
      if (ip) {
        X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_), peer_name.c_str());
      } else {
        SSL_set_hostflags(ssl_, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
        SSL_set1_host(ssl_, peer_name.c_str());
      }
    }
  }
}

TlsSession::~TlsSession() { SSL_free(ssl_); }

void TlsSession::feed(std::span<const char> cipher) {
  // A memory BIO takes everything (it grows); the count is bounded by one receive buffer.
  if (!cipher.empty()) BIO_write(in_, cipher.data(), static_cast<int>(cipher.size()));
}

bool TlsSession::handshaking() const noexcept { return SSL_in_init(ssl_) != 0; }

TlsSession::Step TlsSession::handshake() {
  if (failed_) return Step::kFailed;
  ERR_clear_error();
  const int r = SSL_do_handshake(ssl_);
  if (r == 1) return Step::kDone;
  const int e = SSL_get_error(ssl_, r);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return Step::kWant;
  fail(e, "handshake");
  return Step::kFailed;
}

long TlsSession::read(std::span<char> out) {
  if (failed_) return kFailed;
  ERR_clear_error();
  const int len = static_cast<int>(std::min<std::size_t>(out.size(), INT_MAX));
  const int r = SSL_read(ssl_, out.data(), len);
  if (r > 0) return r;
  const int e = SSL_get_error(ssl_, r);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return kWantMore;
  if (e == SSL_ERROR_ZERO_RETURN) return kClosed;
  fail(e, "read");
  return kFailed;
}

bool TlsSession::write(std::span<const char> plain) {
  if (failed_) return false;
  std::size_t done = 0;
  while (done < plain.size()) {
    ERR_clear_error();
    const int len = static_cast<int>(std::min<std::size_t>(plain.size() - done, INT_MAX));
    const int r = SSL_write(ssl_, plain.data() + done, len);
    if (r <= 0) {
      fail(SSL_get_error(ssl_, r), "write");
      return false;
    }
    done += static_cast<std::size_t>(r);
  }
  return true;
}

std::size_t TlsSession::drain(std::string& out) {
  const std::size_t pending = BIO_ctrl_pending(out_);
  if (pending == 0) return 0;
  const std::size_t at = out.size();
  out.resize(at + pending);
  const int r = BIO_read(out_, out.data() + at, static_cast<int>(pending));
  out.resize(at + static_cast<std::size_t>(r > 0 ? r : 0));
  return out.size() - at;
}

void TlsSession::close_notify() noexcept {
  if (failed_ || SSL_in_init(ssl_) != 0) return;
  ERR_clear_error();
  SSL_shutdown(ssl_);  // queues close_notify in the write BIO; the answer is not awaited
  ERR_clear_error();
}

void TlsSession::fail(int ssl_result, const char* during) {
  failed_ = true;
  const long verify = SSL_get_verify_result(ssl_);
  if (verify != X509_V_OK) {
    failure_ = make_error_code(IoErrc::kTlsVerify);
    detail_ = std::string("certificate verify failed: ") + X509_verify_cert_error_string(verify);
    ERR_clear_error();
    return;
  }
  failure_ = make_error_code(IoErrc::kTlsHandshake);
  std::string errors = drain_errors();
  if (errors.empty()) errors = "SSL_get_error " + std::to_string(ssl_result);
  detail_ = std::string("TLS ") + during + " failed: " + errors;
}

}  // namespace echo::io
