// SPDX-License-Identifier: MIT
// RESP3 values as the decoder hands them out: Resp3Value is a cheap read-only handle (three
// words) over a flat pre-order node array plus the received bytes, so decoding a reply costs no
// per-value allocation; Resp3Owned is the deep copy for a value that must outlive the decoder's
// next call. Pure data: no I/O, no threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace echo::io {

// One per RESP3 type byte. `null` also stands for RESP2's nil bulk ($-1) and nil array (*-1);
// null_origin() tells them apart.
enum class Resp3Type : std::uint8_t {
  null,             // _   and RESP2 $-1, *-1
  simple_string,    // +
  simple_error,     // -
  integer,          // :
  bulk_string,      // $
  array,            // *
  boolean,          // #
  floating,         // ,   (RESP3 "double", including inf, -inf and nan)
  big_number,       // (   kept as its decimal text
  bulk_error,       // !
  verbatim_string,  // =   str() is the text, verbatim_format() its 3-byte format ("txt")
  map,              // %   children are key, value, key, value, ...
  set,              // ~
  attribute,        // |   never a value of its own: reached through Resp3Value::attribute()
  push,             // >   out-of-band data (pub/sub messages, invalidations)
};

// Which wire form produced a `null`.
enum class Resp3NullOrigin : std::uint8_t { resp3, nil_bulk, nil_array };

std::string_view to_string(Resp3Type type) noexcept;

namespace detail {
// One decoded value. Aggregates are followed by their children in stream order (pre-order);
// `next` is one past the last node of this value's subtree, so siblings are one hop apart.
// String payloads are byte offsets from the frame's first byte, not pointers, so the decoder
// may move its buffer while a frame is still incomplete.
struct Resp3Node {
  Resp3Type type = Resp3Type::null;
  std::uint8_t aux = 0;     // null: Resp3NullOrigin
  std::uint32_t attr = 0;   // index + 1 of the attribute attached to this value; 0 = none
  std::uint32_t next = 1;   // index one past this value's subtree
  std::uint32_t count = 0;  // aggregates: child values (map, attribute: 2 x pairs); strings: bytes
  union {
    std::int64_t integer = 0;  // integer; boolean as 0 / 1
    double floating;
    std::uint64_t offset;  // string types: first payload byte, from the frame's first byte
  };
};
static_assert(sizeof(Resp3Node) == 24,
              "the node arena is the decoder's working set: keep it small");
inline constexpr Resp3Node kNullNode{};
}  // namespace detail

class Resp3Owned;

// A read-only view of one decoded value and its children.
//
// Lifetime: a Resp3Value from Resp3Decoder::next() (and everything reached from it, including
// every string_view it returns) is valid until the next non-const call on that decoder. A
// Resp3Value from Resp3Owned::view() is valid while that Resp3Owned is alive and unmodified;
// take view() again after moving or assigning it. Call to_owned() to keep a value longer.
//
// Accessors never fail: one that does not match type() returns an empty / zero value, so a
// hostile reply can never make a reader crash. Check type() before trusting a payload.
// A default-constructed Resp3Value is a RESP3 null.
class Resp3Value {
 public:
  Resp3Value() noexcept = default;
  Resp3Value(const detail::Resp3Node* nodes, const char* base, std::uint32_t index) noexcept
      : nodes_(nodes), base_(base), index_(index) {}

  Resp3Type type() const noexcept { return node().type; }
  bool is_null() const noexcept { return type() == Resp3Type::null; }
  // simple_error or bulk_error: the server refused the command.
  bool is_error() const noexcept;
  // array, map, set, push, attribute.
  bool is_aggregate() const noexcept;
  // simple_string, simple_error, bulk_string, bulk_error, verbatim_string, big_number.
  bool has_text() const noexcept;

