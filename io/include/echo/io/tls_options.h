// SPDX-License-Identifier: MIT
// TLS for a connection (the connector of docs/wire.md, "The connector", over OpenSSL 3): what to
// trust, what to present and which name to check. No OpenSSL type appears here; the session lives
// in io/src/tls_session.h. The handshake and every record run on the loop thread over io_uring
// through memory BIOs (this kernel has no kTLS: CONFIG_TLS is unset, so there is no kTLS path).
#pragma once

#include <string>

namespace echo::io {

struct TlsOptions {
  // Off by default: a plain TCP connection. On: TLS 1.2 or 1.3 (no renegotiation) right after the
  // TCP connect, before HELLO.
  bool enabled = false;
  // PEM file of the CA certificate(s) that sign the server's; empty = the system's default trust
  // store. Must exist and load (checked when the Connection is constructed).
  std::string ca_file;
  // The client certificate (PEM, chain allowed) and its private key (PEM): both or neither; for a
  // server that asks for one (`tls-auth-clients yes|optional`).
  std::string cert_file;
  std::string key_file;
  // The name sent as SNI (host names only: an IP literal is never sent as SNI) and the name the
  // server's certificate must carry (a DNS SAN, or an IP SAN for an IP literal). Empty = the
  // host the connection dials (ConnectionOptions::host, following every retarget).
  std::string server_name;
  // Verify the server's chain against ca_file and its name; false accepts any certificate (for
  // tests of the transport alone; never in production).
  bool verify = true;
};

}  // namespace echo::io
