// SPDX-License-Identifier: MIT
// An integer out of a reply: a RESP integer, or its decimal text (the lane scripts answer the
// server's time and a job's token either way). Shared by the job consumer's two files: its beat
// (job_consumer.cc) and its claims (job_delivery.cc).
#pragma once

#include <charconv>
#include <cstdint>

#include <echo/io/resp3_value.h>

namespace echo::engine {

// 0 when the text is no number.
inline std::int64_t as_int(const io::Resp3Value& v) {
  if (v.type() == io::Resp3Type::integer) return v.integer();
  std::int64_t n = 0;
  const auto s = v.str();
  std::from_chars(s.data(), s.data() + s.size(), n);
  return n;
}

}  // namespace echo::engine
