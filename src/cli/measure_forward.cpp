#include "cli/measure_forward.hpp"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "cli/commands.hpp"

namespace mist::cli {

std::string measure_executable() {
  if (const char* env = std::getenv("MIST_MEASURE"); env != nullptr && *env != '\0') return env;
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("mist-measure") : (self.parent_path() / "mist-measure").string();
}

Result<ExitStatus> run_program(const std::string& path, const std::vector<std::string>& args) {
  // Everything the child needs is built before fork: after it, only async-signal-safe calls.
  std::vector<char*> argv{const_cast<char*>(path.c_str())};
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  // exec closes this pipe (O_CLOEXEC); the child writes errno on it only when exec fails.
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return fail(path, std::strerror(errno));
  std::fflush(stdout);  // what this process printed comes before the child's output
  std::fflush(stderr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    return fail(path, std::strerror(e));
  }
  if (pid == 0) {
    ::close(pipe_fds[0]);
    // A measurement outlives nothing: when mist ends (a test's timeout, a kill), so does it. The
    // parent check covers a mist that ended before the prctl.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(127);
    ::execv(path.c_str(), argv.data());
    const int e = errno;
    [[maybe_unused]] auto n = ::write(pipe_fds[1], &e, sizeof e);
    ::_exit(127);
  }
  ::close(pipe_fds[1]);
  int exec_errno = 0;
  ssize_t n;
  do n = ::read(pipe_fds[0], &exec_errno, sizeof exec_errno);
  while (n < 0 && errno == EINTR);
  ::close(pipe_fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return fail(path, std::strerror(errno));
  if (n == static_cast<ssize_t>(sizeof exec_errno)) return fail(path, std::strerror(exec_errno));
  if (WIFSIGNALED(status)) return ExitStatus{128 + WTERMSIG(status), WTERMSIG(status)};
  return ExitStatus{WIFEXITED(status) ? WEXITSTATUS(status) : kExitInternal, 0};
}

int forward_to_measure(const std::string& command, const std::vector<std::string>& args, std::string& err) {
  const std::string path = measure_executable();
  if (::access(path.c_str(), X_OK) != 0) {
#ifdef MIST_WITH_TORCH
    const std::string why = fmt::format("no executable {} ({}); it is built next to mist when CMake finds LibTorch "
                                        "(libtorch-dev), and MIST_MEASURE names another", path, std::strerror(errno));
#else
    const std::string why = "this mist was built without LibTorch (install libtorch-dev and rebuild; docs/cli.md)";
#endif
    err = fmt::format("mist: {}: LibTorch measurement was not built: {}\n", command, why);
    return kExitInvalidInput;
  }
  auto r = run_program(path, args);
  if (!r) {
    err = fmt::format("mist: {}: cannot run LibTorch measurement: {}\n", command, r.error().to_string());
    return kExitInvalidInput;
  }
  if (r->signal != 0)
    err = fmt::format("mist: {}: {} ended by signal {} ({})\n", command, path, r->signal, ::strsignal(r->signal));
  return r->code;
}

}  // namespace mist::cli
