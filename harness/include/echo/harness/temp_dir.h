// SPDX-License-Identifier: MIT
// A fresh directory under the system temp dir, removed with everything in it: the journal files
// and plain SQLite baselines of the benches and the drill live in one.
#pragma once

#include <filesystem>
#include <new>
#include <string_view>

namespace echo::harness {

class TempDir {
 public:
  // Creates <temp>/<prefix>XXXXXX; throws std::runtime_error naming it when that fails.
  explicit TempDir(std::string_view prefix);
  // The same, but a failure leaves ok() false (for a caller that reports it as a failed check).
  TempDir(std::string_view prefix, std::nothrow_t) noexcept;
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const noexcept { return path_; }
  bool ok() const noexcept { return !path_.empty(); }

 private:
  std::filesystem::path path_;
};

}  // namespace echo::harness
