// Command-line parsing for the `kiln` command (see command_line.h).
#include "cli/command_line.h"
#include <cstdio>
#include <cstdlib>
#include "kiln/core/error.h"

namespace kiln::cli {

void setup_app(CLI::App& app) {
  // a flag given twice takes its last value, as argparse and getopt programs do
  app.option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.get_formatter()->column_width(32);
}

void parse(CLI::App& app, int argc, char** argv, int first) {
  try {
    // CLI11 reads argv[0] as the program's name: hand it the word before the flags.
    app.parse(argc - first + 1, argv + first - 1);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    std::exit(0);
  } catch (const CLI::ParseError& e) {
    KILN_FAIL(app.get_name(), ": ", e.what(), " (", app.get_name(), " --help lists the flags)");
  }
}

std::set<std::string> given_flags(const CLI::App& app) {
  std::set<std::string> given;
  for (const CLI::Option* o : app.get_options())
    if (o->count() > 0 && o->get_single_name() != "help") given.insert(o->get_single_name());
  return given;
}

}  // namespace kiln::cli
