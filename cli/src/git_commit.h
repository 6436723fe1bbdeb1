// SPDX-License-Identifier: MIT
// The source tree's commit when this program was built: short hash, "-dirty" if tracked files
// differed from it, "unknown" outside git. Defined in a file the build writes
// (cmake/GitCommit.cmake), read at every build rather than at configure time.
#pragma once

namespace echo::cli {
const char* git_commit() noexcept;
}  // namespace echo::cli
