// SPDX-License-Identifier: MIT
// libFuzzer: the text-key message parser (docs/wire.md, "Text keys"). Any bytes: never crashes; an
// accepted frame splits from the right, its key views into the input and it rebuilds to the same
// bytes; a refusal names the gate that a direct check agrees with; a 29-byte frame parse_frame
// accepts is accepted here with its name as the key; and the input taken as a key builds iff
// check_text_key accepts it, into a frame that parses back to it.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <echo/table/coherence_frame.h>

using namespace echo::table;

namespace {

// The text key rule (docs/wire.md, "Text keys") spelled out here, apart from check_text_key, so the
// fuzzer checks it too.
bool wire_text_key(std::string_view key) {
  if (key.empty() || key.size() > 200) return false;
  for (const char ch : key) {
    const auto c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c == 0x7F || c == '{' || c == '}') return false;
  }
  return true;
}

void check_parse(std::string_view in) {
  auto m = parse_text_frame(in);
  if (m) {
    const std::size_t sep = in.size() - kIdSize - 1;
    if (in.size() < kMinTextFrameSize || in.size() > kMaxTextFrameSize) std::abort();
    if (m->key.data() != in.data() || m->key.size() != sep || in[sep] != ':') std::abort();
    if (!check_text_key(m->key)) std::abort();
    if (m->version.view() != in.substr(sep + 1)) std::abort();
    auto f = make_text_frame(m->key, m->version);
    if (!f || view(*f) != in) std::abort();
  } else {
    const FrameRefusal r = m.error();
    if (in.size() < kMinTextFrameSize || in.size() > kMaxTextFrameSize) {
      if (r.error != FrameError::kLength) std::abort();
    } else if (const std::size_t sep = in.size() - kIdSize - 1; in[sep] != ':') {
      if (r.error != FrameError::kSeparator) std::abort();
    } else if (auto k = check_text_key(in.substr(0, sep)); !k) {
      // Within the length gate the key is 1..200 bytes: only a forbidden byte can refuse it.
      if (r.error != FrameError::kName || r.key != k.error()) std::abort();
      if (r.key != NameError::kForbiddenByte) std::abort();
    } else {
      auto v = BrandedId::parse(in.substr(sep + 1));
      if (v || r.error != FrameError::kVersion || r.id != v.error()) std::abort();
    }
  }
  // A branded frame is a text frame whose key is the name.
  if (auto b = parse_frame(in); b) {
    if (!m || m->key != b->name.view() || m->version != b->version) std::abort();
  }
}

void check_build(std::string_view key) {
  static const BrandedId version = BrandedId::parse("TXN0NgWEfAEJfs").value();
  auto f = make_text_frame(key, version);
  auto k = check_text_key(key);
  if (f.has_value() != k.has_value() || k.has_value() != wire_text_key(key)) std::abort();
  if (!f) {
    if (f.error() != k.error()) std::abort();
    return;
  }
  auto m = parse_text_frame(view(*f));
  if (!m || m->key != key || m->version != version) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  check_parse(in);
  check_build(in);
  return 0;
}
