// SPDX-License-Identifier: MIT
// Names of the decoder's typed errors, as logs and counters print them. Kept apart from the
// state machine so resp3_decoder.cc stays one concept.
#include <echo/io/resp3_decoder.h>

namespace echo::io {

std::string_view to_string(Resp3Error error) noexcept {
  switch (error) {
    case Resp3Error::none:
      return "none";
    case Resp3Error::bad_type:
      return "bad_type";
    case Resp3Error::bad_integer:
      return "bad_integer";
    case Resp3Error::integer_overflow:
      return "integer_overflow";
    case Resp3Error::bad_length:
      return "bad_length";
    case Resp3Error::missing_crlf:
      return "missing_crlf";
    case Resp3Error::bad_double:
      return "bad_double";
    case Resp3Error::bad_boolean:
      return "bad_boolean";
    case Resp3Error::bad_null:
      return "bad_null";
    case Resp3Error::bad_big_number:
      return "bad_big_number";
    case Resp3Error::bad_verbatim:
      return "bad_verbatim";
    case Resp3Error::streamed_unsupported:
      return "streamed_unsupported";
    case Resp3Error::depth_exceeded:
      return "depth_exceeded";
    case Resp3Error::aggregate_too_long:
      return "aggregate_too_long";
    case Resp3Error::frame_too_many_elements:
      return "frame_too_many_elements";
    case Resp3Error::bulk_too_long:
      return "bulk_too_long";
    case Resp3Error::line_too_long:
      return "line_too_long";
    case Resp3Error::frame_too_large:
      return "frame_too_large";
  }
  return "unknown";
}

}  // namespace echo::io
