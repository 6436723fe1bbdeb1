// SPDX-License-Identifier: MIT
// engine::Error's printing (error.h).
#include <echo/engine/error.h>

#include <ostream>

namespace echo::engine {

std::ostream& operator<<(std::ostream& os, const Error& e) {
  os << e.code.category().name() << ':' << e.code.message();
  if (!e.detail.empty()) os << " (" << e.detail << ')';
  return os;
}

}  // namespace echo::engine
