// SPDX-License-Identifier: MIT
// Certificates made at run time for a local TLS server (the tests, the drill, the bench): a CA,
// a server certificate for 127.0.0.1 and localhost, a client certificate, and a second CA that
// signed none of them (the "wrong CA" case), all made by the `openssl` program in a temporary
// directory removed with the object. Never for production: keys are unencrypted, valid 2 days.
#pragma once

#include <filesystem>
#include <string>

namespace echo::testing {

class LocalTlsFiles {
 public:
  // Runs `openssl req` / `openssl x509` (P-256 keys). Throws std::runtime_error naming the step
  // and openssl's output when one fails (the program missing included). Caller thread; ~0.2 s.
  LocalTlsFiles();
  ~LocalTlsFiles();  // removes the directory
  LocalTlsFiles(const LocalTlsFiles&) = delete;
  LocalTlsFiles& operator=(const LocalTlsFiles&) = delete;

  std::string ca_file() const { return (dir_ / "ca.crt").string(); }
  std::string server_cert() const { return (dir_ / "server.crt").string(); }  // SAN 127.0.0.1,
  std::string server_key() const { return (dir_ / "server.key").string(); }   // localhost
  std::string client_cert() const { return (dir_ / "client.crt").string(); }
  std::string client_key() const { return (dir_ / "client.key").string(); }
  std::string other_ca_file() const { return (dir_ / "other-ca.crt").string(); }
  const std::filesystem::path& dir() const noexcept { return dir_; }

 private:
  std::filesystem::path dir_;
};

}  // namespace echo::testing
