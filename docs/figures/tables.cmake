# SPDX-License-Identifier: MIT
# The generated figure tables: each one's name (its markers in README.md or docs/*.md), layout,
# dated JSON and rows. scripts/render-figures.sh renders them; `--check` (scripts/test.sh) fails
# when a committed table differs from its JSON. A new run: commit its JSON here (NAME-YYYY-MM-DD,
# the date of the run), point the variable below at it, run scripts/render-figures.sh.
set(bench docs/figures/bench-2026-12-05.json)          # echostore bench --json F
set(churn docs/figures/bench-churn-2026-12-05.json)    # echostore bench --only churn --json F
set(publish docs/figures/bench-publish-2026-12-05.json)  # echostore bench --only publish --json F
set(load docs/figures/bench-load-2026-12-05.json)      # echostore bench --load --json F
set(peers docs/figures/bench-peers-2026-12-05.json)    # echostore bench --peers --json F
set(referee docs/figures/referee-2026-12-05.json)      # echostore referee --peers --json F

# README.md, "Headline figures".
figure_table(headline headline)
headline_row(headline ${bench} l1_typed_hit_vs_flat_map
  "a typed L1 hit (`Table<T>::read`'s `L1Map::visit`, in place, 0 allocations), writer idle, vs an unsynchronised flat map")
headline_row(headline ${bench} l1_typed_hit_churn_vs_flat_map
  "the same hit while the writer applies 1M drops/s")
headline_row(headline ${bench} broadcast_vs_floor
  "broadcast lane: PUBLISH -> row gone on the other node, vs a bare subscriber's PUBLISH -> message")
headline_row(headline ${bench} job_applied_vs_broadcast
  "job lane (at-least-once, with its lead) vs broadcast lane, send -> row gone at the reader's writer")
headline_row(headline ${peers} job_lane_vs_bullmq_throughput_c1
  "job lane vs BullMQ (Node.js, same server, same run): a 10,000-job backlog drained, 1 concurrent")
headline_row(headline ${peers} job_lane_vs_bullmq_latency_p50
  "job lane vs BullMQ: one job, send -> applied, p50")
headline_row(headline ${referee} stale_reads
  "stale reads under injected fill races and reordered messages, one oracle for every contestant")

# docs/benchmarks.md, one table per part of the suite.
figure_table(micro bench ${bench} ring_vs_boost ring_vs_rwq l1_vs_flat_map l1_vs_shared_mutex
  l1_typed_hit_vs_flat_map l1_typed_hit_churn_vs_flat_map resp3_vs_hiredis resp3_mixed_vs_hiredis)
figure_table(lanes bench ${bench} broadcast_vs_floor job_vs_broadcast job_applied_vs_broadcast
  bare_applied_vs_broadcast remembered_vs_job epoll_vs_uring journal_vs_sqlite tls_vs_plain)
figure_table(publish bench ${publish} publish_vs_hiredis_eval publish_vs_hiredis_eval_job
  publish_async_caller_vs_publish)
figure_table(open_loop bench ${load})
figure_table(io_threads bench ${bench} io_threads_2_vs_1)
figure_table(neighbour bench ${bench} neighbour_gaps_vs_alone_idle neighbour_gaps_vs_alone_sparse
  neighbour_gaps_vs_alone_burst)
figure_table(churn bench ${churn})
figure_table(peers bench ${peers})
figure_table(hit_ratio contenders ${bench} hit_ratio_zipf0.7_1pct hit_ratio_zipf0.7_10pct
  hit_ratio_zipf0.99_1pct hit_ratio_zipf0.99_10pct hit_ratio_zipf1.2_1pct hit_ratio_zipf1.2_10pct
  hit_ratio_scan_mix hit_ratio_shifting_hot_set)
figure_table(referee referee ${referee})

# docs/benchmarks.md, "The suite's goals": each row's ratio against its goal.
figure_table(goals goals)
goal(goals ${bench} ring_vs_boost >= 1.5)
goal(goals ${bench} ring_vs_rwq >= 1.0)
goal(goals ${bench} l1_typed_hit_vs_flat_map <= 1.3)
goal(goals ${bench} l1_typed_hit_churn_vs_flat_map <= 1.3)
goal(goals ${bench} broadcast_vs_floor <= 1.1)
goal(goals ${bench} job_vs_broadcast <= 1.3)
goal(goals ${bench} remembered_vs_job <= 1.3)
goal(goals ${bench} journal_vs_sqlite <= 1.3)
goal(goals ${bench} tls_vs_plain <= 1.1)
goal(goals ${publish} publish_vs_hiredis_eval <= 1.3)
goal(goals ${publish} publish_vs_hiredis_eval_job <= 1.3)
goal(goals ${bench} neighbour_gaps_vs_alone_idle <= 1.05)
goal(goals ${bench} neighbour_gaps_vs_alone_sparse <= 1.05)
goal(goals ${bench} neighbour_gaps_vs_alone_burst <= 1.05)
goal(goals ${load} open_loop_p999_vs_floor_10000 <= 2)
goal(goals ${load} open_loop_p999_vs_floor_50000 <= 2)
goal(goals ${load} open_loop_p999_vs_floor_100000 <= 2)
goal(goals ${churn} churn_reads_vs_quiet_1k >= 0.9)
goal(goals ${churn} churn_reads_vs_quiet_10k >= 0.9)
goal(goals ${churn} churn_reads_vs_quiet_50k >= 0.9)
goal(goals ${churn} carried_visible_vs_floor <= 1.2)
goal(goals ${peers} job_lane_vs_bullmq_throughput_c1 >= 3)
goal(goals ${peers} job_lane_vs_bullmq_throughput_c16 >= 3)
goal(goals ${peers} job_lane_vs_bullmq_latency_p50 <= 0.3)
goal(goals ${peers} job_lane_vs_bullmq_latency_p99 <= 0.3)
goal(goals ${referee} tracking_over_broadcast_p50 <= 1.1)
