// SPDX-License-Identifier: MIT
#include <echo/engine/errc.h>

#include <string>

namespace echo::engine {
namespace {

class Category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "echostore"; }
  std::string message(int ev) const override {
    return std::string(to_string(static_cast<Errc>(ev)));
  }
};

}  // namespace

std::string_view to_string(Errc e) noexcept {
  switch (e) {
    case Errc::kNoSuchCache:
      return "no_such_cache";
    case Errc::kKind:
      return "kind";
    case Errc::kCorruptL2Frame:
      return "corrupt_l2_frame";
    case Errc::kLoaderFailed:
      return "loader_failed";
    case Errc::kTimeout:
      return "timeout";
    case Errc::kStopped:
      return "stopped";
    case Errc::kContended:
      return "contended";
    case Errc::kUnexpectedReply:
      return "unexpected_reply";
    case Errc::kNoLiveMember:
      return "no_live_member";
    case Errc::kWrongMode:
      return "wrong_mode";
    case Errc::kMemberConflict:
      return "member_conflict";
    case Errc::kHostUnresolved:
      return "host_unresolved";
    case Errc::kBadValue:
      return "bad_value";
    case Errc::kBadKey:
      return "bad_key";
    case Errc::kWrongType:
      return "wrong_type";
    case Errc::kLoaderTimeout:
      return "loader_timeout";
    case Errc::kTrackingRefused:
      return "tracking_refused";
    case Errc::kNotVersioned:
      return "not_versioned";
    case Errc::kNoFreeNode:
      return "no_free_node";
    case Errc::kNodeTaken:
      return "node_taken";
    case Errc::kNoNodeLease:
      return "no_node_lease";
    case Errc::kSentinelUnknownMaster:
      return "sentinel_unknown_master";
    case Errc::kNoSentinel:
      return "no_sentinel";
    case Errc::kNotMaster:
      return "not_master";
    case Errc::kMetricsListen:
      return "metrics_listen";
    case Errc::kMiss:
      return "miss";
    case Errc::kMixedFrames:
      return "mixed_frames";
    case Errc::kAbsent:
      return "absent";
    case Errc::kNoReceipts:
      return "no_receipts";
    case Errc::kNoReaderSlot:
      return "no_reader_slot";
    case Errc::kJournalIo:
      return "journal_io";
  }
  return "unknown";
}

const std::error_category& engine_category() noexcept {
  static const Category category;
  return category;
}

}  // namespace echo::engine
