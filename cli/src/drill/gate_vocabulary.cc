// SPDX-License-Identifier: MIT
// Gate F1, vocabulary part (docs/wire.md, "Branded ids", "Names, keys and channels",
// "The coherence message"): the id vectors and refusals, the mint order, the 29-byte frame, the
// names and their slots, and the frame's byte-exact trip through the server.
#include <hiredis/hiredis.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <echo/harness/hiredis.h>
#include <echo/harness/stage.h>
#include <echo/table/branded_id.h>
#include <echo/table/coherence_frame.h>
#include <echo/table/names.h>

#include "drill/drill.h"

namespace echo::cli {
namespace {

using namespace echo::table;

void expect_ids(GateRun& run) {
  auto usr = BrandedId::encode("USR", 274557032793636864ull);
  run.expect(usr && usr->view() == "USR0KHTOWnGLuC",
             "encode(USR, 274557032793636864) = USR0KHTOWnGLuC");
  auto dec = BrandedId::parse("USR0NgWEfAEJfs");
  run.expect(dec && dec->ns() == "USR" && dec->snowflake() == 320636799581945856ull,
             "decode(USR0NgWEfAEJfs) = (USR, 320636799581945856)");
  run.expect(hash32(274557032793636864ull) == 234878118u, "hash32 vector 234878118");
  run.expect(unix_ms(274557032793636864ull) == 1769526697641, "unix_ms vector 1769526697641");
  auto max = base62_encode(kMaxSnowflake);
  run.expect(max && std::string_view(max->data(), kPayloadSize) == "AzL8n0Y58m7",
             "base62(2^63-1) = AzL8n0Y58m7");
  run.expect(!base62_decode("zzzzzzzzzzz"), "base62-decode(zzzzzzzzzzz) refused");
  const struct {
    const char* text;
    IdError gate;
  } rejects[] = {{"USRzzzzzzzzzzz", IdError::kRange},
                 {"usr0KHTOWnGLuC", IdError::kNamespace},
                 {"USR0KHTOWnGLu", IdError::kLength},
                 {"USR0KHTOWnGL!C", IdError::kCharset}};
  for (const auto& r : rejects) {
    auto p = BrandedId::parse(r.text);
    run.expect(!p && p.error() == r.gate,
               std::string(r.text) + " refused at gate " + std::string(to_string(r.gate)));
  }
}

void expect_mint_order(GateRun& run) {
  Minter minter(7);
  std::vector<std::string> minted;
  for (int i = 0; i < 10000; ++i) minted.push_back(minter.mint("TXN")->str());
  run.expect(std::is_sorted(minted.begin(), minted.end()) &&
                 std::adjacent_find(minted.begin(), minted.end()) == minted.end(),
             "10,000 mints are strictly increasing in byte order");
}

// The frame vectors; the payload vector's frame, for the server's trip and the parse figure.
Expected<Frame, FrameError> expect_frames(GateRun& run) {
  auto f = make_frame(std::string_view("AST0KHTOWnGLuC"), std::string_view("TXN0NgWEfAEJfs"));
  run.expect(f && view(*f) == "AST0KHTOWnGLuC:TXN0NgWEfAEJfs", "payload vector, 29 bytes");
  auto back = f ? parse_frame(view(*f)) : parse_frame("");
  run.expect(
      back && back->name.view() == "AST0KHTOWnGLuC" && back->version.view() == "TXN0NgWEfAEJfs",
      "the payload vector parses back");
  run.expect(!parse_frame("garbage"), "parse(garbage) refused");
  run.expect(!parse_frame("AST:short"), "parse(AST:short) refused");
  auto bad = parse_frame("AAAAAAAAAAAAAA:BBBBBBBBBBBBBB");
  run.expect(!bad && bad.error().error == FrameError::kVersion && bad.error().id == IdError::kRange,
             "AAAAAAAAAAAAAA:BBBBBBBBBBBBBB refused: the version half fails range");
  return f;
}

void expect_names(GateRun& run) {
  run.expect(coherence_channel("users").value() == "ecc:{users}:coh", "channel ecc:{users}:coh");
  run.expect(coherence_queue("users").value() == "ecc.coh.users", "queue ecc.coh.users");
  run.expect(l2_key("users", "AST0KHTOWnGLuC").value() == "ecc:{users}:AST0KHTOWnGLuC",
             "L2 key ecc:{users}:AST0KHTOWnGLuC");
  run.expect(!l2_key("users", "not-an-id") && !coherence_channel("a{b") && !coherence_channel(""),
             "an invalid id, a brace and an empty table name are refused before any wire");
  run.expect(hash_slot("123456789") == 12739 && hash_slot("emq:{orders}:pending") == 105 &&
                 hash_slot("emq:{fills}:pending") == 4165 && hash_slot(kVersionFenceKey) == 9051,
             "slots 12739, 105, 4165, 9051");
}

// The frame on the real server, byte for byte.
void expect_server_trip(GateRun& run, const DrillTarget& target,
                        const Expected<Frame, FrameError>& f) {
  std::unique_ptr<redisContext, void (*)(redisContext*)> c(
      redisConnect(target.host.c_str(), target.port), redisFree);
  if (!run.expect(c && !c->err && harness::authenticate(c.get()).empty(),
                  "connected to the drill's server")) {
    return;
  }
  const std::string key = l2_key("drill", "AST0KHTOWnGLuC").value();
  auto* set = static_cast<redisReply*>(
      redisCommand(c.get(), "SET %b %b PX 5000", key.data(), key.size(), f->data(), f->size()));
  if (set) freeReplyObject(set);
  auto* got = static_cast<redisReply*>(redisCommand(c.get(), "GET %b", key.data(), key.size()));
  run.expect(
      got && got->type == REDIS_REPLY_STRING && std::string_view(got->str, got->len) == view(*f),
      "the 29-byte frame survives SET/GET byte for byte");
  if (got) freeReplyObject(got);
  auto* del = static_cast<redisReply*>(redisCommand(c.get(), "DEL %b", key.data(), key.size()));
  if (del) freeReplyObject(del);
}

void vocabulary(GateRun& run, const DrillTarget& target) {
  run.stage(
      "the id vectors and refusals, 10,000 mints, the 29-byte frame vectors, the "
      "names and slot vectors, and one frame stored in L2 and read back");
  expect_ids(run);
  expect_mint_order(run);
  const auto f = expect_frames(run);
  expect_names(run);
  expect_server_trip(run, target, f);
  // A figure: parse cost, against the floor of copying 29 bytes.
  const auto t0 = std::chrono::steady_clock::now();
  std::size_t ok = 0;
  for (int i = 0; i < 1'000'000; ++i) ok += parse_frame(view(*f)).has_value();
  const double ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / 1e6;
  run.expect(ok == 1'000'000, "1,000,000 parses of the vector all succeed");
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f ns", ns);
  run.figure(std::string("frame parse ") + buf + " each over 1,000,000");
}

void add_vocabulary_gates(std::vector<Gate>& gates) {
  gates.push_back({"F1", "surface (vocabulary)", vocabulary});
}

const GateGroup kVocabulary{4201, add_vocabulary_gates};

}  // namespace

}  // namespace echo::cli
