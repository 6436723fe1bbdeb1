// SPDX-License-Identifier: MIT
#include "server_target.h"

#include <cstdlib>
#include <exception>
#include <iostream>

#include <echo/harness/stage.h>
#include <echo/io/cluster_map.h>

namespace echo::cli {

void add_tls_flags(CLI::App* command, TlsArgs& a) {
  command->add_option("--tls-ca", a.ca,
                      "PEM CA file the server's certificate must chain to "
                      "(turns TLS on; default with TLS: the system store)");
  command->add_option("--tls-cert", a.cert, "PEM client certificate (with --tls-key)");
  command->add_option("--tls-key", a.key, "PEM key of --tls-cert");
  command->add_option("--tls-server-name", a.server_name,
                      "name sent as SNI and checked in the server's certificate (default: the "
                      "host)");
}

io::TlsOptions tls_options(const TlsArgs& a) {
  io::TlsOptions t;
  t.enabled = a.given();
  t.ca_file = a.ca;
  t.cert_file = a.cert;
  t.key_file = a.key;
  t.server_name = a.server_name;
  return t;
}

int open_server(std::string_view command, const std::string& server, ServerTarget& out,
                const TlsArgs* tls) {
  try {
    if (server.empty()) {
      testing::LocalServerOptions o;
      if (tls != nullptr) {
        out.own_tls = std::make_unique<testing::LocalTlsFiles>();
        o.tls.cert_file = out.own_tls->server_cert();
        o.tls.key_file = out.own_tls->server_key();
        o.tls.ca_file = out.own_tls->ca_file();
      }
      out.own = std::make_unique<testing::LocalServer>(o);
      out.target = {out.own->host(), out.own->port()};
      if (tls != nullptr) {
        out.target.tls_port = out.own->tls_port();
        out.target.tls.enabled = true;
        out.target.tls.ca_file = out.own_tls->ca_file();
      }
      out.described = "redis-server " + out.own->version() + " on " + out.target.host + ':' +
                      std::to_string(out.target.port) + " (started by the " + std::string(command) +
                      ")";
      return 0;
    }
    const auto address = io::parse_address(server);
    if (!address) {
      std::cerr << "echostore " << command << ": --server wants HOST:PORT (port 1..65535), got '"
                << server << "'\n";
      return 2;
    }
    out.target = {address->host, address->port};
    out.described = "server " + server + " (given)";
    if (tls != nullptr && (tls->given() || !tls->port.empty())) {
      const auto port = io::parse_address("h:" + tls->port);
      if (!tls->given() || !port) {
        std::cerr << "echostore " << command
                  << ": TLS against --server wants --tls-port PORT (1..65535) and --tls-ca (or "
                     "another --tls-* flag)\n";
        return 2;
      }
      out.target.tls_port = port->port;
      out.target.tls = tls_options(*tls);
      out.described += ", TLS on port " + tls->port;
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "echostore " << command << ": " << e.what() << '\n';
    return 1;
  }
}

void add_auth_options(CLI::App* command, AuthArgs& args) {
  command->add_option("--user", args.user, "ACL user name (default: default)");
  command->add_option("--password", args.password,
                      "ACL password (default: $REDISCLI_AUTH, else none)");
}

void apply_auth(const AuthArgs& args) {
  harness::Credentials c;
  c.username = args.user;
  c.password = args.password;
  if (c.password.empty()) {
    if (const char* env = std::getenv("REDISCLI_AUTH")) c.password = env;
  }
  harness::set_credentials(std::move(c));
}

}  // namespace echo::cli
