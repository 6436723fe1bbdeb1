// SPDX-License-Identifier: MIT
// RESP decode and encode against hiredis 0.14, baselines in the same run. Decode: the same RESP2
// bytes (pushes-as-arrays, bulk replies, integers, a mix) through our decoder and through
// redisReader, fed in 16 KiB receives; our RESP3 push path on its own. Encode: RespEncoder
// against redisFormatCommandArgv on the commands the connection sends.
#include <benchmark/benchmark.h>
#include <echo/io/resp3_decoder.h>
#include <echo/io/resp_encoder.h>
#include <hiredis/hiredis.h>

#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace echo::io;

constexpr std::size_t kFrames = 1024;        // frames per stream (one benchmark iteration)
constexpr std::size_t kReceive = 16 * 1024;  // bytes per simulated receive

const std::string& payload29() {
  static const std::string p = "USR0KHTOWnGLuC:USR0NgWEfAEJfs";
  return p;
}

std::string push_frame(char kind) {
  std::string s;
  s += kind;
  s += "3\r\n$7\r\nmessage\r\n$11\r\necc:{t}:coh\r\n$29\r\n";
  s += payload29();
  s += "\r\n";
  return s;
}

std::string bulk_frame() { return "$100\r\n" + std::string(100, 'v') + "\r\n"; }

std::string integer_frame(std::size_t i) { return ":" + std::to_string(i * 7919) + "\r\n"; }

std::string mixed_frame(std::size_t i) {
  switch (i % 5) {
    case 0:
      return push_frame('*');
    case 1:
      return bulk_frame();
    case 2:
      return integer_frame(i);
    case 3:
      return "+OK\r\n";
    default:
      return "*2\r\n$3\r\nabc\r\n$-1\r\n";
  }
}

enum class Stream { pushes, bulks, integers, mixed, resp3_pushes };

const std::string& stream(Stream kind) {
  static std::string cache[5];
  std::string& s = cache[static_cast<int>(kind)];
  if (!s.empty()) return s;
  for (std::size_t i = 0; i < kFrames; ++i) {
    switch (kind) {
      case Stream::pushes:
        s += push_frame('*');
        break;
      case Stream::bulks:
        s += bulk_frame();
        break;
      case Stream::integers:
        s += integer_frame(i);
        break;
      case Stream::mixed:
        s += mixed_frame(i);
        break;
      case Stream::resp3_pushes:
        s += push_frame('>');
        break;
    }
  }
  return s;
}

// Ours, each iteration: copy each receive of `bytes` in (as hiredis must), drain the complete
// values, hand each one to `touch`. Returns the values decoded over the run.
template <class Touch>
std::size_t decode_stream(benchmark::State& state, const std::string& bytes, Touch touch) {
  Resp3Decoder dec;
  std::size_t frames = 0;
  for (auto _ : state) {
    for (std::size_t at = 0; at < bytes.size(); at += kReceive) {
      dec.feed(std::string_view(bytes).substr(at, kReceive));
      for (Resp3Next r = dec.next(); r.status == Resp3Status::value; r = dec.next()) {
        touch(r.value);
        ++frames;
      }
    }
  }
  return frames;
}

void set_processed(benchmark::State& state, std::size_t frames, const std::string& bytes) {
  state.SetItemsProcessed(static_cast<std::int64_t>(frames));
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes.size() * state.iterations()));
}

// Ours: touch each value's type.
void decode_ours(benchmark::State& state, Stream kind) {
  const std::string& bytes = stream(kind);
  const std::size_t frames =
      decode_stream(state, bytes, [](auto& value) { benchmark::DoNotOptimize(value.type()); });
  if (frames != kFrames * state.iterations()) state.SkipWithError("frame count mismatch");
  set_processed(state, frames, bytes);
}

struct ReaderDeleter {
  void operator()(redisReader* r) const noexcept { redisReaderFree(r); }
};

// Baseline: hiredis 0.14's reader on the same bytes, same receive size; each reply freed.
void decode_hiredis(benchmark::State& state, Stream kind) {
  const std::string& bytes = stream(kind);
  std::unique_ptr<redisReader, ReaderDeleter> reader(redisReaderCreate());
  std::size_t frames = 0;
  for (auto _ : state) {
    for (std::size_t at = 0; at < bytes.size(); at += kReceive) {
      const std::size_t n = std::min(kReceive, bytes.size() - at);
      redisReaderFeed(reader.get(), bytes.data() + at, n);
      void* reply = nullptr;
      while (redisReaderGetReply(reader.get(), &reply) == REDIS_OK && reply != nullptr) {
        benchmark::DoNotOptimize(static_cast<redisReply*>(reply)->type);
        freeReplyObject(reply);
        ++frames;
      }
    }
  }
  if (frames != kFrames * state.iterations()) state.SkipWithError("frame count mismatch");
  set_processed(state, frames, bytes);
}

void BM_Resp3Decoder_DecodePushArrays(benchmark::State& s) { decode_ours(s, Stream::pushes); }
void BM_Hiredis_ReaderPushArrays(benchmark::State& s) { decode_hiredis(s, Stream::pushes); }
void BM_Resp3Decoder_DecodeBulks(benchmark::State& s) { decode_ours(s, Stream::bulks); }
void BM_Hiredis_ReaderBulks(benchmark::State& s) { decode_hiredis(s, Stream::bulks); }
void BM_Resp3Decoder_DecodeIntegers(benchmark::State& s) { decode_ours(s, Stream::integers); }
void BM_Hiredis_ReaderIntegers(benchmark::State& s) { decode_hiredis(s, Stream::integers); }
void BM_Resp3Decoder_DecodeMixed(benchmark::State& s) { decode_ours(s, Stream::mixed); }
void BM_Hiredis_ReaderMixed(benchmark::State& s) { decode_hiredis(s, Stream::mixed); }
// RESP3 pushes: hiredis 0.14 cannot read '>' at all; its baseline is the '*' form above.
void BM_Resp3Decoder_DecodePushes(benchmark::State& s) { decode_ours(s, Stream::resp3_pushes); }

