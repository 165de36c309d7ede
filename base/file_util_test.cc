#include "base/file_util.h"

#include <linux/capability.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace mesa::base {
namespace {

namespace fs = std::filesystem;

// A fresh directory under $TEST_TMPDIR.
std::string TempDir(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  const fs::path dir = fs::path(root != nullptr ? root : "/tmp") / ("file_util_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

// Read independently of the code under test.
std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Clears the capabilities that let root write anywhere (effective set of this process only).
bool DropFileCapabilities() {
  __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capget, &header, data) != 0) return false;
  for (int cap : {CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER}) {
    data[cap / 32].effective &= ~(1u << (cap % 32));
  }
  return syscall(SYS_capset, &header, data) == 0;
}

TEST(WriteFileAtomicallyTest, CreatesAndReplaces) {
  const std::string dir = TempDir("replace");
  const std::string path = dir + "/value";
  ASSERT_TRUE(WriteFileAtomically(path, std::string("first")).ok());
  EXPECT_EQ(Slurp(path), "first");
  const std::string binary("a\0b\n", 4);
  ASSERT_TRUE(WriteFileAtomically(path, binary).ok());
  EXPECT_EQ(Slurp(path), binary);
  ASSERT_TRUE(WriteFileAtomically(path, std::string()).ok());
  EXPECT_EQ(Slurp(path), "");
  EXPECT_EQ(Entries(dir), std::vector<std::string>{"value"});  // no temporaries left
  struct stat info;
  ASSERT_EQ(stat(path.c_str(), &info), 0);
  EXPECT_EQ(
      info.st_mode & 0777, 0644 & ~[] {
        const mode_t mask = umask(0);
        umask(mask);
        return mask;
      }());
}

TEST(WriteFileAtomicallyTest, BytesOverload) {
  const std::string dir = TempDir("bytes");
  const std::vector<std::byte> bytes = {std::byte{1}, std::byte{0}, std::byte{255}};
  ASSERT_TRUE(WriteFileAtomically(dir + "/b", std::span<const std::byte>(bytes)).ok());
  EXPECT_EQ(Slurp(dir + "/b"), std::string("\x01\x00\xff", 3));
}

TEST(WriteFileAtomicallyTest, MissingDirectoryIsNotFound) {
  const std::string dir = TempDir("missing");
  const absl::Status status = WriteFileAtomically(dir + "/no/such/dir/file", std::string("x"));
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), dir + "/no/such/dir/file")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "No such file or directory")) << status;
}

TEST(WriteFileAtomicallyTest, UnwritableDirectoryKeepsOldContent) {
  const std::string dir = TempDir("unwritable");
  const std::string path = dir + "/value";
  ASSERT_TRUE(WriteFileAtomically(path, std::string("old")).ok());
  ASSERT_EQ(chmod(dir.c_str(), 0555), 0);
  // Root ignores permission bits: write from a child process without that privilege.
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (!DropFileCapabilities()) _exit(3);
    const absl::Status status = WriteFileAtomically(path, std::string("new"));
    if (status.code() != absl::StatusCode::kPermissionDenied) _exit(1);
    if (!absl::StrContains(status.message(), path)) _exit(2);
    _exit(0);
  }
  int wait_status = 0;
  ASSERT_EQ(waitpid(pid, &wait_status, 0), pid);
  chmod(dir.c_str(), 0755);
  ASSERT_TRUE(WIFEXITED(wait_status));
  if (WEXITSTATUS(wait_status) == 3) GTEST_SKIP() << "cannot drop CAP_DAC_OVERRIDE";
  EXPECT_EQ(WEXITSTATUS(wait_status), 0) << "1: not PermissionDenied, 2: path not in message";
  EXPECT_EQ(Slurp(path), "old");
  EXPECT_EQ(Entries(dir), std::vector<std::string>{"value"});
}

// A write that fails half-way (the file size limit stands in for a full disk): the target keeps
// its old content and the temporary file is gone.
TEST(WriteFileAtomicallyTest, FailedWriteKeepsOldContent) {
  const std::string dir = TempDir("failed_write");
  const std::string path = dir + "/value";
  ASSERT_TRUE(WriteFileAtomically(path, std::string("old content")).ok());
  rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  struct sigaction ignore = {}, saved_action;
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(sigaction(SIGXFSZ, &ignore, &saved_action), 0);
  rlimit small = saved;
  small.rlim_cur = 4096;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  const absl::Status status = WriteFileAtomically(path, std::string(1 << 20, 'x'));
  setrlimit(RLIMIT_FSIZE, &saved);
  sigaction(SIGXFSZ, &saved_action, nullptr);
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(absl::StrContains(status.message(), "cannot write " + path + ".tmp.")) << status;
  EXPECT_EQ(Slurp(path), "old content");
  EXPECT_EQ(Entries(dir), std::vector<std::string>{"value"});
}

