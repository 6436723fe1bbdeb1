// SPDX-License-Identifier: MIT
// Shared by the RESP3 decoder's unit tests (resp3_decoder_*_test.cc): a whole stream decoded (in
// one piece or cut at given offsets) to its values and how it stopped, and the inputs the tests
// feed: a 29-byte coherence payload, a push message, and a recorded stream of every type.
#pragma once

#include <echo/io/resp3_decoder.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <ostream>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace echo::io {

// gtest finds these by argument-dependent lookup, so they live in echo::io itself.
inline void PrintTo(Resp3Error error, std::ostream* os) { *os << to_string(error); }
inline void PrintTo(Resp3Status status, std::ostream* os) { *os << static_cast<int>(status); }

// What a whole stream decodes to: the values in order, then how it stopped.
struct Decoded {
  std::vector<Resp3Owned> values;
  Resp3Status last = Resp3Status::need_more;
  Resp3Error error = Resp3Error::none;

  friend bool operator==(const Decoded& a, const Decoded& b) {
    return a.values == b.values && a.last == b.last && a.error == b.error;
  }
};

inline std::string describe(const Decoded& d) {
  std::string out;
  for (const auto& v : d.values) out += v.view().to_debug_string() + "\n";
  out += "last=" + std::to_string(static_cast<int>(d.last)) +
         " error=" + std::string(to_string(d.error));
  return out;
}

inline void drain(Resp3Decoder& dec, Decoded& out) {
  for (;;) {
    const Resp3Next r = dec.next();
    out.last = r.status;
    out.error = r.error;
    if (r.status != Resp3Status::value) return;
    out.values.push_back(r.value.to_owned());
  }
}

// Feeds `stream` cut at each of `cuts` (ascending offsets), draining after every chunk.
inline Decoded decode_split(std::string_view stream, const std::vector<std::size_t>& cuts,
                            Resp3Limits limits = {}) {
  Resp3Decoder dec(limits);
  Decoded out;
  std::size_t at = 0;
  for (std::size_t cut : cuts) {
    dec.feed(stream.substr(at, cut - at));
    drain(dec, out);
    if (out.last == Resp3Status::error) return out;
    at = cut;
  }
  dec.feed(stream.substr(at));
  drain(dec, out);
  return out;
}

inline Decoded decode(std::string_view stream, Resp3Limits limits = {}) {
  return decode_split(stream, {}, limits);
}

inline Resp3Error error_of(std::string_view stream, Resp3Limits limits = {}) {
  return decode(stream, limits).error;
}

// Exactly one complete value, nothing left over.
inline Resp3Owned one(std::string_view stream) {
  Decoded d = decode(stream);
  EXPECT_EQ(d.values.size(), 1u) << describe(d);
  EXPECT_EQ(d.last, Resp3Status::need_more) << describe(d);
  return d.values.empty() ? Resp3Owned{} : d.values.front();
}

// Printable rendering of raw input for failure messages.
inline std::string one_line(std::string_view bytes) {
  std::string out;
  for (unsigned char c : bytes) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// A 29-byte coherence payload with the bytes a naive parser trips on.
inline std::string payload29() {
  static constexpr char kBytes[] = "USR0KHTOWnGLuC\r\n\0$*:+-USR0N\xff\x01";
  static_assert(sizeof kBytes - 1 == 29, "a coherence message is 29 bytes");
  return std::string(kBytes, 29);
}

inline std::string push_message(std::string_view channel, std::string_view payload,
                                char kind = '>') {
  std::string s;
  s += kind;
  s += "3\r\n$7\r\nmessage\r\n$" + std::to_string(channel.size()) + "\r\n";
  s += channel;
  s += "\r\n$" + std::to_string(payload.size()) + "\r\n";
  s += payload;
  s += "\r\n";
  return s;
}

// Every RESP3 type, nesting, attributes (top-level and nested), a push, and payloads holding
// CRLF: the recorded stream that every split must decode identically.
inline std::string recorded_stream() {
  std::string s;
  s += "+OK\r\n";
  s += "-ERR unknown command 'FOO'\r\n";
  s += ":-42\r\n";
  s += "$5\r\nhello\r\n";
  s += "$0\r\n\r\n";
  s += "$-1\r\n";
  s += "*-1\r\n";
  s += "_\r\n";
  s += "#t\r\n";
  s += ",3.25\r\n";
  s += ",-inf\r\n";
  s += "(3492890328409238509324850943850943825024385\r\n";
  s += "!21\r\nSYNTAX invalid syntax\r\n";
  s += "=15\r\ntxt:Some string\r\n";
  s += "%2\r\n+first\r\n:1\r\n+second\r\n:2\r\n";
  s += "~3\r\n+orange\r\n+apple\r\n#f\r\n";
  s += "|1\r\n+key-popularity\r\n%2\r\n$1\r\na\r\n,0.1923\r\n$1\r\nb\r\n,0.0012\r\n";
  s += "*2\r\n:2039123\r\n:9543892\r\n";
  s += push_message("ecc:{t}:coh", payload29());
  s += "*3\r\n*2\r\n:1\r\n*0\r\n%0\r\n~2\r\n|1\r\n+ttl\r\n:3\r\n$2\r\n\r\n\r\n>0\r\n";
  s += ":9223372036854775807\r\n";
  return s;
}

}  // namespace echo::io
