// SPDX-License-Identifier: MIT
// The engine's internals as the project's own tests, drill and profiling reach them: a table's
// writer (its map, its rings' and its own stats). Not for applications: nothing here is a
// stable interface.
#pragma once

#include <echo/engine/engine.h>
#include <echo/engine/internal/table_writer.h>
