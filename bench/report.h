// The output of one `bench` run: the terminal table (with the GPU speedup table), the
// JSON report (schema "kiln-bench/1", written through core/json.h) and the CSV, plus the
// small number formats they share. Bodies in bench/report.cpp (library kiln_bench_spec).
#pragma once
#include <cstdint>
#include <string>
#include <vector>
#include "bench/workload_spec.h"

namespace kiln::bench {

/// One number through a printf format: fmt("%.2f", x).
std::string fmt(const char* f, double v);
/// Bytes as MiB with one decimal; "-" when unknown (negative).
std::string mib(int64_t bytes);
/// Human-readable rate: 37536 -> "37.5k".
std::string si(double v);
/// Pads / right-aligns the columns of a table (first row = header) for the terminal.
std::string format_columns(const std::vector<std::vector<std::string>>& rows, size_t left_cols);
/// The GPU speedup table: every cuda result with a cpu result of the same framework,
/// workload, shapes, batch and precision; "" when there is none.
std::string format_speedup(const std::vector<Result>& results);
/// The terminal table of a report: one row per result, then the notes on the columns.
std::string format_table(const Report& rep);
/// CSV columns, one row per result (no field contains a comma: statuses are sanitised).
const char* csv_header();
/// The report as CSV: csv_header(), then one row per result.
std::string to_csv(const Report& rep);
/// Writes text to path atomically (temp file in the same folder, then rename); throws
/// std::runtime_error naming the path on failure.
void write_text_atomic(const std::string& path, const std::string& text);
/// The report as JSON (schema "kiln-bench/1": meta fields, devices[], results[]).
std::string to_json(const Report& rep);

}  // namespace kiln::bench
