// Runs the flowtune-sim binary (its path compiled in as FT_SIM_BINARY) for
// the CLI tests.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace flowtune::sim {

struct CliResult {
  int status = -1;  // exit status, or -1 if it did not exit normally
  std::string out;
  std::string err;
};

inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

inline std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "flowtune_sim_test_" + std::to_string(::getpid()) + "_" + name;
}

inline std::string write_temp(const std::string& name, const std::string& text) {
  std::string path = temp_path(name);
  std::ofstream(path) << text;
  return path;
}

// Runs flowtune-sim with the given arguments (already shell-quoted where
// needed) and stdin from `stdin_path` if set.
inline CliResult sim(const std::string& args, const std::string& stdin_path = "") {
  const std::string out = temp_path("stdout");
  const std::string err = temp_path("stderr");
  std::string cmd =
      std::string("'") + FT_SIM_BINARY + "' " + args + " >'" + out + "' 2>'" + err + "'";
  if (!stdin_path.empty()) cmd += " <'" + stdin_path + "'";
  const int rc = std::system(cmd.c_str());
  CliResult r;
  if (rc != -1 && WIFEXITED(rc)) r.status = WEXITSTATUS(rc);
  r.out = slurp(out);
  r.err = slurp(err);
  std::remove(out.c_str());
  std::remove(err.c_str());
  return r;
}

}  // namespace flowtune::sim
