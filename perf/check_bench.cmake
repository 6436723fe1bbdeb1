# SPDX-License-Identifier: MIT
# Checks a `echostore bench --json` file so the command cannot silently rot: it parses, names the
# machine, compiler and commit, and holds every row of the suite with a finite figure and baseline
# and a finite, positive ratio (a non-finite double is written as null, which fails here). A figure
# may be 0 only in a row whose ratio_offset keeps the ratio defined (the neighbour rows' gap
# counts); without one, a 0 makes the ratio 0 or null and fails. The neighbour rows are expected
# only on 2 CPUs or more (they need a CPU for their spinner). CMake's own JSON parser, so the check
# needs nothing the build does not.
#   cmake -DJSON=FILE -P perf/check_bench.cmake
cmake_minimum_required(VERSION 3.25)
if(NOT DEFINED JSON OR NOT EXISTS "${JSON}")
  message(FATAL_ERROR "check_bench: no JSON file (-DJSON=FILE)")
endif()
file(READ "${JSON}" doc)
foreach(key command commit compiler server)
  string(JSON v ERROR_VARIABLE err GET "${doc}" ${key})
  if(err OR v STREQUAL "")
    message(FATAL_ERROR "check_bench: '${key}' missing: ${err}")
  endif()
endforeach()
foreach(key cores model kernel)
  string(JSON v ERROR_VARIABLE err GET "${doc}" machine ${key})
  if(err OR v STREQUAL "")
    message(FATAL_ERROR "check_bench: machine.${key} missing: ${err}")
  endif()
endforeach()
set(expected ring_vs_boost ring_vs_rwq l1_vs_flat_map l1_vs_shared_mutex l1_typed_hit_vs_flat_map
    l1_typed_hit_churn_vs_flat_map resp3_vs_hiredis
    resp3_mixed_vs_hiredis broadcast_vs_floor job_vs_broadcast job_applied_vs_broadcast
    bare_applied_vs_broadcast remembered_vs_job publish_vs_hiredis_eval publish_vs_hiredis_eval_job
    publish_async_caller_vs_publish
    journal_vs_sqlite hit_ratio_zipf0.7_1pct hit_ratio_zipf0.7_10pct hit_ratio_zipf0.99_1pct
    hit_ratio_zipf0.99_10pct hit_ratio_scan_mix hit_ratio_shifting_hot_set hit_ratio_zipf1.2_1pct
    hit_ratio_zipf1.2_10pct)
string(JSON cores GET "${doc}" machine cores)
if(cores GREATER_EQUAL 2)
  list(APPEND expected neighbour_gaps_vs_alone_idle neighbour_gaps_vs_alone_sparse
       neighbour_gaps_vs_alone_burst)
endif()
string(JSON n ERROR_VARIABLE err LENGTH "${doc}" rows)
if(err)
  message(FATAL_ERROR "check_bench: no rows array: ${err}")
endif()
set(seen "")
math(EXPR last "${n} - 1")
foreach(i RANGE ${last})
  string(JSON id GET "${doc}" rows ${i} id)
  string(JSON offset ERROR_VARIABLE no_offset GET "${doc}" rows ${i} ratio_offset)
  foreach(field ours_median baseline_median ratio)
    string(JSON type TYPE "${doc}" rows ${i} ${field})
    string(JSON v GET "${doc}" rows ${i} ${field})
    if(NOT type STREQUAL "NUMBER")
      message(FATAL_ERROR "check_bench: row ${id}: ${field} is ${type} '${v}', not a finite number")
    endif()
    if(field STREQUAL "ratio" OR no_offset)
      if(NOT v GREATER 0)
        message(FATAL_ERROR "check_bench: row ${id}: ${field} is '${v}', not positive")
      endif()
    elseif(v LESS 0)
      message(FATAL_ERROR "check_bench: row ${id}: ${field} is '${v}', negative")
    endif()
  endforeach()
  string(JSON placement GET "${doc}" rows ${i} placement)
  if(placement STREQUAL "")
    message(FATAL_ERROR "check_bench: row ${id} names no thread placement")
  endif()
  string(JSON ratio GET "${doc}" rows ${i} ratio)
  message(STATUS "check_bench: ${id} ratio ${ratio}")
  list(APPEND seen ${id})
endforeach()
foreach(id IN LISTS expected)
  if(NOT id IN_LIST seen)
    message(FATAL_ERROR "check_bench: row ${id} missing")
  endif()
endforeach()
message(STATUS "check_bench: ${n} rows, every one finite")
