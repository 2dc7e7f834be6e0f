// Command-line parsing for the `kiln` command, on CLI11: each subcommand binds every flag
// once, to the field it sets, with its help text; the field's value before parsing is the
// default --help shows:
//   CLI::App app{"Train a network.", "kiln train mnist"};
//   setup_app(app);
//   app.add_option("--lr", cfg.lr, "learning rate");
//   app.add_flag("--zero", cfg.zero, "ZeRO-1 under mpirun");
//   parse(app, argc, argv, first);
// A typo, a missing or malformed value is a kiln::Error naming the flag, never ignored.
#pragma once
#include <CLI/CLI.hpp>
#include <set>
#include <string>

namespace kiln::cli {

/// kiln's settings for a subcommand's App: --help shows each option's default.
void setup_app(CLI::App& app);

/// Parses argv[first..argc) into the fields bound to app's options. --help (-h) prints the
/// flags and exits the process with status 0; every other error is a kiln::Error naming
/// the command and the flag, and how to list the flags.
void parse(CLI::App& app, int argc, char** argv, int first);

/// The flags given on the command line, without dashes ("lr"), after parse.
std::set<std::string> given_flags(const CLI::App& app);

}  // namespace kiln::cli
