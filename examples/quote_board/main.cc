// SPDX-License-Identifier: MIT
// quote_board [--server H:P] [--instruments N] [--readers N] [--reprices N]: exit 0 iff the
// board's own check passed, 1 when it failed or the server could not be reached or was lost,
// 2 on a bad argument.
#include <iostream>
#include <string>

#include "quote_board.h"

int main(int argc, char** argv) {
  const auto o = echo::examples::parse_quote_board_args(argc, argv);
  if (!o) {
    std::cerr << "usage: quote_board [--server H:P] [--instruments 1..1000] [--readers 1..64] "
                 "[--reprices N >= 1]\n";
    return 2;
  }
  try {
    return echo::examples::run_quote_board(*o, std::cout).ok ? 0 : 1;
  } catch (const std::invalid_argument& e) {
    std::cerr << "quote_board: " << e.what() << '\n';
    return 2;
  } catch (const std::exception& e) {  // no server, or the server lost mid-run
    std::cerr << "quote_board: " << e.what() << '\n';
    return 1;
  }
}