TEST(WriteFileAtomicallyTest, FailedRenameKeepsTarget) {
  const std::string dir = TempDir("failed_rename");
  const std::string path = dir + "/target";
  fs::create_directories(path + "/inside");  // a non-empty directory cannot be replaced by a file
  const absl::Status status = WriteFileAtomically(path, std::string("x"));
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(absl::StrContains(status.message(), "cannot rename")) << status;
  EXPECT_TRUE(fs::is_directory(path + "/inside"));
  EXPECT_EQ(Entries(dir), std::vector<std::string>{"target"});
}

TEST(AtomicFileWriterTest, StreamsAndCommits) {
  const std::string dir = TempDir("stream");
  const std::string path = dir + "/value";
  ASSERT_TRUE(WriteFileAtomically(path, std::string("old")).ok());
  absl::StatusOr<AtomicFileWriter> writer = AtomicFileWriter::Open(path);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE(writer->Append("new ").ok());
  const int payload[2] = {1, 2};
  ASSERT_TRUE(writer->Append(payload, sizeof(payload)).ok());
  EXPECT_EQ(Slurp(path), "old");  // nothing visible before the commit
  EXPECT_EQ(Entries(dir).size(), 2u);
  ASSERT_TRUE(writer->Commit().ok());
  EXPECT_EQ(Slurp(path), std::string("new ") +
                             std::string(reinterpret_cast<const char*>(payload), sizeof(payload)));
  EXPECT_EQ(Entries(dir), std::vector<std::string>{"value"});
  EXPECT_FALSE(writer->Append("more").ok());
}

TEST(AtomicFileWriterTest, DroppedWriterLeavesOldContent) {
  const std::string dir = TempDir("dropped");
  const std::string path = dir + "/value";
  ASSERT_TRUE(WriteFileAtomically(path, std::string("old")).ok());
  {
    absl::StatusOr<AtomicFileWriter> writer = AtomicFileWriter::Open(path);
    ASSERT_TRUE(writer.ok()) << writer.status();
    ASSERT_TRUE(writer->Append("half of the new con").ok());
    AtomicFileWriter moved = *std::move(writer);  // the moved-from writer must not clean up twice
  }
  EXPECT_EQ(Slurp(path), "old");
  EXPECT_EQ(Entries(dir), std::vector<std::string>{"value"});
}

TEST(AtomicFileWriterTest, TempInfix) {
  const std::string dir = TempDir("infix");
  AtomicWriteOptions options;
  options.temp_infix = "+tmp";
  absl::StatusOr<AtomicFileWriter> writer = AtomicFileWriter::Open(dir + "/key", options);
  ASSERT_TRUE(writer.ok()) << writer.status();
  EXPECT_TRUE(absl::StartsWith(writer->temp_path(), dir + "/key+tmp.")) << writer->temp_path();
  ASSERT_TRUE(writer->Commit().ok());
  EXPECT_EQ(Entries(dir), std::vector<std::string>{"key"});
}

TEST(ReadFileTest, ReadsWholeFiles) {
  const std::string dir = TempDir("read");
  std::string big(3 * 1000 * 1000 + 17, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  ASSERT_TRUE(WriteFileAtomically(dir + "/big", big).ok());
  ASSERT_TRUE(WriteFileAtomically(dir + "/empty", std::string()).ok());
  absl::StatusOr<std::string> read = ReadFile(dir + "/big");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, big);
  absl::StatusOr<std::vector<std::byte>> bytes = ReadFileBytes(dir + "/big");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  ASSERT_EQ(bytes->size(), big.size());
  EXPECT_EQ(std::memcmp(bytes->data(), big.data(), big.size()), 0);
  read = ReadFile(dir + "/empty");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, "");
}

