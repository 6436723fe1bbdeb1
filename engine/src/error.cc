// SPDX-License-Identifier: MIT
// engine::Error's printing (error.h).
#include <echo/engine/error.h>

#include <cxxabi.h>

#include <cstdlib>
#include <memory>
#include <ostream>

namespace echo::engine {

std::string type_name(const std::type_info& type) {
  int status = 0;
  const std::unique_ptr<char, decltype(&std::free)> name(
      abi::__cxa_demangle(type.name(), nullptr, nullptr, &status), &std::free);
  return status == 0 && name ? std::string(name.get()) : std::string(type.name());
}

std::ostream& operator<<(std::ostream& os, const Error& e) {
  os << e.code.category().name() << ':' << e.code.message();
  if (!e.detail.empty()) os << " (" << e.detail << ')';
  return os;
}

}  // namespace echo::engine
