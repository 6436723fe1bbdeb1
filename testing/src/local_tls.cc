// SPDX-License-Identifier: MIT
// The openssl program run step by step (posix_spawnp, output to a log) to make a CA, a server
// and a client certificate signed by it, and an unrelated CA.
#include <echo/testing/local_tls.h>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

extern char** environ;

namespace echo::testing {
namespace {

// Runs `args` in `dir` with output in dir/openssl.log; throws naming `step` when it fails.
void run(const std::filesystem::path& dir, const char* step, std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string log = (dir / "openssl.log").string();
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addchdir_np(&actions, dir.c_str());
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    throw std::runtime_error(std::string("LocalTlsFiles: ") + step + ": cannot run openssl (" +
                             std::strerror(rc) + "); install Debian's openssl");
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::ifstream in(log);
    std::stringstream out;
    out << in.rdbuf();
    throw std::runtime_error(std::string("LocalTlsFiles: ") + step + " failed: " + out.str());
  }
}

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) throw std::runtime_error("LocalTlsFiles: cannot write " + path.string());
}

// A self-signed CA named `cn`.
void make_ca(const std::filesystem::path& dir, const std::string& name, const std::string& cn) {
  run(dir, "CA certificate",
      {"openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
       "-nodes", "-keyout", name + ".key", "-out", name + ".crt", "-days", "2", "-subj",
       "/CN=" + cn});
}

// A key and a certificate `name` signed by ca.crt, with the extensions in `ext`.
void make_leaf(const std::filesystem::path& dir, const std::string& name, const std::string& cn,
               const std::string& ext) {
  write_file(dir / (name + ".ext"), ext);
  run(dir, (name + " key and request").c_str(),
      {"openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
       "-keyout", name + ".key", "-out", name + ".csr", "-subj", "/CN=" + cn});
  run(dir, (name + " certificate").c_str(),
      {"openssl", "x509", "-req", "-in", name + ".csr", "-CA", "ca.crt", "-CAkey", "ca.key",
       "-CAcreateserial", "-out", name + ".crt", "-days", "2", "-extfile", name + ".ext"});
}

}  // namespace

LocalTlsFiles::LocalTlsFiles() {
  char tmpl[] = "/tmp/echostore-tls-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) {
    throw std::runtime_error(std::string("LocalTlsFiles: mkdtemp: ") + std::strerror(errno));
  }
  dir_ = tmpl;
  try {
    make_ca(dir_, "ca", "EchoStore Test CA");
    make_ca(dir_, "other-ca", "EchoStore Unrelated CA");
    // The server's certificate also serves as the client one on the cluster bus and replication
    // links (tls-cluster, tls-replication): both usages.
    make_leaf(dir_, "server", "127.0.0.1",
              "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
              "extendedKeyUsage=serverAuth,clientAuth\n");
    make_leaf(dir_, "client", "echostore-client", "extendedKeyUsage=clientAuth\n");
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    throw;
  }
}

LocalTlsFiles::~LocalTlsFiles() {
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

}  // namespace echo::testing
