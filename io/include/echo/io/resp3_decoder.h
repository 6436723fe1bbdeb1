// SPDX-License-Identifier: MIT
// The RESP3 decoder: bytes in, complete top-level values out, separate from any transport (like
// hiredis's reader). Incremental across any split of the stream, zero-copy, bounded by limits,
// and never trusting a length it has not received the bytes for.
//
// CONTRACT (read this before wiring it to a socket)
// - Threads: none inside. One decoder per connection, used by one thread at a time (the io
//   thread that owns the connection). Not safe for concurrent calls.
// - Receive path: either recv straight into the decoder
//       auto room = dec.prepare(4096);          // writable tail, >= 4096 bytes
//       n = recv(fd, room.data(), room.size()); // or an io_uring recv into `room`
//       dec.commit(n);
//   or copy a chunk you already have (provided buffers): dec.feed(chunk).
//   Then drain:
//       for (;;) {
//         Resp3Next r = dec.next();
//         if (r.status == Resp3Status::value) { dispatch(r.value); continue; }   // push or reply
//         if (r.status == Resp3Status::need_more) break;                          // recv again
//         fail_connection(r.error); break;                                        // reconnect
//       }
//   A push is simply a value whose type() is Resp3Type::push; replies are everything else.
// - Lifetime: r.value, its children and every string_view they return point into the decoder's
//   buffer and node arena. They stay valid until the next non-const call on the decoder
//   (next, prepare, commit, feed, reset, assignment). To keep one longer: r.value.to_owned().
// - Errors: malformed input or a broken limit returns Resp3Status::error with a Resp3Error, and
//   the decoder stays failed (every later next() returns the same error) until reset(). The
//   connection is expected to drop the socket, reset() and reconnect. No exceptions on this path.
// - Memory: the receive buffer grows only to hold what prepare() is asked for plus one frame in
//   progress, which the limits bound (max_line_len, max_bulk_len, max_frame_bytes). Declared
//   element counts are never used to preallocate: the node arena grows only as elements
//   actually arrive (each costs at least 3 wire bytes), up to max_frame_elements. Both the
//   buffer and the arena are reused, so steady-state decoding does not allocate.
// - Cost: a frame split across receives resumes at the element in progress; only that
//   element's header line is parsed again, and a long line is never re-scanned from its start,
//   so a large bulk costs O(bytes) whatever the split. Throughput against hiredis 0.14's reader
//   on the same RESP2 bytes: bench/resp3_bench.cc, BM_Resp3Decoder_Decode* beside
//   BM_Hiredis_Reader* (about 2-3x hiredis's frames/s on pushes, bulks, integers and a mix).
#pragma once

#include <echo/io/resp3_value.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

namespace echo::io {

// Bounds on what one peer can make us hold. Checked by the Resp3Decoder constructor, which
// throws std::invalid_argument naming the knob and its range.
struct Resp3Limits {
  // Aggregates (array, map, set, push, attribute) nested inside each other, the outermost
  // counting 1. Range 1 .. 1024.
  std::uint32_t max_depth = 32;
  // Children declared by one aggregate (a map of n pairs declares 2n). Range 1 .. 2^31.
  std::uint32_t max_aggregate_len = 1u << 24;
  // Values (nodes, attributes included) in one top-level frame. Range 1 .. 2^31.
  std::uint32_t max_frame_elements = 1u << 24;
  // Payload bytes of one bulk string, bulk error or verbatim string. Range 0 .. 2^32 - 1.
  std::uint32_t max_bulk_len = 512u << 20;
  // Bytes of one line (simple string, simple error, integer, double, big number, any header)
  // without its CRLF. Range 16 .. 2^32 - 1.
  std::uint32_t max_line_len = 64u << 10;
  // Wire bytes of one top-level frame. Range 16 .. 2^40.
  std::uint64_t max_frame_bytes = 1ull << 30;
};

// Why decoding stopped. Every value but `none` is sticky until Resp3Decoder::reset().
enum class Resp3Error : std::uint8_t {
  none = 0,
  // Malformed input.
  bad_type,              // a type byte that is not one of RESP3's
  bad_integer,           // an integer or a length that is empty or has a non-digit
  integer_overflow,      // an integer or a length beyond int64
  bad_length,            // a negative length other than $-1 and *-1
  missing_crlf,          // a CR not followed by LF, or a bulk payload not followed by CRLF
  bad_double,            // a "," line that is not a decimal number, inf, -inf or nan
  bad_boolean,           // a "#" line other than t or f
  bad_null,              // a "_" line that is not empty
  bad_big_number,        // a "(" line that is not an optionally signed run of digits
  bad_verbatim,          // a verbatim string shorter than 4 bytes or without ':' at [3]
  streamed_unsupported,  // a streamed string or aggregate ($?, *?, ...), which servers never send
  // Broken limits (Resp3Limits).
  depth_exceeded,           // max_depth
  aggregate_too_long,       // max_aggregate_len
  frame_too_many_elements,  // max_frame_elements
  bulk_too_long,            // max_bulk_len
  line_too_long,            // max_line_len
  frame_too_large,          // max_frame_bytes
};

std::string_view to_string(Resp3Error error) noexcept;

enum class Resp3Status : std::uint8_t {
  value,      // `value` holds the next complete top-level value
  need_more,  // every complete frame has been returned; feed more bytes
  error,      // `error` says why; sticky until reset()
};

struct Resp3Next {
  Resp3Status status = Resp3Status::need_more;
  Resp3Error error = Resp3Error::none;
  Resp3Value value;  // meaningful only when status == value; lifetime: see the file comment
};

class Resp3Decoder {
 public:
  static constexpr std::size_t kDefaultCapacity = std::size_t{16} * 1024;

