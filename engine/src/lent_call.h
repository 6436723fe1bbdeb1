// SPDX-License-Identifier: MIT
// A blocking L2 call, or a pipelined batch of calls, whose storage its calling thread keeps: the
// words, their views and the answers keep their capacity from one call to the next, so a thread
// that calls again and again allocates nothing per call once warm (publish's path). The io thread
// lends the words to the connection, fills the answers and hands them back through one futex
// word; a caller whose deadline passes hands the storage to the io thread instead, which frees it
// when the last answer is in (a late answer never lands in a call the thread has moved on to).
//
// Ending a call is the io thread's last touch of the storage: once the caller sees it ended, the
// thread may reuse or free it. So an answer that arrives inside the io thread's own issuing
// (a connection or router that answers at once) never ends the call there: the issuing frame
// ends it when it returns, as its own last step.
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
  // One call of the batch: a command (script == nullptr: its words are the command) or an
  // EVALSHA whose first three words are EVALSHA, the sha and the key count.
  struct Part {
    std::size_t first = 0, words = 0, keys = 0;  // its words in the call's list
    bool lead = false;
    bool answered = false;  // the io thread's: its answer is in (a second one is ignored)
    io::LentEval eval;      // script, command (views of its words), done (this part's answer)
    std::error_code ec;
    io::Resp3Owned reply;
    std::span<const std::string_view> command() const noexcept { return eval.command; }
    std::span<const std::string_view> keys_of() const noexcept {
      return command().subspan(3, keys);
    }
    std::span<const std::string_view> argv() const noexcept { return command().subspan(3 + keys); }
  };
  // Issues one part on the io thread: an immediate error, or the part's eval.done armed.
  using Issuer = std::error_code (*)(void* owner, Part& part);

  // The calling thread's call, emptied (a new one if the last was handed to the io thread).
  // Build its parts and run it before any other blocking call on this thread.
  static LentCall& mine();

  // Starts the next part. `lead`: the batch's leading parts (a prefix) go first, and the rest
  // leave once each of them has answered. A word before any begin() starts a command.
  void begin(const io::Script* script = nullptr, std::size_t keys = 0, bool lead = false);
  // A script part: begin(&s, keys) and its EVALSHA head; the keys and arguments follow as words.
  void script(const io::Script& s, std::size_t keys, bool lead = false);
  // Appends an empty word to the current part and returns it to be written.
  std::string& word();
  void word(std::string_view w) { word().assign(w); }
  void word(std::uint64_t n);

  std::size_t size() const noexcept { return parts_used_; }
  Part& part(std::size_t i) noexcept { return parts_[i]; }
  const Part& part(std::size_t i) const noexcept { return parts_[i]; }

  // The caller: each part's eval.command, views of its words (arm() does this first; a call the
  // caller sends itself needs only this).
  void view();
  // The caller, before posting: views of the words, every part pending; `issue` and `owner`
  // issue each part on the io thread.
  void arm(Issuer issue, void* owner);
  // The io thread: issues the leading parts (or every part when none leads).
  void issue_on_io();
  // The io thread: every part ends with `ec` (nothing was issued: the engine is stopping).
  void fail_on_io(std::error_code ec);

  // The caller: waits for every answer until `deadline`; false when it gave up (the storage is
  // the io thread's from then on).
  bool wait(std::chrono::steady_clock::time_point deadline);

 private:
  enum : std::uint32_t { kIdle, kPending, kDone, kAbandoned };
  void issue_range(std::size_t from, std::size_t to);
  void answered(std::size_t i, std::error_code ec, const io::Resp3Value& reply);
  void settle(std::size_t i, std::error_code ec, const io::Resp3Value& reply);
  void leave_frame();
  void end();

  std::atomic<std::uint32_t> state_{kIdle};
  std::vector<std::string> words_;
  std::size_t words_used_ = 0;
  std::vector<std::string_view> views_;
  std::vector<Part> parts_;
  std::size_t parts_used_ = 0;
  Issuer issuer_ = nullptr;
  void* owner_ = nullptr;
  // The io thread's own: parts not yet answered, leading parts not yet answered, the io
  // thread's frames inside this call (an answer in one of them leaves the end to it).
  std::size_t left_ = 0, leads_ = 0, leads_left_ = 0;
  int frames_ = 0;
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