// The io thread's whole push path: decode and pull out the channel and the 29-byte payload.
void BM_Resp3Decoder_DecodePushPayload(benchmark::State& state) {
  const std::string& bytes = stream(Stream::resp3_pushes);
  const std::size_t frames = decode_stream(state, bytes, [](auto& value) {
    auto it = value.begin();
    const std::string_view verb = (*it).str();
    const std::string_view channel = (*++it).str();
    const std::string_view payload = (*++it).str();
    benchmark::DoNotOptimize(verb.size() + channel.size() + payload.data()[28]);
  });
  set_processed(state, frames, bytes);
}

BENCHMARK(BM_Resp3Decoder_DecodePushArrays);
BENCHMARK(BM_Hiredis_ReaderPushArrays);
BENCHMARK(BM_Resp3Decoder_DecodeBulks);
BENCHMARK(BM_Hiredis_ReaderBulks);
BENCHMARK(BM_Resp3Decoder_DecodeIntegers);
BENCHMARK(BM_Hiredis_ReaderIntegers);
BENCHMARK(BM_Resp3Decoder_DecodeMixed);
BENCHMARK(BM_Hiredis_ReaderMixed);
BENCHMARK(BM_Resp3Decoder_DecodePushes);
BENCHMARK(BM_Resp3Decoder_DecodePushPayload);

// ---------------------------------------------------------------------------------------------
// Encode: the commands the connection sends most.

struct Command {
  std::vector<std::string> argv;
};

const std::vector<Command>& commands() {
  static const std::vector<Command> c = {
      {{"PUBLISH", "ecc:{t}:coh", payload29()}},
      {{"GET", "ecc:{t}:USR0KHTOWnGLuC"}},
      {{"SET", "ecc:{t}:USR0KHTOWnGLuC", std::string(100, 'v')}},
      {{"EVALSHA", "0123456789abcdef0123456789abcdef01234567", "1", "ecc:{t}:USR0KHTOWnGLuC",
        payload29(), "30000"}},
  };
  return c;
}

constexpr std::size_t kPipeline = 64;  // commands encoded per iteration (one pipeline)

void BM_RespEncoder_EncodePipeline(benchmark::State& state) {
  const auto& cmds = commands();
  std::vector<std::vector<std::string_view>> views;
  for (const auto& c : cmds) views.emplace_back(c.argv.begin(), c.argv.end());
  RespEncoder enc;
  std::size_t bytes = 0;
  for (auto _ : state) {
    enc.clear();
    for (std::size_t i = 0; i < kPipeline; ++i) enc.command_argv(views[i % views.size()]);
    benchmark::DoNotOptimize(enc.view().data());
    bytes += enc.size();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(kPipeline * state.iterations()));
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
}

// The typed call site: command("EXPIRE", key, 30) with an integer argument.
void BM_RespEncoder_EncodeVariadic(benchmark::State& state) {
  RespEncoder enc;
  const std::string key = "ecc:{t}:USR0KHTOWnGLuC";
  std::size_t bytes = 0;
  for (auto _ : state) {
    enc.clear();
    for (std::size_t i = 0; i < kPipeline; ++i) {
      enc.command("PUBLISH", "ecc:{t}:coh", payload29());
      ++i;
      enc.command("PEXPIRE", key, 30000);
    }
    benchmark::DoNotOptimize(enc.view().data());
    bytes += enc.size();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(kPipeline * state.iterations()));
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
}

// Baseline: hiredis formats each command into a fresh malloc'd buffer; a pipeline then appends
// it to the send buffer (as hiredis's own redisAppendFormattedCommand does) and frees it.
void BM_Hiredis_FormatCommandArgvPipeline(benchmark::State& state) {
  const auto& cmds = commands();
  std::vector<std::vector<const char*>> argv;
  std::vector<std::vector<std::size_t>> lens;
  for (const auto& c : cmds) {
    argv.emplace_back();
    lens.emplace_back();
    for (const auto& a : c.argv) {
      argv.back().push_back(a.data());
      lens.back().push_back(a.size());
    }
  }
  std::string out;
  out.reserve(64 * 1024);
  std::size_t bytes = 0;
  for (auto _ : state) {
    out.clear();
    for (std::size_t i = 0; i < kPipeline; ++i) {
      const std::size_t k = i % argv.size();
      char* cmd = nullptr;
      const int n = redisFormatCommandArgv(&cmd, static_cast<int>(argv[k].size()), argv[k].data(),
                                           lens[k].data());
      out.append(cmd, static_cast<std::size_t>(n));
      redisFreeCommand(cmd);
    }
    benchmark::DoNotOptimize(out.data());
    bytes += out.size();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(kPipeline * state.iterations()));
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
}

BENCHMARK(BM_RespEncoder_EncodePipeline);
BENCHMARK(BM_RespEncoder_EncodeVariadic);
BENCHMARK(BM_Hiredis_FormatCommandArgvPipeline);

}  // namespace

BENCHMARK_MAIN();
