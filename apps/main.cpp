// kantor: command-line entry point. Dispatches to the subcommands of apps/commands.hpp.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "apps/cli_common.hpp"
#include "apps/commands.hpp"
#include "kantor/info.hpp"

namespace {

void usage(std::FILE* out) {
  std::fprintf(out,
               "kantor %s: entropic optimal transport\n\n"
               "usage: kantor <command> [options]   (kantor <command> --help for its options)\n\n"
               "commands:\n"
               "  solve              entropic OT between two point clouds (--demo: built-in)\n"
               "  birkhoff           batched Birkhoff (doubly stochastic) projection\n"
               "  bench sinkhorn     time fixed-eps Sinkhorn iterations (JSON)\n"
               "  bench birkhoff     time the batched Birkhoff projection (JSON)\n"
               "  info               version, build options and CUDA devices\n",
               kantor::build_info().version.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kantor::cli;
  if (argc < 2) {
    usage(stderr);
    return kExitBadInput;
  }
  const std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    usage(stdout);
    return kExitOk;
  }
  if (cmd == "--version") {
    std::printf("kantor %s\n", kantor::build_info().version.c_str());
    return kExitOk;
  }
  std::vector<std::string> rest(argv + 2, argv + argc);
  if (cmd == "solve") return run_guarded("solve", cmd_solve, rest);
  if (cmd == "info") return run_guarded("info", cmd_info, rest);
  if (cmd == "birkhoff") return run_guarded("birkhoff", cmd_birkhoff, rest);
  if (cmd == "bench") {
    if (rest.empty()) {
      std::fprintf(stderr, "kantor bench: error: expected 'sinkhorn' or 'birkhoff'\n");
      return kExitBadInput;
    }
    const std::string what = rest.front();
    rest.erase(rest.begin());
    if (what == "sinkhorn") return run_guarded("bench sinkhorn", cmd_bench_sinkhorn, rest);
    if (what == "birkhoff") return run_guarded("bench birkhoff", cmd_bench_birkhoff, rest);
    std::fprintf(stderr,
                 "kantor bench: error: unknown benchmark '%s' (expected sinkhorn or "
                 "birkhoff)\n",
                 what.c_str());
    return kExitBadInput;
  }
  std::fprintf(stderr, "kantor: error: unknown command '%s'\n", cmd.c_str());
  usage(stderr);
  return kExitBadInput;
}
