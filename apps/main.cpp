// kantor: command-line entry point. Dispatches to the subcommands of apps/commands.hpp.
#include <signal.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "apps/cli_common.hpp"
#include "apps/commands.hpp"
#include "kantor/info.hpp"
#include "kantor/io.hpp"

namespace {

void usage(std::FILE* out) {
  std::fprintf(out,
               "kantor %s: entropic optimal transport\n\n"
               "usage: kantor <command> [options]   (kantor <command> --help for its options)\n\n"
               "commands:\n"
               "  solve              entropic OT between two point clouds (--demo: built-in)\n"
               "  newton             shape matching: minimize S_eps over the source positions\n"
               "  otdd               dataset distance between two labelled datasets (OTDD)\n"
               "  birkhoff           batched Birkhoff (doubly stochastic) projection\n"
               "  bench sinkhorn     time fixed-eps Sinkhorn iterations (JSON)\n"
               "  bench birkhoff     time the batched Birkhoff projection (JSON)\n"
               "  bench solve        time whole solves to a tolerance, dense or multiscale (JSON)\n"
               "  info               version, build options and CUDA devices\n\n"
               "exit codes: 0 ran, 1 runtime failure (including a failed write to standard\n"
               "output), 2 bad input or usage, 3 numerical failure (NaN/Inf in the solve; no\n"
               "output file written), 130 interrupted\n",
               kantor::build_info().version.c_str());
}

// A fatal signal while an output is being written: remove its temporary file, then end the
// process by the same signal (the exit status a shell expects).
extern "C" void remove_temporaries_and_die(int sig) {
  kantor::io::remove_pending_temporaries();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void install_signal_handlers() {
  // A closed pipe on stdout must be an error message and exit 1, not a silent death: writes then
  // fail with EPIPE and finish_stdout reports them. A file over RLIMIT_FSIZE likewise fails with
  // EFBIG (and the writer removes its temporary) instead of killing the process.
  ::signal(SIGPIPE, SIG_IGN);
  ::signal(SIGXFSZ, SIG_IGN);
  for (const int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) {
    struct sigaction current {};
    // A signal ignored at startup (nohup, a background job) stays ignored.
    if (::sigaction(sig, nullptr, &current) != 0 || current.sa_handler == SIG_IGN) continue;
    struct sigaction action {};
    action.sa_handler = remove_temporaries_and_die;
    sigemptyset(&action.sa_mask);
    ::sigaction(sig, &action, nullptr);
  }
}

int dispatch(int argc, char** argv, std::string* name) {
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
  *name = cmd;
  if (cmd == "solve") return run_guarded("solve", cmd_solve, rest);
  if (cmd == "newton") return run_guarded("newton", cmd_newton, rest);
  if (cmd == "otdd") return run_guarded("otdd", cmd_otdd, rest);
  if (cmd == "info") return run_guarded("info", cmd_info, rest);
  if (cmd == "birkhoff") return run_guarded("birkhoff", cmd_birkhoff, rest);
  if (cmd == "bench") {
    if (rest.empty()) {
      std::fprintf(stderr, "kantor bench: error: expected 'sinkhorn', 'solve' or 'birkhoff'\n");
      return kExitBadInput;
    }
    const std::string what = rest.front();
    rest.erase(rest.begin());
    *name = "bench " + what;
    if (what == "sinkhorn") return run_guarded("bench sinkhorn", cmd_bench_sinkhorn, rest);
    if (what == "birkhoff") return run_guarded("bench birkhoff", cmd_bench_birkhoff, rest);
    if (what == "solve") return run_guarded("bench solve", cmd_bench_solve, rest);
    std::fprintf(stderr,
                 "kantor bench: error: unknown benchmark '%s' (expected sinkhorn, "
                 "solve or birkhoff)\n",
                 what.c_str());
    return kExitBadInput;
  }
  std::fprintf(stderr, "kantor: error: unknown command '%s'\n", cmd.c_str());
  usage(stderr);
  return kExitBadInput;
}

}  // namespace

// The host memory of one solve is reused by the next (docs/architecture.md, "Host memory in
// the CLI"): glibc's allocator otherwise maps blocks above its (adaptive) threshold afresh and
// gives the heap's top back on free, so every solve of 2^20 points pays first-touch page faults
// on some hundreds of MB. Blocks up to 32 MiB come from the heap, which keeps up to 1 GiB freed.
static void keep_freed_host_memory() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

int main(int argc, char** argv) {
  keep_freed_host_memory();
  install_signal_handlers();
  std::string name;
  const int code = dispatch(argc, argv, &name);
  if (name.empty()) {
    // Top-level usage or version: "kantor: error: ..." on a failed write.
    std::fflush(stdout);
    if (std::ferror(stdout)) {
      std::fprintf(stderr, "kantor: error: cannot write to standard output\n");
      return code == kantor::cli::kExitOk ? kantor::cli::kExitFailure : code;
    }
    return code;
  }
  return kantor::cli::finish_stdout(name, code);
}
