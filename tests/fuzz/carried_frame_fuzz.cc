// SPDX-License-Identifier: MIT
// libFuzzer: the carried-value message parser (docs/wire.md, "Carried values"). Any bytes: never
// crashes; an accepted frame's key and value view into the input, the key passes the text-key
// check and holds no '}', and it rebuilds to the same bytes; a refusal names the gate that a
// direct check agrees with; and a frame is carried iff its first byte is '{'.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <echo/table/coherence_frame.h>
#include <echo/table/names.h>

using namespace echo::table;

namespace {

bool inside(std::string_view part, std::string_view in) {
  return part.data() >= in.data() && part.data() + part.size() <= in.data() + in.size();
}

// The gate a refusal must name, checked directly in the parser's order.
FrameError expected_gate(std::string_view in) {
  if (in.size() < kMinCarriedFrameSize || in.size() > kMaxCarriedFrameSize || in[0] != '{') {
    return FrameError::kLength;
  }
  const std::size_t close = in.substr(0, 2 + kMaxTextKey).find('}', 2);
  if (close == std::string_view::npos || in.size() - close - 1 < kIdSize) {
    return FrameError::kSeparator;
  }
  if (!check_text_key(in.substr(1, close - 1))) return FrameError::kName;
  return FrameError::kVersion;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  auto m = parse_carried_frame(in);
  if (is_carried(in) != (size > 0 && in[0] == '{')) std::abort();
  if (m) {
    if (!is_carried(in) || !inside(m->key, in) || !inside(m->value, in)) std::abort();
    if (!check_text_key(m->key) || m->key.find('}') != std::string_view::npos) std::abort();
    std::string rebuilt;
    append_carried_frame(rebuilt, m->key, m->version, m->value);
    if (rebuilt != in) std::abort();
    return 0;
  }
  if (m.error().error != expected_gate(in)) std::abort();
  return 0;
}
