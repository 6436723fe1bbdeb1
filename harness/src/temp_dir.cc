// SPDX-License-Identifier: MIT
// TempDir: mkdtemp under std::filesystem::temp_directory_path(), remove_all on destruction.
#include <echo/harness/temp_dir.h>

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <system_error>

namespace echo::harness {
namespace {

// The created directory, or an empty path with errno set.
std::filesystem::path make(std::string_view prefix) noexcept {
  try {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / (std::string(prefix) + "XXXXXX")).string();
    if (::mkdtemp(tmpl.data()) == nullptr) return {};
    return tmpl;
  } catch (const std::exception&) {
    return {};
  }
}

}  // namespace

TempDir::TempDir(std::string_view prefix) : path_(make(prefix)) {
  if (path_.empty()) {
    throw std::runtime_error("cannot create a temp dir " + std::string(prefix) +
                             "XXXXXX: " + std::strerror(errno));
  }
}

TempDir::TempDir(std::string_view prefix, std::nothrow_t) noexcept : path_(make(prefix)) {}

TempDir::~TempDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

}  // namespace echo::harness