  // The payload of a text type (verbatim: without its "fmt:" prefix); empty for other types.
  std::string_view str() const noexcept;
  // A verbatim string's 3-byte format, such as "txt" or "mkd"; empty for other types.
  std::string_view verbatim_format() const noexcept;
  std::int64_t integer() const noexcept {
    return type() == Resp3Type::integer ? node().integer : 0;
  }
  double floating() const noexcept { return type() == Resp3Type::floating ? node().floating : 0.0; }
  bool boolean() const noexcept { return type() == Resp3Type::boolean && node().integer != 0; }
  Resp3NullOrigin null_origin() const noexcept {
    return static_cast<Resp3NullOrigin>(is_null() ? node().aux : 0);
  }

  // Number of children of an aggregate (for map and attribute: 2 x pairs, keys and values
  // interleaved); 0 for scalars.
  std::size_t size() const noexcept { return is_aggregate() ? node().count : 0; }
  // The i-th child, or null when out of range. O(i): children are walked, not indexed.
  Resp3Value operator[](std::size_t i) const noexcept;
  // The value of the first key of a map / attribute whose text equals `key`.
  std::optional<Resp3Value> find(std::string_view key) const noexcept;

  // The attribute map (|) sent just before this value, if any. Attributes are never returned by
  // the decoder as values of their own, nor counted or visited as children: they ride on the
  // value they precede. Several in a row chain: attribute().attribute() is the earlier one.
  bool has_attribute() const noexcept { return node().attr != 0; }
  Resp3Value attribute() const noexcept;

  class iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = Resp3Value;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = Resp3Value;

    iterator() noexcept = default;
    Resp3Value operator*() const noexcept { return {nodes_, base_, index_}; }
    iterator& operator++() noexcept;
    iterator operator++(int) noexcept {
      iterator old = *this;
      ++*this;
      return old;
    }
    friend bool operator==(const iterator& a, const iterator& b) noexcept {
      return a.remaining_ == b.remaining_;
    }

   private:
    friend class Resp3Value;
    iterator(const detail::Resp3Node* nodes, const char* base, std::uint32_t index,
             std::uint32_t remaining) noexcept;
    const detail::Resp3Node* nodes_ = nullptr;
    const char* base_ = nullptr;
    std::uint32_t index_ = 0;
    std::uint32_t remaining_ = 0;
  };
  // Children in order; attributes are skipped (see attribute()).
  iterator begin() const noexcept;
  iterator end() const noexcept { return {}; }

  // A deep copy (this value, its children and its attributes) that owns its bytes. Allocates.
  Resp3Owned to_owned() const;

  // Deep equality: types, payloads, null origins, children and attributes (nan equals nan).
  friend bool operator==(const Resp3Value& a, const Resp3Value& b) noexcept;

  // A one-line rendering for logs and test failures, e.g. >3["message","ch",<29 bytes>].
  std::string to_debug_string() const;

 private:
  friend class Resp3Owned;
  const detail::Resp3Node& node() const noexcept { return nodes_[index_]; }

  const detail::Resp3Node* nodes_ = &detail::kNullNode;
  const char* base_ = nullptr;
  std::uint32_t index_ = 0;
};

// An owning deep copy of a Resp3Value. Movable and copyable; view() is valid while this object
// is alive and not modified (re-take it after a move or assignment).
class Resp3Owned {
 public:
  Resp3Owned() = default;
  explicit Resp3Owned(const Resp3Value& value) { assign(value); }
  // Becomes a copy of `value`, keeping the storage it already has: a Resp3Owned assigned answer
  // after answer allocates only when one outgrows every earlier one.
  void assign(const Resp3Value& value);

  Resp3Value view() const noexcept {
    return nodes_.empty() ? Resp3Value{} : Resp3Value{nodes_.data(), bytes_.data(), root_};
  }
  friend bool operator==(const Resp3Owned& a, const Resp3Owned& b) noexcept {
    return a.view() == b.view();
  }

 private:
  std::vector<detail::Resp3Node> nodes_;
  std::string bytes_;
  std::uint32_t root_ = 0;
};

}  // namespace echo::io
