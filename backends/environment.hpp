// Every environment variable Strata's library and programs read, in one
// table: --version prints it with the values set in the environment, and
// docs/development.md shows it. A new variable is a new row here (a test
// checks that the table covers the names the sources read).
#pragma once

#include <string>
#include <vector>

namespace strata {

struct EnvironmentVariable {
  const char* name;
  const char* values;   // what it takes, and its default
  const char* meaning;  // what it changes
};

const std::vector<EnvironmentVariable>& environment_variables();

// The table as --version prints it: one line per variable, its value when
// set ("unset" otherwise), what it takes and what it changes.
std::string environment_report();

}  // namespace strata
