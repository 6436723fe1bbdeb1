// SPDX-License-Identifier: MIT
// Reading decoded RESP3 values: child walks over the pre-order node array, attribute chains,
// deep equality, the owning copy and a debug rendering. Nothing here is on the decode path.
#include <echo/io/resp3_value.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace echo::io {
namespace {

using detail::Resp3Node;

bool is_text(Resp3Type t) noexcept {
  switch (t) {
    case Resp3Type::simple_string:
    case Resp3Type::simple_error:
    case Resp3Type::bulk_string:
    case Resp3Type::bulk_error:
    case Resp3Type::verbatim_string:
    case Resp3Type::big_number:
      return true;
    default:
      return false;
  }
}

bool is_aggregate_type(Resp3Type t) noexcept {
  switch (t) {
    case Resp3Type::array:
    case Resp3Type::map:
    case Resp3Type::set:
    case Resp3Type::push:
    case Resp3Type::attribute:
      return true;
    default:
      return false;
  }
}

// Skips attribute nodes: they ride on the value after them and are not children.
std::uint32_t skip_attributes(const Resp3Node* nodes, std::uint32_t index) noexcept {
  while (nodes[index].type == Resp3Type::attribute) index = nodes[index].next;
  return index;
}

}  // namespace

std::string_view to_string(Resp3Type type) noexcept {
  switch (type) {
    case Resp3Type::null:
      return "null";
    case Resp3Type::simple_string:
      return "simple_string";
    case Resp3Type::simple_error:
      return "simple_error";
    case Resp3Type::integer:
      return "integer";
    case Resp3Type::bulk_string:
      return "bulk_string";
    case Resp3Type::array:
      return "array";
    case Resp3Type::boolean:
      return "boolean";
    case Resp3Type::floating:
      return "floating";
    case Resp3Type::big_number:
      return "big_number";
    case Resp3Type::bulk_error:
      return "bulk_error";
    case Resp3Type::verbatim_string:
      return "verbatim_string";
    case Resp3Type::map:
      return "map";
    case Resp3Type::set:
      return "set";
    case Resp3Type::attribute:
      return "attribute";
    case Resp3Type::push:
      return "push";
  }
  return "unknown";
}

bool Resp3Value::is_error() const noexcept {
  return type() == Resp3Type::simple_error || type() == Resp3Type::bulk_error;
}
bool Resp3Value::is_aggregate() const noexcept { return is_aggregate_type(type()); }
bool Resp3Value::has_text() const noexcept { return is_text(type()); }

std::string_view Resp3Value::str() const noexcept {
  if (!is_text(type())) return {};
  return {base_ + node().offset, node().count};
}

std::string_view Resp3Value::verbatim_format() const noexcept {
  if (type() != Resp3Type::verbatim_string) return {};
  return {base_ + node().offset - 4, 3};
}

Resp3Value::iterator::iterator(const Resp3Node* nodes, const char* base, std::uint32_t index,
                               std::uint32_t remaining) noexcept
    : nodes_(nodes), base_(base), index_(index), remaining_(remaining) {
  if (remaining_ > 0) index_ = skip_attributes(nodes_, index_);
}

Resp3Value::iterator& Resp3Value::iterator::operator++() noexcept {
  if (--remaining_ > 0) index_ = skip_attributes(nodes_, nodes_[index_].next);
  return *this;
}

Resp3Value::iterator Resp3Value::begin() const noexcept {
  const std::uint32_t n = static_cast<std::uint32_t>(size());
  return n == 0 ? iterator{} : iterator{nodes_, base_, index_ + 1, n};
}

Resp3Value Resp3Value::operator[](std::size_t i) const noexcept {
  if (i >= size()) return {};
  auto it = begin();
  while (i-- > 0) ++it;
  return *it;
}

std::optional<Resp3Value> Resp3Value::find(std::string_view key) const noexcept {
  if (type() != Resp3Type::map && type() != Resp3Type::attribute) return std::nullopt;
  for (auto it = begin(); it != end();) {
    const Resp3Value k = *it++;
    if (it == end()) break;
    if (k.has_text() && k.str() == key) return *it;
    ++it;
  }
  return std::nullopt;
}

Resp3Value Resp3Value::attribute() const noexcept {
  const std::uint32_t attr = node().attr;
  return attr == 0 ? Resp3Value{} : Resp3Value{nodes_, base_, attr - 1};
}

Resp3Owned Resp3Value::to_owned() const { return Resp3Owned(*this); }

