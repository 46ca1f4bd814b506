// kantor command-line tool (placeholder entry point; subcommands land with the CLI work).
#include <cstdio>

#include "kantor/kantor.hpp"

int main() {
  std::printf("kantor %s\n", kantor::build_info().version.c_str());
  return 0;
}
