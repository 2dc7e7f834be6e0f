// Helpers shared by the fuzz harnesses of tests/fuzz: a per-process temp folder for
// loaders that only take a path, and the one rule of every harness (kiln::Error is the
// expected outcome of bad bytes; anything else escapes and crashes the fuzzer).
#pragma once
#include <unistd.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include "kiln/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace kiln_fuzz {

/// A folder of this process (created once, removed at exit) for the files harnesses write.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("kiln_fuzz_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch_dir(), ec);
    });
    return d;
  }();
  return dir;
}

/// Writes the input to scratch_dir()/name (replacing the previous input) and returns its path.
inline std::string write_input(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = (scratch_dir() / name).string();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(data, 1, size, f) != size || std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::abort();  // the harness itself is broken, not the input
  }
  return path;
}

/// Runs f; a kiln::Error is the expected answer to bad input and is swallowed.
template <class F>
void expect_errors(F&& f) {
  try {
    f();
  } catch (const kiln::Error&) {
  }
}

/// A property every accepted input must have; a failure aborts (the fuzzer reports it).
inline void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "kiln fuzz: property violated: %s\n", what);
    std::abort();
  }
}

}  // namespace kiln_fuzz
