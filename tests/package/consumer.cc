// SPDX-License-Identifier: MIT
// Proves the installed package: headers at their installed paths, every library linkable.
#include <cstdio>

#include <echo/lua/scripts.h>
#include <echo/table/branded_id.h>
#include <echo/table/coherence_frame.h>
#include <echo/table/names.h>

int main() {
  using namespace echo::table;
  echo::table::Minter minter(1);
  const auto name = BrandedId::encode("USR", 274557032793636864ull);
  const auto version = minter.mint("TXN");
  if (!name || name->view() != "USR0KHTOWnGLuC" || !version) return 1;
  const auto frame = make_frame(*name, *version);
  const auto back = parse_frame(view(frame));
  if (!back || !(back->name == *name)) return 2;
  if (coherence_channel("users").value() != "ecc:{users}:coh") return 3;
  const auto* drop = echo::lua::find_script("drop_l2");
  if (drop == nullptr || drop->sha1.size() != 40) return 4;
  std::printf("consumer ok: %.*s %zu scripts\n", static_cast<int>(view(frame).size()),
              view(frame).data(), echo::lua::all_scripts().size());
  return 0;
}
