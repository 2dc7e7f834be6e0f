// Command-line parsing for the `kiln` command (see args.h).
#include "cli/args.h"
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include "kiln/core/error.h"

namespace kiln::cli {

std::string Args::str(const std::string& flag) const {
  auto it = values.find(flag);
  KILN_CHECK(it != values.end(), "missing required flag --", flag);
  return it->second;
}

std::string Args::str(const std::string& flag, const std::string& fallback) const {
  auto it = values.find(flag);
  return it == values.end() ? fallback : it->second;
}

long long Args::integer(const std::string& flag) const {
  const std::string s = str(flag);
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  KILN_CHECK(!s.empty() && *end == '\0' && errno == 0, "--", flag, " expects an integer, got '", s, "'");
  return v;
}

long long Args::integer(const std::string& flag, long long fallback) const {
  return has(flag) ? integer(flag) : fallback;
}

double Args::number(const std::string& flag) const {
  const std::string s = str(flag);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  KILN_CHECK(!s.empty() && *end == '\0', "--", flag, " expects a number, got '", s, "'");
  return v;
}

double Args::number(const std::string& flag, double fallback) const {
  return has(flag) ? number(flag) : fallback;
}

std::string flags_help(const std::vector<FlagSpec>& specs) {
  std::ostringstream os;
  for (const auto& s : specs) {
    std::string left = "  --" + s.name + (s.takes_value ? " VALUE" : "");
    if (left.size() < 30) left.resize(30, ' ');
    os << left << " " << s.help;
    if (!s.default_value.empty()) os << " (default: " << s.default_value << ")";
    os << "\n";
  }
  return os.str();
}

Args parse_args(const std::string& command, const std::vector<FlagSpec>& specs, int argc,
                char** argv, int first) {
  Args a;
  auto find = [&](const std::string& name) -> const FlagSpec* {
    for (const auto& s : specs)
      if (s.name == name) return &s;
    return nullptr;
  };
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" && find("help")) arg = "--help";
    if ((arg == "--help" || arg == "-h") && !find("help")) {  // a command declaring --help prints its own
      std::printf("usage: kiln %s [flags]\n%s", command.c_str(), flags_help(specs).c_str());
      std::exit(0);
    }
    if (arg.rfind("--", 0) != 0 || arg == "--") {
      a.positional.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2), value;
    bool inline_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    const FlagSpec* spec = find(name);
    KILN_CHECK(spec != nullptr, "kiln ", command, ": unknown flag --", name, "; valid flags:\n",
               flags_help(specs));
    if (spec->takes_value) {
      if (!inline_value) {
        KILN_CHECK(i + 1 < argc, "kiln ", command, ": flag --", name, " expects a value");
        value = argv[++i];
      }
      a.values[name] = value;
    } else {
      KILN_CHECK(!inline_value, "kiln ", command, ": flag --", name, " takes no value");
      a.values[name] = std::string(1, '1');  // (not = "1": GCC 12 warns falsely, -Wrestrict)
    }
  }
  for (const auto& s : specs)
    if (s.takes_value && !s.default_value.empty() && !a.has(s.name)) a.values[s.name] = s.default_value;
  return a;
}

}  // namespace kiln::cli
