// SPDX-License-Identifier: MIT
// The job consumer's exported in-flight gauge: a difference of counters another thread moves, so
// a racing read may see more settled than taken; the gauge then says 0, never 2^64 - 1.
#include <echo/engine/internal/job_consumer.h>
#include <gtest/gtest.h>

#include <cstdint>

namespace echo::engine {
namespace {

TEST(JobConsumerStats, InFlightIsTakenLessSettled) {
  EXPECT_EQ(in_flight_of(10, 7), 3u);
  EXPECT_EQ(in_flight_of(7, 7), 0u);
  EXPECT_EQ(in_flight_of(0, 0), 0u);
}

TEST(JobConsumerStats, InFlightNeverWrapsWhenARacingReadSawMoreSettledThanTaken) {
  // claimed read as 5, then one more job claimed and applied before applied was read (6).
  EXPECT_EQ(in_flight_of(5, 6), 0u);
  EXPECT_EQ(in_flight_of(0, UINT64_MAX), 0u);
}

}  // namespace
}  // namespace echo::engine
