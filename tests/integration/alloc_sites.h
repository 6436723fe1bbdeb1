// SPDX-License-Identifier: MIT
// Where a counted window's allocations come from, for publish_allocs_test when ECHO_ALLOC_SITES is
// set: while a window records, every counted operator new keeps its thread's name and its return
// addresses; afterwards each allocation is named by its site, the first two frames in this
// repository's sources (the standard library's frames in between say what allocated: a string, a
// vector, a std::function's functor, a shared state), and the sites are ranked by allocations per
// call. Frames of the test binary are named by addr2line (file and line with a tree built with -g,
// such as the ASan tree), the rest by the dynamic symbol table. Nothing here runs unless asked.
#pragma once

#include <cxxabi.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace echo::test::alloc_sites {

inline constexpr int kDepth = 40;
inline constexpr std::size_t kCapacity = 1 << 15;  // allocations kept per window

struct Allocation {
  int depth = 0;
  char thread[16] = {};
  void* pc[kDepth] = {};
};

// One window at a time; note() is called from operator new on any thread and never allocates.
class Recorder {
 public:
  static bool wanted() { return std::getenv("ECHO_ALLOC_SITES") != nullptr; }

  void start() {
    if (kept_ == nullptr) {
      kept_ = static_cast<Allocation*>(std::calloc(kCapacity, sizeof(Allocation)));
      void* warm[2];
      backtrace(warm, 2);  // its first call loads the unwinder, which allocates
    }
    at_.store(0);
    on_.store(true);
  }
  void stop() { on_.store(false); }

  void note() noexcept {
    if (!on_.load(std::memory_order_relaxed) || inside_) return;
    inside_ = true;
    const std::size_t i = at_.fetch_add(1, std::memory_order_relaxed);
    if (i < kCapacity) {
      Allocation& a = kept_[i];
      a.depth = backtrace(a.pc, kDepth);
      pthread_getname_np(pthread_self(), a.thread, sizeof a.thread);
    }
    inside_ = false;
  }

  // The window's sites, ranked, on stdout: allocations per call of `calls`.
  void print(const char* what, int calls) const {
    const std::size_t n = std::min<std::size_t>(at_.load(), kCapacity);
    std::map<void*, std::vector<Frame>> names = symbolize(n);
    std::map<std::string, std::size_t> by_site;
    for (std::size_t i = 0; i < n; ++i) {
      std::vector<const Frame*> flat;
      for (int d = 1; d < kept_[i].depth; ++d) {
        for (const Frame& f : names[kept_[i].pc[d]]) {
          if (!own(f.fn)) {
            flat.push_back(&f);
          }
        }
      }
      std::string made, site;
      std::size_t j = 0;
      for (; j < flat.size() && !flat[j]->ours; ++j) {
        if (!plumbing(flat[j]->fn) && made.size() < 160) {
          made += (made.empty() ? "" : " < ") + flat[j]->fn;
        }
      }
      for (int ours = 0; j < flat.size() && ours < 2; ++j) {
        if (!flat[j]->ours) continue;
        site += (ours++ == 0 ? "" : " <- ") + flat[j]->fn + " (" + flat[j]->at + ")";
      }
      ++by_site["[" + std::string(kept_[i].thread) + "] " + site + "\n          " + made];
    }
    std::vector<std::pair<std::size_t, std::string>> ranked;
    for (const auto& [site, count] : by_site) ranked.emplace_back(count, site);
    std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    std::printf("[ sites  ] %s: %zu allocations over %d calls (%.2f per call), by site:\n", what, n,
                calls, static_cast<double>(n) / calls);
    for (const auto& [count, site] : ranked) {
      std::printf("%8.2f  %s\n", static_cast<double>(count) / calls, site.c_str());
    }
  }

 private:
  struct Frame {
    std::string fn, at;  // the function without its template and call arguments; file:line
    bool ours = false;   // a source of this repository
  };

  // The counting replacement's frames and this recorder's (ASan's interceptors add some).
  static bool own(const std::string& fn) {
    return fn.rfind("operator new", 0) == 0 || fn.find("counted") != std::string::npos ||
           fn.find("alloc_sites::") != std::string::npos;
  }

  // The allocator's own frames, which every site shares.
  static bool plumbing(const std::string& fn) {
    for (const char* p : {"std::__new_allocator::", "std::allocator::", "std::allocator_traits::",
                          "std::__allocated_ptr", "allocate"}) {
      if (fn.rfind(p, 0) == 0) return true;
    }
    return false;
  }

