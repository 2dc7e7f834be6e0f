// Checks ptxas's resource report of every CUDA kernel of a kiln build (CTest
// ptxas_resources, CUDA builds only).
//
// The library's .cu files compile with --ptxas-options=-v through scripts/ptxas_log.sh,
// which keeps the report beside each object (<object>.ptxas.log). For every kernel and
// architecture this reads registers, spill stores/loads, the stack frame and static shared
// memory, prints the heaviest kernels, and fails (exit 1) when a kernel
//   - spills more than kMaxSpill bytes of registers to local memory (a few bytes are the
//     callee-saved registers around a call into CUDA's math library's slow paths, e.g.
//     double division or log in an unrolled elementwise loop: harmless, and listed),
//   - uses more than kMaxRegisters registers (fewer than two of kiln's 256-thread blocks
//     would fit on a multiprocessor),
//   - has a stack frame above kMaxStack bytes (a large local array in slow local memory), or
//   - uses more than 48 KiB of static shared memory (the limit without an opt-in),
// unless kAllowed lists it with the reason.
//
//   ptxas_resources <dir with the .ptxas.log files> [rows of the table]
#include <cxxabi.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

constexpr int kMaxSpill = 32;
constexpr int kMaxRegisters = 128;
constexpr int kMaxStack = 512;
constexpr int kMaxSmem = 48 * 1024;

// mangled-name substring -> why the kernel may pass a limit (keep short and explained)
const std::map<std::string, std::string> kAllowed = {};

struct Kernel {
  std::string mangled, name, arch, file;
  int regs = 0, stack = 0, spill_st = 0, spill_ld = 0, smem = 0;
};

std::string demangle(const std::string& m) {
  int status = 0;
  char* d = abi::__cxa_demangle(m.c_str(), nullptr, nullptr, &status);
  std::string s = status == 0 && d ? d : m;
  std::free(d);
  return s;
}

std::vector<Kernel> parse(const fs::path& log) {
  static const std::regex entry(R"(Compiling entry function '([^']+)' for '(sm_\d+a?)')");
  static const std::regex frame(R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  static const std::regex used(R"(Used (\d+) registers)");
  static const std::regex smem(R"((\d+) bytes smem)");
  std::vector<Kernel> out;
  std::ifstream in(log);
  std::string line, file = log.filename().string();
  file = file.substr(0, file.find('.'));
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_search(line, m, entry)) {
      out.push_back(Kernel{.mangled = m[1], .name = demangle(m[1]), .arch = m[2], .file = file});
    } else if (out.empty()) {
      continue;
    } else if (std::regex_search(line, m, frame)) {
      out.back().stack = std::stoi(m[1]);
      out.back().spill_st = std::stoi(m[2]);
      out.back().spill_ld = std::stoi(m[3]);
    } else if (std::regex_search(line, m, used)) {
      out.back().regs = std::stoi(m[1]);
      if (std::regex_search(line, m, smem)) out.back().smem = std::stoi(m[1]);
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: ptxas_resources <build dir> [table rows]\n");
    return 2;
  }
  const size_t rows = argc > 2 ? size_t(std::atoi(argv[2])) : 12;
  std::vector<Kernel> ks;
  size_t logs = 0;
  for (const auto& e : fs::recursive_directory_iterator(argv[1]))
    if (e.is_regular_file() && e.path().string().ends_with(".ptxas.log")) {
      ++logs;
      for (Kernel& k : parse(e.path())) ks.push_back(std::move(k));
    }
  if (ks.empty()) {
    std::printf("ptxas_resources: no ptxas report under %s (the CUDA build writes <object>.ptxas.log through "
                "scripts/ptxas_log.sh, its CUDA compiler launcher)\n", argv[1]);
    return 1;
  }
  std::string last_arch;
  for (const Kernel& k : ks) last_arch = std::max(last_arch, k.arch);
  std::vector<Kernel> last;
  for (const Kernel& k : ks)
    if (k.arch == last_arch) last.push_back(k);
  std::printf("ptxas_resources: %zu kernel compilations from %zu objects; limits: spills <= %d B, <= %d registers, "
              "stack frame <= %d B, static shared memory <= %d KiB\n\n",
              ks.size(), logs, kMaxSpill, kMaxRegisters, kMaxStack, kMaxSmem / 1024);
  std::sort(last.begin(), last.end(), [](const Kernel& a, const Kernel& b) {
    return a.regs != b.regs ? a.regs > b.regs : a.stack > b.stack;
  });
  std::printf("the %zu kernels with the most registers (%s):\n%5s %6s %6s  %-14s kernel\n", rows, last_arch.c_str(),
              "regs", "stack", "smem", "file");
  for (size_t i = 0; i < std::min(rows, last.size()); ++i)
    std::printf("%5d %6d %6d  %-14s %.110s\n", last[i].regs, last[i].stack, last[i].smem, last[i].file.c_str(),
                last[i].name.c_str());
  int with_stack = 0, max_stack = 0;
  for (const Kernel& k : last)
    if (k.stack > 0) {
      ++with_stack;
      max_stack = std::max(max_stack, k.stack);
    }
  std::printf("\n%d of %zu kernels have a stack frame (local arrays), the largest %d bytes\n", with_stack,
              last.size(), max_stack);
  for (const Kernel& k : ks)
    if (k.spill_st || k.spill_ld)
      std::printf("spills %d/%d bytes (stored/loaded): %s %s %.120s\n", k.spill_st, k.spill_ld, k.arch.c_str(),
                  k.file.c_str(), k.name.c_str());

  int failed = 0;
  for (const Kernel& k : ks) {
    std::string why;
    auto add = [&](const std::string& w) { why += (why.empty() ? "" : "; ") + w; };
    if (k.spill_st > kMaxSpill || k.spill_ld > kMaxSpill)
      add("spills (" + std::to_string(k.spill_st) + " bytes stored, " + std::to_string(k.spill_ld) + " loaded)");
    if (k.regs > kMaxRegisters) add(std::to_string(k.regs) + " registers > " + std::to_string(kMaxRegisters));
    if (k.stack > kMaxStack) add("a " + std::to_string(k.stack) + "-byte stack frame > " + std::to_string(kMaxStack));
    if (k.smem > kMaxSmem) add(std::to_string(k.smem) + " bytes of static shared memory");
    if (why.empty()) continue;
    bool allowed = false;
    for (const auto& a : kAllowed) allowed = allowed || k.mangled.find(a.first) != std::string::npos;
    if (allowed) continue;
    if (!failed++) std::printf("\nFAILED: kernels over a limit:\n");
    std::printf("  %s %s: %.140s\n      %s\n", k.arch.c_str(), k.file.c_str(), k.name.c_str(), why.c_str());
  }
  if (failed) return 1;
  std::printf("\nOK: every kernel within the limits\n");
  return 0;
}
