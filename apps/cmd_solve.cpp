// Placeholder until this subcommand is written; it refuses plainly instead of pretending.
#include "apps/cli_common.hpp"
#include "apps/commands.hpp"
#include "kantor/error.hpp"

namespace kantor::cli {
int cmd_solve(const std::vector<std::string>&) {
  throw kantor::NotCompiled("this subcommand is not implemented yet");
}
}  // namespace kantor::cli
