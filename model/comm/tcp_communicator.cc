#include "model/comm/tcp_communicator.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace mesa::model {
namespace {

constexpr uint32_t kMagic = 0x4d455341;  // "MESA"
enum Opcode : uint32_t {
  kHello = 1,
  kReduceFloat = 2,
  kReduceDouble = 3,
  kBroadcast = 4,
};

struct Header {
  uint32_t magic;
  uint32_t opcode;
  uint64_t bytes;
};

int RemainingMs(absl::Time deadline) {
  const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
  return ms <= 0 ? 0 : static_cast<int>(std::min<int64_t>(ms, 1 << 30));
}

// Waits for `events` on fd until the deadline: OK, DeadlineExceeded or Unavailable.
absl::Status WaitFd(int fd, short events, absl::Time deadline, const char* what) {
  while (true) {
    pollfd p{fd, events, 0};
    const int rc = poll(&p, 1, RemainingMs(deadline));
    if (rc > 0) return absl::OkStatus();
    if (rc == 0) return absl::DeadlineExceededError(what);
    if (errno != EINTR) return absl::UnavailableError(absl::StrCat(what, ": ", strerror(errno)));
  }
}

void SetSocketOptions(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

absl::Status SendAll(int fd, const void* data, size_t bytes, absl::Time deadline) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t w = send(fd, p, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      p += w;
      bytes -= w;
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (absl::Status st = WaitFd(fd, POLLOUT, deadline, "send timed out"); !st.ok()) return st;
      continue;
    }
    return absl::UnavailableError(absl::StrCat("send: ", strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status RecvAll(int fd, void* data, size_t bytes, absl::Time deadline) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    if (absl::Status st = WaitFd(fd, POLLIN, deadline, "receive timed out"); !st.ok()) return st;
    ssize_t r = recv(fd, p, bytes, MSG_DONTWAIT);
    if (r > 0) {
      p += r;
      bytes -= r;
      continue;
    }
    if (r == 0)
      return absl::UnavailableError("connection closed by the peer (it exited or crashed)");
    if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
    return absl::UnavailableError(absl::StrCat("receive: ", strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> ConnectTo(const std::string& address, absl::Time deadline) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("bad rank-0 address \"", address, "\""));
  }
  const std::string host = address.substr(0, colon), port = address.substr(colon + 1);
  absl::Duration pause = absl::Milliseconds(10);
  std::string last_error;
  while (true) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
      last_error = gai_strerror(rc);
    } else {
      for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) continue;
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
          freeaddrinfo(res);
          SetSocketOptions(fd);
          return fd;
        }
        last_error = strerror(errno);
        close(fd);
      }
      freeaddrinfo(res);
    }
    if (absl::Now() + pause > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("could not connect to rank 0 at ", address, ": ", last_error));
    }
    absl::SleepFor(pause);
    pause = std::min(pause * 2, absl::Milliseconds(500));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpCommunicator>> TcpCommunicator::Create(
    int rank, int world_size, UniqueIdExchange& exchange, const TcpOptions& options) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " of world size ", world_size));
  }
  auto comm = std::unique_ptr<TcpCommunicator>(new TcpCommunicator(rank, world_size, options));
  const absl::Time deadline = absl::Now() + options.connect_timeout;
  if (rank == 0) {
    comm->fds_.assign(world_size, -1);
    if (world_size == 1) return comm;
    int listener = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool v6 = listener >= 0;
    if (!v6) listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listener < 0) return absl::UnavailableError(absl::StrCat("socket: ", strerror(errno)));
    int one = 1, zero = 0;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    int rc;
    if (v6) {
      setsockopt(listener, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));  // v4 too
      sockaddr_in6 addr{};
      addr.sin6_family = AF_INET6;
      addr.sin6_addr = in6addr_any;
      rc = bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    } else {
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_ANY);
      rc = bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    }
    if (rc != 0 || listen(listener, world_size) != 0) {
      const std::string err = strerror(errno);
      close(listener);
      return absl::UnavailableError(absl::StrCat("listen: ", err));
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    getsockname(listener, reinterpret_cast<sockaddr*>(&bound), &len);
    const int port = ntohs(v6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                              : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    std::string host = options.advertise_host;
    if (host.empty()) {
      char name[256] = {};
      gethostname(name, sizeof(name) - 1);
      host = name;
    }
    std::string address = absl::StrCat(host, ":", port);
    if (absl::Status st = exchange.Exchange(options.key, 0, &address); !st.ok()) {
      close(listener);
      return st;
    }
    for (int accepted = 1; accepted < world_size;) {
      if (absl::Status st = WaitFd(listener, POLLIN, deadline, "waiting for ranks to connect");
          !st.ok()) {
        close(listener);
        return absl::DeadlineExceededError(absl::StrCat(
            "rank 0: only ", accepted - 1, " of ", world_size - 1, " ranks connected to ", address,
            " within ", absl::FormatDuration(options.connect_timeout)));
      }
      int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      SetSocketOptions(fd);
      uint32_t hello[3];
      Header h;
      absl::Status st = RecvAll(fd, &h, sizeof(h), deadline);
      if (st.ok()) st = RecvAll(fd, hello, sizeof(hello), deadline);
      if (!st.ok() || h.magic != kMagic || h.opcode != kHello || hello[0] != kMagic ||
          hello[2] != static_cast<uint32_t>(world_size) || hello[1] == 0 ||
          hello[1] >= static_cast<uint32_t>(world_size) || comm->fds_[hello[1]] >= 0) {
        close(fd);  // a stray or duplicate connection: not one of ours
        continue;
      }
      comm->fds_[hello[1]] = fd;
      ++accepted;
    }
    close(listener);
  } else {
    std::string address;
    if (absl::Status st = exchange.Exchange(options.key, 0, &address); !st.ok()) return st;
    auto fd = ConnectTo(address, deadline);
    if (!fd.ok()) return fd.status();
    comm->fds_.assign(1, *fd);
    const uint32_t hello[3] = {kMagic, static_cast<uint32_t>(rank),
                               static_cast<uint32_t>(world_size)};
    if (absl::Status st = comm->SendMsg(0, kHello, hello, sizeof(hello), deadline); !st.ok()) {
      return st;
    }
  }
  return comm;
}

