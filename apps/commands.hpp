// The subcommands of the kantor CLI, one file each (apps/cmd_*.cpp).
#pragma once

#include <string>
#include <vector>

namespace kantor::cli {

int cmd_solve(const std::vector<std::string>& args);            // apps/cmd_solve.cpp
int cmd_newton(const std::vector<std::string>& args);           // apps/cmd_newton.cpp
int cmd_otdd(const std::vector<std::string>& args);             // apps/cmd_otdd.cpp
int cmd_info(const std::vector<std::string>& args);             // apps/cmd_info.cpp
int cmd_birkhoff(const std::vector<std::string>& args);         // apps/cmd_birkhoff.cpp
int cmd_bench_sinkhorn(const std::vector<std::string>& args);   // apps/cmd_bench_sinkhorn.cpp
int cmd_bench_birkhoff(const std::vector<std::string>& args);   // apps/cmd_bench_birkhoff.cpp
int cmd_bench_solve(const std::vector<std::string>& args);      // apps/cmd_bench_solve.cpp

}  // namespace kantor::cli
