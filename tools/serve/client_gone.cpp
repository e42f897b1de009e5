#include "client_gone.h"

#ifdef __linux__
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#endif

namespace tessera::serve {

#ifdef __linux__
namespace {

// The address and port of a socket address, as inet_ntop writes it.
bool address_of(const sockaddr_storage& a, std::string& addr, int& port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(a);
    if (!inet_ntop(AF_INET, &v4.sin_addr, buf, sizeof buf)) return false;
    port = ntohs(v4.sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(a);
    if (!inet_ntop(AF_INET6, &v6.sin6_addr, buf, sizeof buf)) return false;
    port = ntohs(v6.sin6_port);
  } else {
    return false;
  }
  addr = buf;
  return true;
}

}  // namespace

bool client_gone(const std::string& remote_addr, int remote_port, int local_port) {
  // The handler's thread holds the connection's socket but httplib does not expose it: find it
  // among this process's descriptors by its two ends. Peeking consumes nothing, so the socket is
  // left as httplib will read it.
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return false;
  bool gone = false;
  while (const dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    struct stat st {};
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage local{}, peer{};
    socklen_t ll = sizeof local, pl = sizeof peer;
    std::string la, pa;
    int lp = -1, pp = -1;
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &ll) != 0 ||
        getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &pl) != 0 ||
        !address_of(local, la, lp) || !address_of(peer, pa, pp))
      continue;
    if (lp != local_port || pp != remote_port || pa != remote_addr) continue;
    char c;
    const ssize_t r = recv(static_cast<int>(fd), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    gone = r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    break;
  }
  closedir(dir);
  return gone;
}
#else
bool client_gone(const std::string&, int, int) {
  return false;
}
#endif

}  // namespace tessera::serve
