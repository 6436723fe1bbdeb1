// SPDX-License-Identifier: MIT
// /proc/self/task/<tid>/status's two context-switch lines, read with plain POSIX calls (no
// stream, no allocation): stats may be read often, and from a signal-free but busy thread.
#include "thread_switches.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <string_view>

namespace echo::engine {
namespace {

// The number after `key` in `text` ("voluntary_ctxt_switches:\t123"), 0 when absent.
std::uint64_t field(std::string_view text, std::string_view key) noexcept {
  for (std::size_t at = text.find(key); at != std::string_view::npos; at = text.find(key, at + 1)) {
    if (at != 0 && text[at - 1] != '\n') continue;  // "nonvoluntary_..." contains "voluntary_..."
    std::size_t p = at + key.size();
    while (p < text.size() && (text[p] == ' ' || text[p] == '\t')) ++p;
    std::uint64_t v = 0;
    std::from_chars(text.data() + p, text.data() + text.size(), v);
    return v;
  }
  return 0;
}

}  // namespace

int current_tid() noexcept { return static_cast<int>(::syscall(SYS_gettid)); }

ThreadSwitches thread_switches(int tid) noexcept {
  if (tid <= 0) return {};
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%d/status", tid);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  char buf[4096];
  std::size_t len = 0;
  for (ssize_t n; len < sizeof buf && (n = ::read(fd, buf + len, sizeof buf - len)) > 0;) {
    len += static_cast<std::size_t>(n);
  }
  ::close(fd);
  const std::string_view text(buf, len);
  return ThreadSwitches{field(text, "voluntary_ctxt_switches:"),
                        field(text, "nonvoluntary_ctxt_switches:")};
}

}  // namespace echo::engine
