// SPDX-License-Identifier: MIT
// A blocking L2 call whose storage its calling thread keeps: the words, their views and the
// answer keep their capacity from one call to the next, so a thread that calls again and again
// allocates nothing per call once warm (publish's path). The io thread fills the answer and hands
// it back through one futex word; a caller whose deadline passes hands the storage to the io
// thread instead, which frees it when the call ends (a late answer never lands in a caller that
// has moved on).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <echo/io/connection.h>
#include <echo/io/resp3_value.h>

namespace echo::engine {

class LentCall {
 public:
  // The calling thread's call, emptied (a new one if the last was handed to the io thread).
  // Build its words and run it before any other blocking call on this thread.
  static LentCall& mine();

  // Appends an empty word and returns it to be written.
  std::string& word();
  void word(std::string_view w) { word().assign(w); }
  void word(std::uint64_t n);
  // A script call: EVALSHA, the sha and the key count; the keys and arguments follow as words.
  void script(const io::Script& s, std::size_t keys);
  const io::Script* script() const noexcept { return eval_.script; }

  // The caller, before posting: views of the words, the call pending.
  void arm();
  std::span<const std::string_view> command() const noexcept { return views_; }
  std::span<const std::string_view> keys() const noexcept { return command().subspan(3, keys_); }
  std::span<const std::string_view> argv() const noexcept { return command().subspan(3 + keys_); }

  // The io thread: runs `issue` (which returns an immediate error or arms the call's answer
  // through answer()); the call ends on that error, or later on the answer.
  template <class Issue>
  void issue_on_io(Issue&& issue) {
    fired_ = false;
    issuing_ = true;
    const std::error_code failed = issue();
    issuing_ = false;
    if (!fired_) {
      if (failed) end(failed, io::Resp3Value{});
      return;
    }
    if (orphaned_) delete this;  // answered inside `issue`, after its caller gave up
  }
  // The io thread's answer callback (what `issue` passes on), and the lent EVALSHA.
  io::ReplyFn answer() {
    return [this](std::error_code e, const io::Resp3Value& r) { end(e, r); };
  }
  io::LentEval& eval() noexcept { return eval_; }

  // The caller: waits for the answer until `deadline`; false when it gave up (the storage is the
  // io thread's from then on).
  bool wait(std::chrono::steady_clock::time_point deadline);
  std::error_code ec;
  io::Resp3Owned reply;

 private:
  enum : std::uint32_t { kIdle, kPending, kDone, kAbandoned };
  void end(std::error_code e, const io::Resp3Value& r);

  std::atomic<std::uint32_t> state_{kIdle};
  std::vector<std::string> words_;
  std::size_t used_ = 0, keys_ = 0;
  std::vector<std::string_view> views_;
  io::LentEval eval_;
  // The io thread's own: answered, inside issue_on_io, answered after the caller gave up.
  bool fired_ = false, issuing_ = false, orphaned_ = false;
};

// Words a call owns in a vector, for a call that outlives its caller (publish_async); the same
// word() interface as LentCall's.
struct WordList {
  std::vector<std::string> words;
  std::string& word() { return words.emplace_back(); }
  void word(std::string_view w) { words.emplace_back(w); }
  void word(std::uint64_t n) { words.push_back(std::to_string(n)); }
};

}  // namespace echo::engine
