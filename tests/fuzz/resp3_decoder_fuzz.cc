// SPDX-License-Identifier: MIT
// libFuzzer: the RESP3 decoder on any bytes, split anywhere, under small or default limits.
// Never crashes or reads out of bounds (ASan), and the split never matters: the chunked decode
// yields exactly the values and the stop (need_more or the same typed error) of a whole decode.
// Input layout: byte 0 picks the limits, byte 1 seeds the split points, the rest is the stream.
#include <echo/io/resp3_decoder.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

using namespace echo::io;

namespace {

struct Outcome {
  std::vector<Resp3Owned> values;
  Resp3Status last = Resp3Status::need_more;
  Resp3Error error = Resp3Error::none;
};

// Touches every accessor of every node so ASan sees each offset the decoder recorded.
void walk(const Resp3Value& v, int depth) {
  if (depth > 2000) std::abort();  // deeper than any limit allows
  volatile std::size_t sink = v.str().size() + v.verbatim_format().size();
  sink = sink + static_cast<std::size_t>(v.integer()) + v.boolean();
  if (!v.str().empty()) sink = sink + static_cast<unsigned char>(v.str().back());
  if (v.has_attribute()) {
    if (v.attribute().type() != Resp3Type::attribute) std::abort();
    walk(v.attribute(), depth + 1);
  }
  std::size_t children = 0;
  for (const Resp3Value child : v) {
    if (child.type() == Resp3Type::attribute) std::abort();
    walk(child, depth + 1);
    ++children;
  }
  if (children != v.size()) std::abort();
  if (v.type() == Resp3Type::map && v.size() % 2 != 0) std::abort();
}

void drain(Resp3Decoder& dec, Outcome& out) {
  for (;;) {
    const Resp3Next r = dec.next();
    out.last = r.status;
    out.error = r.error;
    if (r.status != Resp3Status::value) {
      if ((r.status == Resp3Status::error) != dec.failed()) std::abort();
      return;
    }
    if (r.value.type() == Resp3Type::attribute) std::abort();
    walk(r.value, 0);
    Resp3Owned owned = r.value.to_owned();
    if (!(owned.view() == r.value)) std::abort();
    out.values.push_back(std::move(owned));
  }
}

Resp3Limits pick_limits(std::uint8_t b) {
  Resp3Limits limits;
  if ((b & 1) == 0) return limits;  // defaults half of the time
  limits.max_depth = 1 + (b >> 1) % 8;
  limits.max_aggregate_len = 1 + (b >> 2) % 16;
  limits.max_frame_elements = 1 + (b >> 3) % 32;
  limits.max_bulk_len = (b >> 4) % 64;
  limits.max_line_len = 16 + (b >> 5) % 16;
  limits.max_frame_bytes = 16 + b % 200;
  return limits;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const Resp3Limits limits = pick_limits(data[0]);
  std::uint32_t seed = data[1] * 2654435761u + 1;
  const std::string_view stream(reinterpret_cast<const char*>(data + 2), size - 2);

  Outcome whole;
  {
    Resp3Decoder dec(limits);
    dec.feed(stream);
    drain(dec, whole);
  }

  Outcome chunked;
  Resp3Decoder dec(limits);
  std::size_t at = 0;
  while (at < stream.size() && chunked.last != Resp3Status::error) {
    seed = seed * 1103515245u + 12345u;
    const std::size_t n = std::min<std::size_t>(1 + (seed >> 16) % 17, stream.size() - at);
    if ((seed >> 8) & 1) {
      dec.feed(stream.substr(at, n));
    } else {  // the recv-into path, sometimes asking for far more room than needed
      const std::span<char> room = dec.prepare((seed >> 9) & 1 ? n : 4096);
      std::memcpy(room.data(), stream.data() + at, n);
      dec.commit(n);
    }
    at += n;
    drain(dec, chunked);
  }

  if (chunked.values.size() != whole.values.size()) std::abort();
  for (std::size_t i = 0; i < whole.values.size(); ++i) {
    if (!(chunked.values[i] == whole.values[i])) std::abort();
  }
  if (chunked.last != whole.last || chunked.error != whole.error) std::abort();

  // reset() forgets the error and the partial frame: the decoder is reusable.
  dec.reset();
  dec.feed(std::string_view("+OK\r\n"));
  const Resp3Next r = dec.next();
  if (r.status != Resp3Status::value || r.value.str() != "OK") std::abort();
  return 0;
}