bool operator==(const Resp3Value& a, const Resp3Value& b) noexcept {
  if (a.type() != b.type()) return false;
  if (a.has_attribute() != b.has_attribute()) return false;
  if (a.has_attribute() && !(a.attribute() == b.attribute())) return false;
  switch (a.type()) {
    case Resp3Type::null:
      return a.null_origin() == b.null_origin();
    case Resp3Type::integer:
      return a.integer() == b.integer();
    case Resp3Type::boolean:
      return a.boolean() == b.boolean();
    case Resp3Type::floating:
      return (std::isnan(a.floating()) && std::isnan(b.floating())) || a.floating() == b.floating();
    case Resp3Type::verbatim_string:
      return a.verbatim_format() == b.verbatim_format() && a.str() == b.str();
    default:
      break;
  }
  if (a.has_text()) return a.str() == b.str();
  if (a.size() != b.size()) return false;
  for (auto x = a.begin(), y = b.begin(); x != a.end(); ++x, ++y) {
    if (!(*x == *y)) return false;
  }
  return true;
}

namespace {

// `s` in double quotes, '"' and '\\' escaped, other bytes outside 0x20..0x7e as \xNN.
void append_quoted(std::string& out, std::string_view s) {
  out += '"';
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
}

// The type byte of a text or aggregate value as the wire writes it (the scalars without text,
// null, integer, boolean and floating, are written whole by to_debug_string).
char type_byte(Resp3Type t) noexcept {
  switch (t) {
    case Resp3Type::simple_string:
      return '+';
    case Resp3Type::simple_error:
      return '-';
    case Resp3Type::bulk_string:
      return '$';
    case Resp3Type::bulk_error:
      return '!';
    case Resp3Type::big_number:
      return '(';
    case Resp3Type::verbatim_string:
      return '=';
    case Resp3Type::array:
      return '*';
    case Resp3Type::map:
      return '%';
    case Resp3Type::set:
      return '~';
    case Resp3Type::attribute:
      return '|';
    case Resp3Type::push:
      return '>';
    default:
      return '?';
  }
}

// A scalar without text, written whole: true; false for text and aggregates.
bool append_scalar(std::string& out, const Resp3Value& v) {
  switch (v.type()) {
    case Resp3Type::null:
      out += v.null_origin() == Resp3NullOrigin::resp3      ? "_"
             : v.null_origin() == Resp3NullOrigin::nil_bulk ? "$-1"
                                                            : "*-1";
      return true;
    case Resp3Type::integer:
      out += ':' + std::to_string(v.integer());
      return true;
    case Resp3Type::boolean:
      out += v.boolean() ? "#t" : "#f";
      return true;
    case Resp3Type::floating: {
      char text[64];
      std::snprintf(text, sizeof text, ",%.17g", v.floating());
      out += text;
      return true;
    }
    default:
      return false;
  }
}

}  // namespace

std::string Resp3Value::to_debug_string() const {
  std::string out;
  if (has_attribute()) out += attribute().to_debug_string();
  if (append_scalar(out, *this)) return out;
  out += type_byte(type());
  if (type() == Resp3Type::verbatim_string) {
    out += verbatim_format();
    out += ':';
  }
  if (has_text()) {
    append_quoted(out, str());
    return out;
  }
  out += std::to_string(size()) + '[';
  bool first = true;
  for (const Resp3Value child : *this) {
    if (!first) out += ',';
    first = false;
    out += child.to_debug_string();
  }
  out += ']';
  return out;
}

void Resp3Owned::assign(const Resp3Value& value) {
  const Resp3Node* nodes = value.nodes_;
  // The value's attributes precede it on the wire, so [first, end) is one contiguous run of
  // nodes, and its text one contiguous run of bytes.
  std::uint32_t first = value.index_;
  for (std::uint32_t a = nodes[first].attr; a != 0; a = nodes[first].attr) first = a - 1;
  const std::uint32_t end = nodes[value.index_].next;

  std::uint64_t lo = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t hi = 0;
  for (std::uint32_t i = first; i < end; ++i) {
    if (!is_text(nodes[i].type)) continue;
    const std::uint64_t prefix = nodes[i].type == Resp3Type::verbatim_string ? 4 : 0;
    lo = std::min(lo, nodes[i].offset - prefix);
    hi = std::max(hi, nodes[i].offset + nodes[i].count);
  }
  if (lo > hi) lo = hi = 0;
  if (hi > lo) {
    bytes_.assign(value.base_ + lo, hi - lo);
  } else {
    bytes_.clear();
  }

  nodes_.assign(nodes + first, nodes + end);
  for (Resp3Node& n : nodes_) {
    n.next -= first;
    if (n.attr != 0) n.attr -= first;
    if (is_text(n.type)) n.offset -= lo;
  }
  root_ = value.index_ - first;
}

}  // namespace echo::io
