// SPDX-License-Identifier: MIT
// Protocol Buffers messages as a typed table's values: include this header (and link
// libprotobuf) and any generated message type is a T for typed<T>() and Table<T>, with no codec
// of your own.
//
//   #include <echo/engine/codec_protobuf.h>
//   #include "quote.pb.h"                      // message Quote { double bid = 1; double ask = 2; }
//   auto spec = echo::engine::typed<trading::Quote>(echo::engine::TableSpec{...});
//   quotes.read("AAPL", [](const trading::Quote& q, std::string_view) { use(q.bid()); });
//
// The row holds the parsed message (decoded once, on the table's writer, when the row enters L1),
// so a read calls its accessors in place. The bytes in L2 are the message's wire format after the
// schema header. The schema (schema.h) is the message's full name ("trading.Quote"), not its
// fields: the format's own rules decide what two releases can read of each other (a field added
// under a new number is skipped by the older release and kept as an unknown field; a field
// removed reads as its default), so nodes of two releases of one message read each other's rows
// from L2, as they would any protobuf. A release that renames the message or moves its package
// gets a new schema: its rows are misses for the other release's loader, as a struct's drift is.
// Parsing refuses only bytes that are no message (Errc::kBadValue, counted as decode_errors).
//
// Why Protocol Buffers rather than FlatBuffers: a protobuf message is an object the row can hold
// and read in place, which is what an L1 row is for; FlatBuffers' in-place reading of a buffer
// would duplicate that, and its object API is the secondary one. Both evolve by field numbers.
#pragma once

#include <google/protobuf/message_lite.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include <echo/engine/codec.h>

namespace echo::engine {

template <class T>
struct Codec<T, std::enable_if_t<std::is_base_of_v<google::protobuf::MessageLite, T>>> {
  static void encode(const T& value, std::string& out) { value.AppendToString(&out); }
  static bool decode(std::string_view bytes, T& out, std::string& why) {
    if (!out.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
      why = "not a " + out.GetTypeName() + " message (" + std::to_string(bytes.size()) + " bytes)";
      return false;
    }
    return true;
  }
  static std::uint64_t schema() {
    static const std::uint64_t fingerprint = [] {
      detail::schema::Hasher h;
      h.bytes("echo.schema.protobuf");
      h.bytes(T::default_instance().GetTypeName());
      return h.h;
    }();
    return fingerprint;
  }
};

}  // namespace echo::engine
