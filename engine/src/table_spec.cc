// SPDX-License-Identifier: MIT
// The checked ranges of a table's knobs.
#include <echo/engine/table_spec.h>

#include <algorithm>
#include <thread>

#include <echo/table/coherence_frame.h>
#include <echo/table/names.h>

namespace echo::engine {
namespace {

[[noreturn]] void refuse(const TableSpec& spec, const std::string& what) {
  throw ConfigError("table '" + spec.name + "': " + what);
}

template <class T>
void check_range(const TableSpec& spec, std::string_view knob, T value, T lo, T hi) {
  if (value < lo || value > hi) {
    refuse(spec, std::string(knob) + " must lie in " + std::to_string(lo) + ".." +
                     std::to_string(hi) + ", got " + std::to_string(value));
  }
}

}  // namespace

std::string_view to_string(Carry c) noexcept {
  switch (c) {
    case Carry::kAuto:
      return "auto";
    case Carry::kOff:
      return "off";
    case Carry::kUpdate:
      return "update";
    case Carry::kUpsert:
      return "upsert";
  }
  return "?";
}

Carry carry_of(const TableSpec& spec) noexcept {
  if (spec.carry != Carry::kAuto) return spec.carry;
  if (spec.coherence != CoherenceMode::kBroadcast && spec.coherence != CoherenceMode::kJob) {
    return Carry::kOff;
  }
  return spec.keys == KeyKind::kText ? Carry::kUpdate : Carry::kOff;
}

std::string_view to_string(CoherenceMode m) noexcept {
  switch (m) {
    case CoherenceMode::kNone:
      return "none";
    case CoherenceMode::kBroadcast:
      return "broadcast";
    case CoherenceMode::kJob:
      return "job";
    case CoherenceMode::kTracking:
      return "tracking";
  }
  return "?";
}

std::string_view to_string(L2Format f) noexcept {
  switch (f) {
    case L2Format::kFramed:
      return "framed";
    case L2Format::kRaw:
      return "raw";
  }
  return "?";
}

std::string_view to_string(DisconnectPolicy p) noexcept {
  switch (p) {
    case DisconnectPolicy::kFlush:
      return "flush";
    case DisconnectPolicy::kServeStale:
      return "serve_stale";
  }
  return "?";
}

const table::BrandedId& Key::id() const {
  if (!id_) throw std::logic_error("Key::id(): '" + std::string(text_) + "' is a text key");
  return *id_;
}

namespace {

void validate_carry(const TableSpec& spec) {
  if (spec.carry > Carry::kUpsert) refuse(spec, "carry must be auto, off, update or upsert");
  check_range<std::size_t>(spec, "carry_max_bytes", spec.carry_max_bytes, 1,
                           table::kMaxCarriedValue);
  const std::size_t least =
      2 * (spec.carry_max_bytes + table::kCarriedOverhead + table::kMaxTextKey);
  check_range<std::size_t>(spec, "carry_arena_bytes", spec.carry_arena_bytes, least,
                           std::size_t{1} << 30);
  // The shared queue feeds the original's consumers, which read 29-byte messages only.
  if (carry_of(spec) != Carry::kOff && spec.job_shared_queue) {
    refuse(spec,
           "carry " + std::string(to_string(spec.carry)) +
               " cannot go with job_shared_queue: the original's consumers on ecc.coh.<t> read "
               "29-byte messages only (set carry off, or job_shared_queue false)");
  }
}

}  // namespace

namespace {

// The name, the kind and the loader.
void validate_identity(const TableSpec& spec) {
  if (auto ok = table::check_table_name(spec.name); !ok) {
    throw ConfigError("table name '" + spec.name + "' is refused (" +
                      std::string(table::to_string(ok.error())) +
                      "): 1..200 bytes of UTF-8, no braces, spaces or control bytes");
  }
  const bool kind_ok =
      spec.kind.size() == 3 &&
      std::all_of(spec.kind.begin(), spec.kind.end(), [](char c) { return c >= 'A' && c <= 'Z'; });
  if (!kind_ok) {
    refuse(spec, "kind must be exactly 3 bytes A-Z, got '" + spec.kind + "'" +
                     (spec.kind.empty() && spec.keys == KeyKind::kBranded
                          ? " (a table of branded ids names the kind its ids carry)"
                          : ""));
  }
  check_range<int>(spec, "loader_threads", spec.loader_threads, 1, 64);
  if (const auto t = spec.loader_timeout.count(); t != 0 && (t < 1 || t > 3'600'000)) {
    refuse(spec,
           "loader_timeout must be 0 (the engine's get_timeout) or lie in 1..3,600,000 ms, got " +
               std::to_string(t));
  }
}

// L1: time to live, size and byte bounds, eviction, sweeps.
void validate_l1(const TableSpec& spec) {
  check_range<std::int64_t>(spec, "ttl_ms", spec.ttl_ms, 1, std::int64_t{1} << 40);
  check_range<std::int64_t>(spec, "absent_ttl_ms", spec.absent_ttl_ms, 0, std::int64_t{1} << 40);
  if (!(spec.jitter >= 0.0 && spec.jitter <= 0.5)) {
    refuse(spec, "jitter must lie in 0.0..0.5, got " + std::to_string(spec.jitter));
  }
  // 2^26, not more: the L1 map allocates and zeroes its whole index (a power of two >= 2 *
  // max_size buckets of 8 bytes, at most 2^26) at construction, and sweeps walk all of it;
  // 2^26 buckets are 512 MiB of index; 2^30 was 8 GiB before the first row (L1Config::max_size).
  check_range<std::size_t>(spec, "max_size", spec.max_size, 1, std::size_t{1} << 26);
  if (spec.max_bytes != 0) {
    check_range<std::size_t>(spec, "max_bytes", spec.max_bytes, 4096, std::size_t{1} << 44);
  }
  if (spec.eviction > Eviction::kSkip) refuse(spec, "eviction must be s3fifo, lru, clock or skip");
  check_range<std::int64_t>(spec, "sweep_ms", spec.sweep_ms, 1, 3'600'000);
}

// The lane: its ring, coherence mode, L2 format, clocks and keys.
void validate_lane(const TableSpec& spec) {
  ring::RingConfig ring_config;
  ring_config.capacity = spec.ring_capacity;
  ring_config.full_policy = spec.full_policy;
  ring_config.consumer_wait = spec.writer_wait;
  try {
    ring::validate(ring_config);
  } catch (const std::invalid_argument& e) {
    refuse(spec, e.what());
  }
  check_range<std::size_t>(spec, "max_batch", spec.max_batch, 1, spec.ring_capacity);
  if (spec.coherence > CoherenceMode::kTracking) {
    refuse(spec, "coherence must be none, broadcast, job or tracking");
  }
  if (spec.l2_format == L2Format::kRaw) {
    // Only the tracking lane needs no version in L2: the others order messages by it.
    if (spec.coherence != CoherenceMode::kTracking) {
      refuse(spec,
             "l2_format raw needs coherence tracking (the other lanes order by the version "
             "in L2's frame), got coherence " +
                 std::string(to_string(spec.coherence)));
    }
  } else if (spec.l2_format != L2Format::kFramed) {
    refuse(spec, "l2_format must be framed or raw");
  }
  if (const auto h = spec.fill_hold.count(); h != 0) {
    check_range<std::int64_t>(spec, "fill_hold (us)", h, 1, 10'000'000);
  }
  if (spec.l1_clock > L1Clock::kSweep) {
    refuse(spec, "l1_clock must be writer, coarse, exact or sweep");
  }
  check_range<std::int64_t>(spec, "clock_tick_ms", spec.clock_tick_ms, 1, 1000);
  if (spec.keys > KeyKind::kText) refuse(spec, "keys must be branded or text");
  if (spec.disconnect == DisconnectPolicy::kServeStale) {
    check_range<std::int64_t>(spec, "serve_stale_max_ms", spec.serve_stale_max_ms, 1, 86'400'000);
  } else if (spec.disconnect != DisconnectPolicy::kFlush) {
    refuse(spec, "disconnect must be flush or serve_stale");
  }
}

// The job lane's consumer.
void validate_job(const TableSpec& spec) {
  check_range<std::int64_t>(spec, "job_lease_ms", spec.job_lease_ms, 10, 3'600'000);
  check_range<std::int64_t>(spec, "job_beat_ms", spec.job_beat_ms, 10, 60'000);
  check_range<std::int64_t>(spec, "job_retry_delay_ms", spec.job_retry_delay_ms, 0, 3'600'000);
  check_range<int>(spec, "job_max_attempts", spec.job_max_attempts, 1, 1000);
  // Credits bound the job lane's ring; a broadcast table with a small ring (gate G1's: 512) never
  // uses them, so the default 1024 must not refuse it.
  if (spec.coherence == CoherenceMode::kJob) {
    check_range<std::size_t>(spec, "job_credits", spec.job_credits, 1, spec.ring_capacity);
  }
}

}  // namespace

TableSpec text_table(std::string name, CoherenceMode lane) {
  TableSpec spec;
  spec.name = std::move(name);
  spec.keys = KeyKind::kText;
  spec.kind = std::string(kTextKind);
  spec.coherence = lane;
  return spec;
}

void validate(const TableSpec& spec) {
  validate_identity(spec);
  validate_l1(spec);
  validate_lane(spec);
  validate_job(spec);
  validate_carry(spec);
  if (spec.on_miss > OnMiss::kRefill) refuse(spec, "on_miss must be load or refill");
  const int cpus = static_cast<int>(std::thread::hardware_concurrency());
  if (spec.writer_cpu < -1 || (cpus > 0 && spec.writer_cpu >= cpus)) {
    refuse(spec, "writer_cpu must be -1 (unpinned) or 0.." + std::to_string(cpus - 1) + ", got " +
                     std::to_string(spec.writer_cpu));
  }
}

}  // namespace echo::engine