  // Throws std::invalid_argument when a limit is out of its range. Allocates the buffer.
  explicit Resp3Decoder(Resp3Limits limits = {});
  Resp3Decoder(Resp3Decoder&&) noexcept;
  Resp3Decoder& operator=(Resp3Decoder&&) noexcept;
  Resp3Decoder(const Resp3Decoder&) = delete;
  Resp3Decoder& operator=(const Resp3Decoder&) = delete;
  ~Resp3Decoder();

  // A writable region at the end of the buffer, at least `min_bytes` long (it may be longer:
  // use all of it). Compacts away returned frames, and grows the buffer only if that is not
  // enough. Allocates only when growing. Invalidates values previously returned.
  std::span<char> prepare(std::size_t min_bytes);
  // Declares the first `n` bytes of the last prepare() region received. n <= its size.
  void commit(std::size_t n) noexcept;
  // prepare(bytes.size()), copy, commit.
  void feed(std::string_view bytes);
  void feed(const void* data, std::size_t size) {
    feed(std::string_view(static_cast<const char*>(data), size));
  }

  // The next complete top-level value, or need_more, or the (sticky) error. Never allocates
  // once the node arena has grown to the largest frame seen; never reads past the committed
  // bytes. Invalidates values previously returned.
  Resp3Next next() noexcept;

  // At least this many more bytes must arrive before next() can make progress: 1 normally,
  // the rest of a bulk payload when one is in progress. A sizing hint for prepare().
  std::size_t wanted() const noexcept { return wanted_; }
  // Bytes received and not yet returned as part of a value.
  std::size_t buffered() const noexcept { return end_ - (returned_ ? pos_ : begin_); }
  bool failed() const noexcept { return error_ != Resp3Error::none; }
  Resp3Error error() const noexcept { return error_; }
  const Resp3Limits& limits() const noexcept { return limits_; }

  // Forgets every byte, the frame in progress and the error (for a fresh connection). Keeps
  // the buffer and arena capacity. Invalidates values previously returned.
  void reset() noexcept;

 private:
  enum class Step : std::uint8_t { element, frame, need_more, error };
  struct Level {
    std::uint32_t node;          // the open aggregate
    std::uint32_t remaining;     // children still to come
    std::uint32_t pending_attr;  // index + 1 of an attribute waiting for its value; 0 = none
  };

  void release_returned() noexcept;
  Step step() noexcept;
  Step fail(Resp3Error error) noexcept;
  // Finds the CRLF ending the line that starts at pos_ + 1. need_more / error / element (found).
  Step find_line(std::size_t& cr) noexcept;
  Step scalar_line(char type, std::size_t line, std::size_t cr) noexcept;
  Step bulk(char type, std::size_t line, std::size_t cr) noexcept;
  Step aggregate(char type, std::size_t line, std::size_t cr) noexcept;
  // The parts after a header's number is known (from the fast path or the general one).
  Step integer_node(std::int64_t value, std::size_t cr) noexcept;
  Step bulk_payload(char type, std::int64_t len, std::size_t cr) noexcept;
  Step aggregate_children(char type, std::int64_t declared, std::size_t cr) noexcept;
  // Appends a node (taking the pending attribute of its container), or fails on
  // max_frame_elements. Returns false on failure.
  bool add_node(Resp3Type type, std::uint32_t& index) noexcept;
  // A value `index` is complete: count it in its container, closing containers that fill up.
  Step finish(std::uint32_t index) noexcept;

  Resp3Limits limits_;
  std::unique_ptr<char[]> buf_;
  std::size_t cap_ = 0;
  std::size_t begin_ = 0;  // first byte of the frame in progress (or of the returned frame)
  std::size_t pos_ = 0;    // first byte of the element in progress
  std::size_t end_ = 0;    // one past the last committed byte
  std::size_t scan_ = 0;   // CR search resumes here for the line in progress (0 = from its start)
  std::size_t wanted_ = 1;
  std::vector<detail::Resp3Node> nodes_;  // the arena: its size is its capacity
  std::uint32_t node_count_ = 0;          // nodes of the frame in progress / returned
  std::vector<Level> stack_;
  std::uint32_t top_pending_attr_ = 0;
  std::uint32_t root_ = 0;
  bool returned_ = false;  // the frame [begin_, pos_) was returned and is released on next call
  Resp3Error error_ = Resp3Error::none;
};

}  // namespace echo::io
