// SPDX-License-Identifier: MIT
// The ring's knobs and their checked ranges (docs/configuration.md): capacity, full policy, and the
// wait strategy of each side. Bad configuration throws at construction with a message naming the
// knob; nothing here is on a hot path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace echo::ring {

// How a side waits once it has nothing to do (the consumer: no work; a block-policy producer:
// no space). Each spends `spin_budget` polls first; then kSpin keeps polling, kYield calls
// sched_yield between polls, kPark sleeps in a futex until signalled.
enum class WaitStrategy : std::uint8_t { kSpin, kYield, kPark };

// What a publish does when the ring is full: never block the io thread, never lose a message
// silently.
//   kDrop:  refuse, count the item in `dropped`; never blocks, never overwrites.
//   kFlush: as kDrop, and raise the sticky flush-pending flag (which rings the consumer's
//           doorbell); the consumer takes it after it drains and drops every row of its table,
//           so a lost message costs a refill.
//   kBlock: `publish` spins then waits (per the producer's WaitConfig) until space; `stalls`
//           counts the publishes that had to wait. `try_` verbs refuse uncounted.
enum class FullPolicy : std::uint8_t { kDrop, kFlush, kBlock };

struct WaitConfig {
  WaitStrategy strategy = WaitStrategy::kPark;
  // Polls before the strategy proper starts; each poll is one pause instruction plus one check.
  std::uint32_t spin_budget = 2048;
  // Park only: let producers skip the store-load fence, the parking consumer paying a
  // membarrier(2) instead (used when the kernel offers it). Off by default: each park then IPIs
  // every CPU running a thread of the process, and with a writer that parks per message (spin 0,
  // TableSpec's default) that lands on the service's own busy-polling threads: p99.9 iteration
  // time 4.4x the symmetric handshake's on a pinned poller (bench/busy_poll_bench.cc), to save
  // under a nanosecond per publish (BM_SpscRing_PublishDrain). Turn it on for a process whose
  // other threads do not mind (the stress tests run both).
  bool asymmetric_barrier = false;
  // Park only, when asymmetric_barrier is off: each ring switches to the light publish by itself
  // while its consumer keeps up with continuous traffic (kLightAfter publishes in a row found it
  // awake), and back to the seq_cst handshake at its first publish that finds the consumer parked
  // or parking; the consumer pays the membarrier only at a park while some ring is light (Doorbell,
  // "Adaptive mode"). So a consumer that parks per message (the writer's spin 0 under sparse
  // traffic) never IPIs, and a ring under continuous traffic saves the full fence on every
  // publish: the store that waits for the consumer's polling core to give the tail line back,
  // 120 ns of the 1-item publish on the CI VM (ring_vs_rwq 0.02x before, see spsc_ring.h). Ignored
  // where the kernel does not offer membarrier (the handshake stays seq_cst). Default on.
  bool adaptive_barrier = true;
  // Consumer only, and only with a spin phase (spin_budget > 0): once the consumer's waits keep
  // finding work within their first few polls (Doorbell::kGatherAfter waits in a row: a producer
  // publishing item after item while the consumer keeps catching up), each wait first pauses
  // `gather` times without looking, so the producer fills a batch undisturbed instead of handing
  // the tail's cache line over after every item; the first wait that then finds nothing soon
  // ends it. 0 = off; 0 .. 65536 pauses (512: ~4.8 us on the CI VM, up to that much added to an
  // item's wait in that regime only; ping-pong traffic never enters it). Why: ring_vs_rwq (1-item
  // publishes) was 0.02x moodycamel's ReaderWriterQueue, whose slower consumer stays behind and
  // takes ~255 items per look; 1.22-1.27x with it (128: 0.86x, 256: 1.03-1.13x;
  // docs/notebook.md). The engine's writer has no spin phase by default (TableSpec::writer_wait),
  // so this does not touch the lanes.
  std::uint32_t gather = 512;
};

// The largest WaitConfig::gather accepted.
inline constexpr std::uint32_t kMaxGather = 65536;

struct RingConfig {
  // Power of two >= 2; 4096 is the default of docs/wire.md, "The ring".
  std::size_t capacity = 4096;
  FullPolicy full_policy = FullPolicy::kDrop;
  // How a block-policy producer waits for space (ignored by the other policies).
  WaitConfig producer_wait{};
  // How the consumer waits when the ring owns its doorbell; a ring built on a shared Doorbell
  // uses that doorbell's config instead.
  WaitConfig consumer_wait{};
};

constexpr std::string_view to_string(WaitStrategy s) noexcept {
  switch (s) {
    case WaitStrategy::kSpin:
      return "spin";
    case WaitStrategy::kYield:
      return "yield";
    case WaitStrategy::kPark:
      return "park";
  }
  return "?";
}

constexpr std::string_view to_string(FullPolicy p) noexcept {
  switch (p) {
    case FullPolicy::kDrop:
      return "drop";
    case FullPolicy::kFlush:
      return "flush";
    case FullPolicy::kBlock:
      return "block";
  }
  return "?";
}

// Largest capacity accepted: keeps capacity * sizeof(T) far from overflow and the mask in 32 bits.
inline constexpr std::size_t kMaxCapacity = std::size_t{1} << 30;

// Throws std::invalid_argument naming the knob and its allowed range.
inline void validate(const RingConfig& config) {
  const std::size_t c = config.capacity;
  if (c < 2 || (c & (c - 1)) != 0) {
    throw std::invalid_argument("ring_capacity must be a power of two >= 2, got " +
                                std::to_string(c));
  }
  if (c > kMaxCapacity) {
    throw std::invalid_argument("ring_capacity must be at most 2^30 (1073741824), got " +
                                std::to_string(c));
  }
  const auto policy = static_cast<unsigned>(config.full_policy);
  if (policy > static_cast<unsigned>(FullPolicy::kBlock)) {
    throw std::invalid_argument("ring_full_policy must be drop, flush or block, got " +
                                std::to_string(policy));
  }
  for (const WaitConfig* w : {&config.producer_wait, &config.consumer_wait}) {
    const auto s = static_cast<unsigned>(w->strategy);
    if (s > static_cast<unsigned>(WaitStrategy::kPark)) {
      throw std::invalid_argument("ring_wait_strategy must be spin, yield or park, got " +
                                  std::to_string(s));
    }
    if (w->gather > kMaxGather) {
      throw std::invalid_argument("ring_wait_gather must be 0..65536 pauses, got " +
                                  std::to_string(w->gather));
    }
  }
}

}  // namespace echo::ring
