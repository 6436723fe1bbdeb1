// SPDX-License-Identifier: MIT
// libFuzzer: the branded id parser. Any bytes: parse never crashes; an accepted id re-encodes to
// the same bytes and decodes to the same snowflake; newer() is a strict order on accepted ids.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <echo/table/branded_id.h>

using namespace echo::table;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  auto id = BrandedId::parse(in);
  if (id) {
    if (id->view() != in) std::abort();
    auto again = BrandedId::encode(id->ns(), id->snowflake());
    if (!again || again->view() != in) std::abort();
    if (newer(*id, *id)) std::abort();
  } else if (size == kIdSize && id.error() == IdError::kLength) {
    std::abort();
  }
  (void)base62_decode(in);
  // Split the input into two 14-byte halves: newer is antisymmetric.
  if (size >= 2 * kIdSize) {
    const auto a = in.substr(0, kIdSize), b = in.substr(kIdSize, kIdSize);
    if (newer(a, b) && newer(b, a)) std::abort();
  }
  return 0;
}
