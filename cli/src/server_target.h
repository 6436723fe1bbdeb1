// SPDX-License-Identifier: MIT
// The server a command measures against: the one --server names, or a redis-server it starts on
// a free loopback port for the command's life (`echostore bench`, `echostore referee`).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

#include <echo/io/tls_options.h>
#include <echo/testing/local_server.h>
#include <echo/testing/local_tls.h>

#include "drill/drill.h"

namespace echo::cli {

// --tls-ca/--tls-cert/--tls-key/--tls-server-name (and bench's --tls-port): any one given turns
// TLS on (io::TlsOptions: the CA that signs the server's certificate, a client certificate and
// its key, both or neither, the name to check instead of the host).
struct TlsArgs {
  std::string ca, cert, key, server_name, port;
  bool given() const {
    return !ca.empty() || !cert.empty() || !key.empty() || !server_name.empty();
  }
};
void add_tls_flags(CLI::App* command, TlsArgs& a);
io::TlsOptions tls_options(const TlsArgs& a);

struct ServerTarget {
  DrillTarget target;
  std::unique_ptr<testing::LocalTlsFiles> own_tls;  // the started server's certificates
  std::unique_ptr<testing::LocalServer> own;        // the started server (null for --server's)
  // "redis-server 7.0.15 on 127.0.0.1:40101 (started by the bench)", or "server H:P (given)".
  std::string described;
};

// Fills `out` from `server` (empty: start one). 0, or the exit code after saying why on stderr
// as "echostore <command>: ...": 2 for a --server that is not HOST:PORT, 1 for a server that
// would not start.
// `tls` (bench): a started server also listens for TLS with certificates made now, and
// target.tls/tls_port say how to reach it; with --server, the flags and --tls-port do (a
// --tls-port without a --tls-* flag, or the reverse, is refused with 2).
int open_server(std::string_view command, const std::string& server, ServerTarget& out,
                const TlsArgs* tls = nullptr);

// --user and --password, as redis-cli takes them: the password may come from REDISCLI_AUTH
// instead (a password on the command line is visible to every user of the machine).
struct AuthArgs {
  std::string user = "default";
  std::string password;
};
void add_auth_options(CLI::App* command, AuthArgs& args);
// Makes them the credentials every node and plain connection of the command presents
// (harness::set_credentials); REDISCLI_AUTH when --password was not given. Before connecting.
void apply_auth(const AuthArgs& args);

}  // namespace echo::cli
