// SPDX-License-Identifier: MIT
// quote_board [--server H:P] [--instruments N] [--readers N] [--reprices N]: exit 0 iff the
// board's own check passed.
#include <cstring>
#include <iostream>
#include <string>

#include "quote_board.h"

int main(int argc, char** argv) {
  echo::examples::QuoteBoardOptions o;
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    auto number = [&](int& field) { field = std::stoi(argv[++i]); };
    if (std::strcmp(argv[i], "--server") == 0 && has_value) {
      o.server = argv[++i];
    } else if (std::strcmp(argv[i], "--instruments") == 0 && has_value) {
      number(o.instruments);
    } else if (std::strcmp(argv[i], "--readers") == 0 && has_value) {
      number(o.readers);
    } else if (std::strcmp(argv[i], "--reprices") == 0 && has_value) {
      number(o.reprices);
    } else {
      std::cerr << "usage: quote_board [--server H:P] [--instruments N] [--readers N] "
                   "[--reprices N]\n";
      return 2;
    }
  }
  try {
    return echo::examples::run_quote_board(o, std::cout).ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "quote_board: " << e.what() << '\n';
    return 2;
  }
}