  // "ns::f<T>(int) const" -> "ns::f const"; anonymous namespaces kept.
  static std::string short_name(const std::string& fn) {
    std::string out;
    int angle = 0, paren = 0;
    for (std::size_t i = 0; i < fn.size(); ++i) {
      const char c = fn[i];
      if (c == '<') {
        ++angle;
      } else if (c == '>' && angle > 0) {
        --angle;
      } else if (c == '(' && fn.compare(i, 11, "(anonymous ") != 0) {
        ++paren;
      } else if (c == ')' && paren > 0) {
        --paren;
      } else if (angle == 0 && paren == 0) {
        out += c;
      }
    }
    return out;
  }

  // This repository's root, from where this header was compiled.
  static std::string root() {
    const std::string self = __FILE__;
    return self.substr(0, self.rfind("tests/integration/"));
  }

  std::map<void*, std::vector<Frame>> symbolize(std::size_t n) const {
    char exe[4096] = {};
    if (readlink("/proc/self/exe", exe, sizeof exe - 1) < 0) return {};
    std::map<void*, std::vector<Frame>> out;
    std::vector<std::pair<void*, std::uintptr_t>> in_exe;  // address, offset in the file
    for (std::size_t i = 0; i < n; ++i) {
      for (int d = 0; d < kept_[i].depth; ++d) {
        void* pc = kept_[i].pc[d];
        if (out.count(pc) != 0) continue;
        Dl_info info{};
        out[pc] = {Frame{"??", "", false}};
        if (dladdr(pc, &info) == 0 || info.dli_fname == nullptr) continue;
        const char* mine = std::strrchr(exe, '/');
        const char* its = std::strrchr(info.dli_fname, '/');
        if (std::strcmp(mine + 1, its != nullptr ? its + 1 : info.dli_fname) == 0) {
          // The return address less one: inside the call, on the caller's line.
          in_exe.emplace_back(pc, reinterpret_cast<std::uintptr_t>(pc) -
                                      reinterpret_cast<std::uintptr_t>(info.dli_fbase) - 1);
          continue;
        }
        int status = 0;
        char* plain = info.dli_sname != nullptr
                          ? abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status)
                          : nullptr;
        out[pc] = {Frame{short_name(plain != nullptr ? plain : "?"), its != nullptr ? its + 1 : "",
                         false}};
        std::free(plain);
      }
    }
    // addr2line -a: each address's inline chain (innermost first, function then file:line) after
    // a line holding the address itself.
    const std::string mine = root();
    for (std::size_t at = 0; at < in_exe.size(); at += 200) {
      std::string cmd = std::string("addr2line -a -f -C -i -e ") + exe;
      const std::size_t end = std::min(in_exe.size(), at + 200);
      for (std::size_t k = at; k < end; ++k) {
        char hex[32];
        std::snprintf(hex, sizeof hex, " 0x%lx", static_cast<unsigned long>(in_exe[k].second));
        cmd += hex;
      }
      FILE* p = popen(cmd.c_str(), "r");
      if (p == nullptr) break;
      std::vector<Frame>* chain = nullptr;
      std::size_t k = at;
      bool want_fn = true;
      char line[16384];
      while (std::fgets(line, sizeof line, p) != nullptr) {
        line[std::strcspn(line, "\n")] = '\0';
        if (std::strncmp(line, "0x", 2) == 0 && k < end) {
          chain = &out[in_exe[k++].first];
          chain->clear();
          want_fn = true;
        } else if (chain != nullptr && want_fn) {
          chain->push_back(Frame{short_name(line), "", false});
          want_fn = false;
        } else if (chain != nullptr) {
          const std::string where = line;
          chain->back().ours = where.rfind(mine, 0) == 0;
          const std::size_t slash = where.rfind('/');
          const std::string file_line =
              slash == std::string::npos ? where : where.substr(slash + 1);
          chain->back().at = file_line.substr(0, file_line.find(' '));  // no " (discriminator N)"
          want_fn = true;
        }
      }
      pclose(p);
    }
    return out;
  }

  Allocation* kept_ = nullptr;
  std::atomic<std::size_t> at_{0};
  std::atomic<bool> on_{false};
  static thread_local bool inside_;
};

inline thread_local bool Recorder::inside_ = false;

inline Recorder& recorder() {
  static Recorder r;  // constructed before any window records
  return r;
}

}  // namespace echo::test::alloc_sites
