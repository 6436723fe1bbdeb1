// SPDX-License-Identifier: MIT
// The RESP3 decoder's state machine. One step parses one element at pos_ into the node arena;
// an incomplete element leaves pos_ where it is (only its header line is parsed again), an
// incomplete line remembers how far its CR search got, and open aggregates wait on stack_.
#include <echo/io/resp3_decoder.h>

#include <cassert>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

namespace echo::io {
namespace {

using detail::Resp3Node;

bool is_digit(char c) noexcept { return c >= '0' && c <= '9'; }

// A RESP integer: optional sign, at least one digit, within int64.
Resp3Error parse_i64(const char* s, std::size_t n, std::int64_t& out) noexcept {
  if (n == 0) return Resp3Error::bad_integer;
  const bool negative = s[0] == '-';
  std::size_t i = (s[0] == '-' || s[0] == '+') ? 1 : 0;
  if (i == n) return Resp3Error::bad_integer;
  const std::uint64_t limit =
      negative ? std::uint64_t{1} << 63 : std::uint64_t(std::numeric_limits<std::int64_t>::max());
  std::uint64_t acc = 0;
  for (; i < n; ++i) {
    if (!is_digit(s[i])) return Resp3Error::bad_integer;
    const auto digit = static_cast<std::uint64_t>(s[i] - '0');
    if (acc > (limit - digit) / 10) return Resp3Error::integer_overflow;
    acc = acc * 10 + digit;
  }
  out = negative ? static_cast<std::int64_t>(0 - acc) : static_cast<std::int64_t>(acc);
  return Resp3Error::none;
}

// A RESP3 double: [+-]digits[.digits][(e|E)[+-]digits], inf, -inf, nan (and +inf, -nan).
Resp3Error parse_double(const char* s, std::size_t n, double& out) noexcept {
  const std::string_view text(s, n);
  if (text == "inf" || text == "+inf") {
    out = std::numeric_limits<double>::infinity();
    return Resp3Error::none;
  }
  if (text == "-inf") {
    out = -std::numeric_limits<double>::infinity();
    return Resp3Error::none;
  }
  if (text == "nan" || text == "-nan" || text == "+nan") {
    out = std::numeric_limits<double>::quiet_NaN();
    return Resp3Error::none;
  }
  // from_chars also takes "infinity", "nan(...)" and hex-free forms we do not want: only
  // decimal characters reach it. It does not take a leading '+'.
  std::size_t i = (n > 0 && s[0] == '+') ? 1 : 0;
  if (i == n || s[i] == '+') return Resp3Error::bad_double;
  for (std::size_t k = i; k < n; ++k) {
    const char c = s[k];
    if (!is_digit(c) && c != '.' && c != 'e' && c != 'E' && c != '-' && c != '+') {
      return Resp3Error::bad_double;
    }
  }
  double value = 0;
  const auto [ptr, ec] = std::from_chars(s + i, s + n, value, std::chars_format::general);
  if (ptr != s + n) return Resp3Error::bad_double;
  if (ec == std::errc::result_out_of_range) {
    // Beyond double's range: a correct server never sends it; saturate like strtod.
    const bool negative = s[i] == '-';
    bool huge = false;
    for (std::size_t k = i; k < n; ++k) {
      if (s[k] == 'e' || s[k] == 'E') {
        huge = k + 1 < n && s[k + 1] != '-';
        break;
      }
    }
    if (!huge) huge = true;  // an out-of-range mantissa without an exponent is huge
    out = huge ? (negative ? -std::numeric_limits<double>::infinity()
                           : std::numeric_limits<double>::infinity())
               : (negative ? -0.0 : 0.0);
    return Resp3Error::none;
  }
  if (ec != std::errc()) return Resp3Error::bad_double;
  out = value;
  return Resp3Error::none;
}

bool is_big_number(const char* s, std::size_t n) noexcept {
  std::size_t i = (n > 0 && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
  if (i == n) return false;
  for (; i < n; ++i) {
    if (!is_digit(s[i])) return false;
  }
  return true;
}

void check_limit(bool ok, const char* knob, const char* range) {
  if (!ok) {
    throw std::invalid_argument(std::string("Resp3Limits.") + knob + " out of range (allowed " +
                                range + ")");
  }
}

}  // namespace

Resp3Decoder::Resp3Decoder(Resp3Limits limits) : limits_(limits) {
  check_limit(limits.max_depth >= 1 && limits.max_depth <= 1024, "max_depth", "1 .. 1024");
  check_limit(limits.max_aggregate_len >= 1 && limits.max_aggregate_len <= (1u << 31),
              "max_aggregate_len", "1 .. 2^31");
  check_limit(limits.max_frame_elements >= 1 && limits.max_frame_elements <= (1u << 31),
              "max_frame_elements", "1 .. 2^31");
  check_limit(limits.max_line_len >= 16, "max_line_len", "16 .. 2^32 - 1");
  check_limit(limits.max_frame_bytes >= 16 && limits.max_frame_bytes <= (1ull << 40),
              "max_frame_bytes", "16 .. 2^40");
  buf_.reset(new char[kDefaultCapacity]);
  cap_ = kDefaultCapacity;
  stack_.reserve(limits.max_depth < 64 ? limits.max_depth : 64);
  nodes_.resize(64);
}

Resp3Decoder::Resp3Decoder(Resp3Decoder&& other) noexcept { *this = std::move(other); }

Resp3Decoder& Resp3Decoder::operator=(Resp3Decoder&& other) noexcept {
  if (this == &other) return *this;
  limits_ = other.limits_;
  buf_ = std::move(other.buf_);
  cap_ = std::exchange(other.cap_, 0);
  begin_ = std::exchange(other.begin_, 0);
  pos_ = std::exchange(other.pos_, 0);
  end_ = std::exchange(other.end_, 0);
  scan_ = std::exchange(other.scan_, 0);
  wanted_ = std::exchange(other.wanted_, 1);
  nodes_ = std::move(other.nodes_);
  node_count_ = std::exchange(other.node_count_, 0);
  stack_ = std::move(other.stack_);
  top_pending_attr_ = std::exchange(other.top_pending_attr_, 0);
  root_ = std::exchange(other.root_, 0);
  returned_ = std::exchange(other.returned_, false);
  error_ = std::exchange(other.error_, Resp3Error::none);
  other.stack_.clear();
  return *this;
}

Resp3Decoder::~Resp3Decoder() = default;

void Resp3Decoder::reset() noexcept {
  begin_ = pos_ = end_ = scan_ = 0;
  wanted_ = 1;
  node_count_ = 0;
  stack_.clear();
  top_pending_attr_ = 0;
  root_ = 0;
  returned_ = false;
  error_ = Resp3Error::none;
}

void Resp3Decoder::release_returned() noexcept {
  if (!returned_) return;
  returned_ = false;
  begin_ = pos_;
  node_count_ = 0;
}

std::span<char> Resp3Decoder::prepare(std::size_t min_bytes) {
  release_returned();
  if (begin_ == end_) begin_ = pos_ = end_ = scan_ = 0;  // nothing live: start over for free
  if (cap_ - end_ < min_bytes || cap_ == 0) {
    // Node offsets are relative to begin_, so sliding the frame in progress is safe.
    const std::size_t live = end_ - begin_;
    if (cap_ - live >= min_bytes && cap_ > 0) {
      std::memmove(buf_.get(), buf_.get() + begin_, live);
    } else {
      std::size_t new_cap = cap_ * 2 > kDefaultCapacity ? cap_ * 2 : kDefaultCapacity;
      if (new_cap < live + min_bytes) new_cap = live + min_bytes;
      std::unique_ptr<char[]> grown(new char[new_cap]);
      if (live > 0) std::memcpy(grown.get(), buf_.get() + begin_, live);
      buf_ = std::move(grown);
      cap_ = new_cap;
    }
    pos_ -= begin_;
    scan_ = scan_ > begin_ ? scan_ - begin_ : 0;
    end_ = live;
    begin_ = 0;
  }
  return {buf_.get() + end_, cap_ - end_};
}

void Resp3Decoder::commit(std::size_t n) noexcept {
  assert(n <= cap_ - end_ && "Resp3Decoder::commit beyond the prepare()d region");
  end_ += n;
}

void Resp3Decoder::feed(std::string_view bytes) {
  if (bytes.empty()) return;
  const std::span<char> room = prepare(bytes.size());
  std::memcpy(room.data(), bytes.data(), bytes.size());
  commit(bytes.size());
}

Resp3Next Resp3Decoder::next() noexcept {
  if (error_ != Resp3Error::none) return {Resp3Status::error, error_, {}};
  release_returned();
  for (;;) {
    switch (step()) {
      case Step::element:
        continue;
      case Step::frame:
        returned_ = true;
        wanted_ = 1;
        return {Resp3Status::value, Resp3Error::none,
                Resp3Value(nodes_.data(), buf_.get() + begin_, root_)};
      case Step::need_more:
        return {Resp3Status::need_more, Resp3Error::none, {}};
      case Step::error:
        return {Resp3Status::error, error_, {}};
    }
  }
}

Resp3Decoder::Step Resp3Decoder::fail(Resp3Error error) noexcept {
  error_ = error;
  return Step::error;
}

Resp3Decoder::Step Resp3Decoder::find_line(std::size_t& cr) noexcept {
  const std::size_t line = pos_ + 1;
  std::size_t from = scan_ > line ? scan_ : line;
  const char* hit =
      from < end_ ? static_cast<const char*>(std::memchr(buf_.get() + from, '\r', end_ - from))
                  : nullptr;
  if (hit == nullptr) {
    // The line limit alone bounds what an unfinished line can make us buffer; the frame limit
    // is checked once the line's end is known, so any split reports the same error.
    if (end_ - line > limits_.max_line_len) return fail(Resp3Error::line_too_long);
    scan_ = end_;
    wanted_ = 1;
    return Step::need_more;
  }
  cr = static_cast<std::size_t>(hit - buf_.get());
  if (cr - line > limits_.max_line_len) return fail(Resp3Error::line_too_long);
  if (cr + 2 - begin_ > limits_.max_frame_bytes) return fail(Resp3Error::frame_too_large);
  if (cr + 1 >= end_) {
    scan_ = cr;  // find this CR again, then look at the byte after it
    wanted_ = 1;
    return Step::need_more;
  }
  if (buf_[cr + 1] != '\n') return fail(Resp3Error::missing_crlf);
  return Step::element;
}

Resp3Decoder::Step Resp3Decoder::step() noexcept {
  if (pos_ == end_) {
    wanted_ = 1;
    return Step::need_more;
  }
  const char type = buf_[pos_];
  switch (type) {
    case '+':
    case '-':
    case ':':
    case ',':
    case '(':
    case '#':
    case '_':
    case '$':
    case '!':
    case '=':
    case '*':
    case '%':
    case '~':
    case '|':
    case '>':
      break;
    default:
      return fail(Resp3Error::bad_type);
  }
  const std::size_t line = pos_ + 1;
  if (type == '$' || type == '*' || type == '>' || type == ':' || type == '%' || type == '~') {
    // Fast path for the common header: up to kFastDigits digits and a CRLF, all received. Any
    // other form (a sign, a longer number, an unfinished line) takes the general path, so the
    // outcome never depends on where the stream was split. kFastDigits <= the smallest
    // max_line_len, so the line limit cannot apply here.
    constexpr std::size_t kFastDigits = 16;
    const char* first = buf_.get() + line;
    const std::size_t avail = end_ - line;
    const std::size_t scan = avail < kFastDigits ? avail : kFastDigits;
    std::size_t n = 0;
    std::uint64_t value = 0;
    while (n < scan && is_digit(first[n]))
      value = value * 10 + static_cast<unsigned>(first[n++] - '0');
    if (n > 0 && n + 1 < avail && first[n] == '\r' && first[n + 1] == '\n') {
      const std::size_t cr = line + n;
      if (cr + 2 - begin_ > limits_.max_frame_bytes) return fail(Resp3Error::frame_too_large);
      const auto number = static_cast<std::int64_t>(value);
      if (type == '$') return bulk_payload(type, number, cr);
      if (type == ':') return integer_node(number, cr);
      return aggregate_children(type, number, cr);
    }
  }
  std::size_t cr = 0;
  if (const Step s = find_line(cr); s != Step::element) return s;
  switch (type) {
    case '$':
    case '!':
    case '=':
      return bulk(type, line, cr);
    case '*':
    case '%':
    case '~':
    case '|':
    case '>':
      return aggregate(type, line, cr);
    default:
      return scalar_line(type, line, cr);
  }
}

bool Resp3Decoder::add_node(Resp3Type type, std::uint32_t& index) noexcept {
  if (node_count_ >= limits_.max_frame_elements) {
    fail(Resp3Error::frame_too_many_elements);
    return false;
  }
  if (node_count_ == nodes_.size()) {
    // Grows with the elements that actually arrived, never with a declared count.
    std::size_t grown = nodes_.size() * 2 > 64 ? nodes_.size() * 2 : 64;
    if (grown > limits_.max_frame_elements) grown = limits_.max_frame_elements;
    nodes_.resize(grown);
  }
  index = node_count_++;
  Resp3Node& node = nodes_[index];
  node.type = type;
  node.aux = 0;
  node.next = index + 1;
  node.count = 0;
  node.integer = 0;
  std::uint32_t& pending = stack_.empty() ? top_pending_attr_ : stack_.back().pending_attr;
  node.attr = pending;
  pending = 0;
  return true;
}

Resp3Decoder::Step Resp3Decoder::finish(std::uint32_t index) noexcept {
  for (;;) {
    if (nodes_[index].type == Resp3Type::attribute) {
      // Not a value: it waits for the value that follows it in the same container.
      (stack_.empty() ? top_pending_attr_ : stack_.back().pending_attr) = index + 1;
      return Step::element;
    }
    if (stack_.empty()) {
      root_ = index;
      return Step::frame;
    }
    Level& level = stack_.back();
    if (--level.remaining > 0) return Step::element;
    index = level.node;
    nodes_[index].next = node_count_;
    stack_.pop_back();
  }
}

Resp3Decoder::Step Resp3Decoder::scalar_line(char type, std::size_t line, std::size_t cr) noexcept {
  const char* text = buf_.get() + line;
  const std::size_t len = cr - line;
  Resp3Type kind = Resp3Type::null;
  std::int64_t integer = 0;
  double floating = 0;
  switch (type) {
    case '+':
      kind = Resp3Type::simple_string;
      break;
    case '-':
      kind = Resp3Type::simple_error;
      break;
    case '(':
      if (!is_big_number(text, len)) return fail(Resp3Error::bad_big_number);
      kind = Resp3Type::big_number;
      break;
    case ':':
      if (const Resp3Error e = parse_i64(text, len, integer); e != Resp3Error::none) return fail(e);
      return integer_node(integer, cr);
    case ',':
      if (const Resp3Error e = parse_double(text, len, floating); e != Resp3Error::none) {
        return fail(e);
      }
      kind = Resp3Type::floating;
      break;
    case '#':
      if (len != 1 || (text[0] != 't' && text[0] != 'f')) return fail(Resp3Error::bad_boolean);
      kind = Resp3Type::boolean;
      integer = text[0] == 't';
      break;
    default:  // '_'
      if (len != 0) return fail(Resp3Error::bad_null);
      kind = Resp3Type::null;
      break;
  }
  std::uint32_t index = 0;
  if (!add_node(kind, index)) return Step::error;
  Resp3Node& node = nodes_[index];
  switch (kind) {
    case Resp3Type::boolean:
      node.integer = integer;
      break;
    case Resp3Type::floating:
      node.floating = floating;
      break;
    case Resp3Type::null:
      node.aux = static_cast<std::uint8_t>(Resp3NullOrigin::resp3);
      break;
    default:
      node.offset = line - begin_;
      node.count = static_cast<std::uint32_t>(len);
      break;
  }
  pos_ = cr + 2;
  scan_ = 0;
  return finish(index);
}

Resp3Decoder::Step Resp3Decoder::bulk(char type, std::size_t line, std::size_t cr) noexcept {
  const char* text = buf_.get() + line;
  const std::size_t header_len = cr - line;
  if (header_len == 1 && text[0] == '?') return fail(Resp3Error::streamed_unsupported);
  if (header_len > 0 && text[0] == '+') return fail(Resp3Error::bad_integer);
  std::int64_t len = 0;
  if (const Resp3Error e = parse_i64(text, header_len, len); e != Resp3Error::none) return fail(e);
  return bulk_payload(type, len, cr);
}

Resp3Decoder::Step Resp3Decoder::integer_node(std::int64_t value, std::size_t cr) noexcept {
  std::uint32_t index = 0;
  if (!add_node(Resp3Type::integer, index)) return Step::error;
  nodes_[index].integer = value;
  pos_ = cr + 2;
  scan_ = 0;
  return finish(index);
}

Resp3Decoder::Step Resp3Decoder::bulk_payload(char type, std::int64_t len,
                                              std::size_t cr) noexcept {
  if (len == -1 && type == '$') {
    std::uint32_t index = 0;
    if (!add_node(Resp3Type::null, index)) return Step::error;
    nodes_[index].aux = static_cast<std::uint8_t>(Resp3NullOrigin::nil_bulk);
    pos_ = cr + 2;
    scan_ = 0;
    return finish(index);
  }
  if (len < 0) return fail(Resp3Error::bad_length);
  if (static_cast<std::uint64_t>(len) > limits_.max_bulk_len)
    return fail(Resp3Error::bulk_too_long);
  if (type == '=' && len < 4) return fail(Resp3Error::bad_verbatim);
  const std::size_t payload = cr + 2;
  const std::size_t payload_end = payload + static_cast<std::size_t>(len);
  if (payload_end + 2 - begin_ > limits_.max_frame_bytes) return fail(Resp3Error::frame_too_large);
  if (payload_end + 2 > end_) {
    // The payload is not all here: wait without scanning it. The next attempt re-parses only
    // this header; the CR search starts at the header again (scan_ stays put).
    wanted_ = payload_end + 2 - end_;
    return Step::need_more;
  }
  if (buf_[payload_end] != '\r' || buf_[payload_end + 1] != '\n') {
    return fail(Resp3Error::missing_crlf);
  }
  Resp3Type kind = Resp3Type::bulk_string;
  std::size_t start = payload;
  std::size_t size = static_cast<std::size_t>(len);
  if (type == '!') {
    kind = Resp3Type::bulk_error;
  } else if (type == '=') {
    if (buf_[payload + 3] != ':') return fail(Resp3Error::bad_verbatim);
    kind = Resp3Type::verbatim_string;
    start += 4;
    size -= 4;
  }
  std::uint32_t index = 0;
  if (!add_node(kind, index)) return Step::error;
  nodes_[index].offset = start - begin_;
  nodes_[index].count = static_cast<std::uint32_t>(size);
  pos_ = payload_end + 2;
  scan_ = 0;
  return finish(index);
}

Resp3Decoder::Step Resp3Decoder::aggregate(char type, std::size_t line, std::size_t cr) noexcept {
  const char* text = buf_.get() + line;
  const std::size_t header_len = cr - line;
  if (header_len == 1 && text[0] == '?') return fail(Resp3Error::streamed_unsupported);
  if (header_len > 0 && text[0] == '+') return fail(Resp3Error::bad_integer);
  std::int64_t declared = 0;
  if (const Resp3Error e = parse_i64(text, header_len, declared); e != Resp3Error::none) {
    return fail(e);
  }
  return aggregate_children(type, declared, cr);
}

Resp3Decoder::Step Resp3Decoder::aggregate_children(char type, std::int64_t declared,
                                                    std::size_t cr) noexcept {
  std::uint32_t index = 0;
  if (declared == -1 && type == '*') {
    if (!add_node(Resp3Type::null, index)) return Step::error;
    nodes_[index].aux = static_cast<std::uint8_t>(Resp3NullOrigin::nil_array);
    pos_ = cr + 2;
    scan_ = 0;
    return finish(index);
  }
  if (declared < 0) return fail(Resp3Error::bad_length);
  const bool pairs = type == '%' || type == '|';
  // Compare before doubling so a huge declared count cannot overflow.
  const std::uint64_t limit = pairs ? limits_.max_aggregate_len / 2 : limits_.max_aggregate_len;
  if (static_cast<std::uint64_t>(declared) > limit) return fail(Resp3Error::aggregate_too_long);
  if (stack_.size() >= limits_.max_depth) return fail(Resp3Error::depth_exceeded);
  const auto children = static_cast<std::uint32_t>(declared) * (pairs ? 2u : 1u);
  Resp3Type kind = Resp3Type::array;
  switch (type) {
    case '%':
      kind = Resp3Type::map;
      break;
    case '~':
      kind = Resp3Type::set;
      break;
    case '|':
      kind = Resp3Type::attribute;
      break;
    case '>':
      kind = Resp3Type::push;
      break;
    default:
      break;
  }
  if (!add_node(kind, index)) return Step::error;
  nodes_[index].count = children;
  pos_ = cr + 2;
  scan_ = 0;
  if (children == 0) return finish(index);
  // Bounded by max_depth; reserved up to 64 levels, so this allocates only for deeper replies.
  stack_.push_back(Level{index, children, 0});
  return Step::element;
}

}  // namespace echo::io
