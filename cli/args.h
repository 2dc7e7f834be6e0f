// Command-line parsing for the `kiln` command: each subcommand declares its flags (name,
// whether it takes a value, default, help), and parse_args() checks the command line
// against them, so a typo gets an error listing the valid flags instead of being ignored.
#pragma once
#include <map>
#include <string>
#include <vector>

namespace kiln::cli {

/// One flag of a subcommand: `--name VALUE` (or `--name=VALUE`), or a switch `--name`.
struct FlagSpec {
  std::string name;           // without the leading dashes
  bool takes_value = true;    // false: a switch (present or absent)
  std::string default_value;  // "" = no default
  std::string help;
};

/// The parsed command line of one subcommand.
class Args {
 public:
  std::vector<std::string> positional;
  std::map<std::string, std::string> values;  // flag -> value ("1" for a present switch)

  bool has(const std::string& flag) const { return values.count(flag) != 0; }
  /// The flag's value or its default; throws kiln::Error when neither exists.
  std::string str(const std::string& flag) const;
  std::string str(const std::string& flag, const std::string& fallback) const;
  /// Integer / floating values; a malformed number is a kiln::Error naming the flag.
  long long integer(const std::string& flag) const;
  long long integer(const std::string& flag, long long fallback) const;
  double number(const std::string& flag) const;
  double number(const std::string& flag, double fallback) const;
  bool flag(const std::string& name) const { return has(name); }
};

/// Parses argv[first..argc) against `specs`: fills defaults, rejects unknown flags and
/// missing values with a kiln::Error naming `command` and listing the valid flags;
/// `--help` prints the flags and exits the process with status 0.
Args parse_args(const std::string& command, const std::vector<FlagSpec>& specs, int argc,
                char** argv, int first);
/// "  --name VALUE   help (default: x)" lines for a usage message.
std::string flags_help(const std::vector<FlagSpec>& specs);

}  // namespace kiln::cli