TEST(ReadFileTest, FilesWithoutASize) {
  // /proc files report size 0 and are read to their end all the same.
  absl::StatusOr<std::string> status = ReadFile("/proc/self/status");
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(absl::StrContains(*status, "Pid:")) << *status;
  // A pipe, fed in pieces.
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    const std::string piece(5000, 'p');
    for (int i = 0; i < 10; ++i) {
      if (write(fds[1], piece.data(), piece.size()) != static_cast<ssize_t>(piece.size())) _exit(1);
    }
    _exit(0);
  }
  close(fds[1]);
  const std::string path = "/proc/self/fd/" + std::to_string(fds[0]);
  absl::StatusOr<std::string> piped = ReadFile(path, kNoSizeLimit, FileKinds::kRegularOrStream);
  close(fds[0]);
  waitpid(pid, nullptr, 0);
  ASSERT_TRUE(piped.ok()) << piped.status();
  EXPECT_EQ(*piped, std::string(50000, 'p'));
}

// Where a file is expected, a FIFO (no writer: opening it would wait forever), a device that never
// ends (/dev/zero, also through a link named like a data file) or a directory is refused at once.
TEST(ReadFileTest, OnlyRegularFilesUnlessStreamsAreAsked) {
  const std::string dir = TempDir("read_kinds");
  const std::string fifo = dir + "/model.safetensors";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string zero = dir + "/state.json";
  ASSERT_EQ(symlink("/dev/zero", zero.c_str()), 0);
  for (const auto& [path, kind] : {std::pair<std::string, std::string>{fifo, "a FIFO"},
                                   {zero, "a character device"},
                                   {dir, "a directory"}}) {
    absl::StatusOr<std::string> read = ReadFile(path);
    EXPECT_EQ(read.status().code(), absl::StatusCode::kFailedPrecondition) << path;
    EXPECT_EQ(read.status().message(), "cannot read " + path + ": not a regular file (" + kind +
                                           "); give the path of a file");
    EXPECT_EQ(ReadFileBytes(path).status().code(), absl::StatusCode::kFailedPrecondition) << path;
  }
  // Asked for, a stream is read to its end, bounded: a FIFO without a writer is empty at once,
  // /dev/zero stops at the limit.
  absl::StatusOr<std::string> empty = ReadFile(fifo, 1 << 10, FileKinds::kRegularOrStream);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(*empty, "");
  EXPECT_EQ(ReadFile(zero, 1 << 10, FileKinds::kRegularOrStream).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(ReadFileTest, MissingFileIsNotFoundWithPathAndReason) {
  const std::string path = TempDir("read_missing") + "/nothing.yaml";
  absl::StatusOr<std::string> read = ReadFile(path);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(read.status().message(), "cannot open " + path + ": No such file or directory");
  EXPECT_EQ(ReadFileBytes(path).status().code(), absl::StatusCode::kNotFound);
}

TEST(ReadFileTest, DirectoryIsAnError) {
  const std::string dir = TempDir("read_dir");
  absl::StatusOr<std::string> read = ReadFile(dir);
  EXPECT_FALSE(read.ok());
  EXPECT_TRUE(absl::StrContains(read.status().message(), "cannot read " + dir + ": not a regular"))
      << read.status();
}

TEST(ReadFileTest, UnreadableFileIsPermissionDenied) {
  const std::string path = TempDir("unreadable") + "/secret";
  ASSERT_TRUE(WriteFileAtomically(path, std::string("x")).ok());
  ASSERT_EQ(chmod(path.c_str(), 0), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (!DropFileCapabilities()) _exit(3);
    const absl::Status status = ReadFile(path).status();
    _exit(status.code() == absl::StatusCode::kPermissionDenied &&
                  absl::StrContains(status.message(), path + ": Permission denied")
              ? 0
              : 1);
  }
  int wait_status = 0;
  ASSERT_EQ(waitpid(pid, &wait_status, 0), pid);
  ASSERT_TRUE(WIFEXITED(wait_status));
  if (WEXITSTATUS(wait_status) == 3) GTEST_SKIP() << "cannot drop CAP_DAC_OVERRIDE";
  EXPECT_EQ(WEXITSTATUS(wait_status), 0);
}

TEST(ReadFileTest, SizeLimit) {
  const std::string dir = TempDir("limit");
  ASSERT_TRUE(WriteFileAtomically(dir + "/ten", std::string("0123456789")).ok());
  EXPECT_TRUE(ReadFile(dir + "/ten", 10).ok());
  absl::StatusOr<std::string> read = ReadFile(dir + "/ten", 9);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(read.status().message(), dir + "/ten")) << read.status();
  // Without a size to go by (a /proc file), the limit holds while reading.
  EXPECT_EQ(ReadFile("/proc/self/status", 100).status().code(),
            absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace mesa::base
