// kantor info: version, build options, visible CUDA devices and hardware threads, as text or as
// one JSON object (for bug reports and scripts).
//
//   kantor info --json
#include <boost/program_options.hpp>
#include <iostream>
#include <sstream>
#include <thread>

#include "apps/cli_common.hpp"
#include "apps/commands.hpp"
#include "kantor/info.hpp"

namespace kantor::cli {

int cmd_info(const std::vector<std::string>& args) {
  namespace po = boost::program_options;
  bool json = false;
  po::options_description desc("options", 100, 50);
  desc.add_options()("help,h", "print this help and exit")("json", po::bool_switch(&json),
                                                           "print one JSON object instead of text");
  po::variables_map vm = parse_command_line(args, desc);
  if (vm.count("help")) {
    std::cout << "usage: kantor info [--json]\n\nVersion, build options, visible CUDA devices "
                 "and hardware threads.\n\n"
              << desc << std::endl;
    return kExitOk;
  }
  po::notify(vm);

  const BuildInfo build = build_info();
  const std::vector<DeviceInfo> devices = cuda_devices();
  const unsigned threads = std::thread::hardware_concurrency();
  if (json) {
    std::string list = "[";
    for (std::size_t i = 0; i < devices.size(); ++i) {
      const DeviceInfo& d = devices[i];
      JsonObject o;
      o.add("ordinal", d.ordinal)
          .add("name", d.name)
          .add("compute_capability",
               std::to_string(d.compute_major) + "." + std::to_string(d.compute_minor))
          .add("multiprocessors", d.multiprocessors)
          .add("memory_bytes", d.memory_bytes);
      list += (i ? ", " : "") + o.str();
    }
    JsonObject o;
    o.add("version", build.version)
        .add("cuda_compiled", build.cuda_compiled)
        .add("cuda_architectures", build.cuda_architectures)
        .add("compiler", build.compiler)
        .add("hardware_threads", std::int64_t(threads))
        .add_raw("cuda_devices", list + "]");
    std::cout << o.str() << std::endl;
    return kExitOk;
  }
  std::ostringstream os;
  os << "kantor " << build.version << "\n"
     << "  compiler           " << build.compiler << "\n"
     << "  CUDA engine        "
     << (build.cuda_compiled ? "compiled (architectures " + build.cuda_architectures + ")"
                             : std::string("not compiled (CPU-only build)"))
     << "\n"
     << "  hardware threads   " << threads << "\n"
     << "  CUDA devices       " << devices.size() << (devices.empty() ? " visible" : "") << "\n";
  for (const DeviceInfo& d : devices)
    os << "    [" << d.ordinal << "] " << d.name << ", compute " << d.compute_major << "."
       << d.compute_minor << ", " << d.multiprocessors << " SMs, "
       << d.memory_bytes / (1024.0 * 1024.0 * 1024.0) << " GiB\n";
  std::cout << os.str() << std::flush;
  return kExitOk;
}

}  // namespace kantor::cli