TcpCommunicator::~TcpCommunicator() {
  for (int fd : fds_) {
    if (fd >= 0) close(fd);
  }
}

absl::Status TcpCommunicator::Fail(absl::Status status) {
  if (failed_.ok()) failed_ = status;
  return failed_;
}

absl::Status TcpCommunicator::SendMsg(int peer, uint32_t opcode, const void* data, int64_t bytes,
                                      absl::Time deadline) {
  const int fd = rank_ == 0 ? fds_[peer] : fds_[0];
  const Header h{kMagic, opcode, static_cast<uint64_t>(bytes)};
  absl::Status st = SendAll(fd, &h, sizeof(h), deadline);
  if (st.ok()) st = SendAll(fd, data, bytes, deadline);
  if (!st.ok()) {
    return Fail(absl::Status(st.code(), absl::StrCat("tcp communicator, rank ", rank_, " → rank ",
                                                     peer, ": ", st.message())));
  }
  return st;
}

absl::Status TcpCommunicator::RecvMsg(int peer, uint32_t opcode, void* data, int64_t bytes,
                                      absl::Time deadline) {
  const int fd = rank_ == 0 ? fds_[peer] : fds_[0];
  Header h;
  absl::Status st = RecvAll(fd, &h, sizeof(h), deadline);
  if (st.ok() &&
      (h.magic != kMagic || h.opcode != opcode || h.bytes != static_cast<uint64_t>(bytes))) {
    st = absl::InternalError(absl::StrCat("collective mismatch: expected op ", opcode, " of ",
                                          bytes, " bytes, got op ", h.opcode, " of ", h.bytes,
                                          " bytes (ranks called different collectives)"));
  }
  if (st.ok()) st = RecvAll(fd, data, bytes, deadline);
  if (!st.ok()) {
    return Fail(absl::Status(st.code(), absl::StrCat("tcp communicator, rank ", rank_, " ← rank ",
                                                     peer, ": ", st.message())));
  }
  return st;
}

template <typename T>
absl::Status TcpCommunicator::AllReduceT(T* data, int64_t n, ReduceOp op, uint32_t opcode) {
  if (!failed_.ok()) return failed_;
  if (world_size_ == 1) return absl::OkStatus();
  const absl::Time deadline = absl::Now() + options_.timeout;
  const int64_t bytes = n * static_cast<int64_t>(sizeof(T));
  if (rank_ != 0) {
    if (absl::Status st = SendMsg(0, opcode, data, bytes, deadline); !st.ok()) return st;
    return RecvMsg(0, opcode, data, bytes, deadline);
  }
  // Rank 0's receive buffer lives as long as the communicator: every step reduces the same sizes.
  const size_t words = (static_cast<size_t>(bytes) + sizeof(double) - 1) / sizeof(double);
  if (recv_buffer_.size() < words) recv_buffer_.resize(words);
  T* incoming = reinterpret_cast<T*>(recv_buffer_.data());
  for (int r = 1; r < world_size_; ++r) {  // rank order: deterministic sums
    if (absl::Status st = RecvMsg(r, opcode, incoming, bytes, deadline); !st.ok()) {
      return st;
    }
    for (int64_t i = 0; i < n; ++i) data[i] += incoming[i];
  }
  if (op == ReduceOp::kAverage) {
    const T k = T(1) / static_cast<T>(world_size_);
    for (int64_t i = 0; i < n; ++i) data[i] *= k;
  }
  for (int r = 1; r < world_size_; ++r) {
    if (absl::Status st = SendMsg(r, opcode, data, bytes, deadline); !st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status TcpCommunicator::AllReduce(float* data, int64_t n, ReduceOp op) {
  return AllReduceT(data, n, op, kReduceFloat);
}

absl::Status TcpCommunicator::AllReduce(double* data, int64_t n, ReduceOp op) {
  return AllReduceT(data, n, op, kReduceDouble);
}

absl::Status TcpCommunicator::Broadcast(float* data, int64_t n, int root) {
  return BroadcastBytes(data, n * static_cast<int64_t>(sizeof(float)), root);
}

absl::Status TcpCommunicator::BroadcastBytes(void* data, int64_t bytes, int root) {
  if (!failed_.ok()) return failed_;
  if (root < 0 || root >= world_size_) {
    return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root, " of ", world_size_));
  }
  if (world_size_ == 1) return absl::OkStatus();
  const absl::Time deadline = absl::Now() + options_.timeout;
  if (rank_ != 0) {
    if (rank_ == root) return SendMsg(0, kBroadcast, data, bytes, deadline);
    return RecvMsg(0, kBroadcast, data, bytes, deadline);
  }
  if (root != 0) {
    if (absl::Status st = RecvMsg(root, kBroadcast, data, bytes, deadline); !st.ok()) return st;
  }
  for (int r = 1; r < world_size_; ++r) {
    if (r == root) continue;
    if (absl::Status st = SendMsg(r, kBroadcast, data, bytes, deadline); !st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status TcpCommunicator::Barrier() {
  double token = 1;
  return AllReduce(&token, 1, ReduceOp::kSum);
}

}  // namespace mesa::model
