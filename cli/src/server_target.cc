// SPDX-License-Identifier: MIT
#include "server_target.h"

#include <cstdlib>
#include <exception>
#include <iostream>

#include <echo/harness/stage.h>
#include <echo/io/cluster_map.h>

namespace echo::cli {

int open_server(std::string_view command, const std::string& server, ServerTarget& out) {
  try {
    if (server.empty()) {
      out.own = std::make_unique<engine::LocalServer>();
      out.target = {out.own->host(), out.own->port()};
      out.described = "redis-server " + out.own->version() + " on " + out.target.host + ':' +
                      std::to_string(out.target.port) + " (started by the " +
                      std::string(command) + ")";
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
