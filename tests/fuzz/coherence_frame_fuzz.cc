// SPDX-License-Identifier: MIT
// libFuzzer: the 29-byte frame parser. Any bytes: never crashes; an accepted frame rebuilds to the
// same bytes; a refusal names the gate that a direct check agrees with.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <echo/table/coherence_frame.h>

using namespace echo::table;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  auto m = parse_frame(in);
  if (m) {
    if (view(make_frame(m->name, m->version)) != in) std::abort();
    return 0;
  }
  const FrameError e = m.error().error;
  if (size != kFrameSize) {
    if (e != FrameError::kLength) std::abort();
  } else if (in[kIdSize] != ':') {
    if (e != FrameError::kSeparator) std::abort();
  } else if (BrandedId::parse(in.substr(0, kIdSize))) {
    if (e != FrameError::kVersion || BrandedId::parse(in.substr(kIdSize + 1))) std::abort();
  } else if (e != FrameError::kName) {
    std::abort();
  }
  return 0;
}
