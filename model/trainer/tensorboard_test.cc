#include "model/trainer/tensorboard.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tensorboard/event.pb.h"

namespace mesa::model {
namespace {

uint64_t ReadLittleEndian(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t(static_cast<unsigned char>(s[at + i])) << (8 * i);
  return v;
}

// The file's events, each record's two checksums checked.
std::vector<tensorboard::Event> ReadEvents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<tensorboard::Event> events;
  size_t at = 0;
  while (at < bytes.size()) {
    EXPECT_LE(at + 12, bytes.size());
    const uint64_t length = ReadLittleEndian(bytes, at, 8);
    EXPECT_EQ(ReadLittleEndian(bytes, at + 8, 4), MaskedCrc32c(bytes.substr(at, 8)));
    const std::string data = bytes.substr(at + 12, length);
    EXPECT_EQ(ReadLittleEndian(bytes, at + 12 + length, 4), MaskedCrc32c(data));
    events.emplace_back();
    EXPECT_TRUE(events.back().ParseFromString(data));
    at += 12 + length + 4;
  }
  return events;
}

TEST(TensorBoardTest, Crc32cMatchesTheCastagnoliCheckValues) {
  EXPECT_EQ(Crc32c("123456789"), 0xe3069283u);  // the CRC-32C check value
  EXPECT_EQ(Crc32c(""), 0u);
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8a9136aau);  // RFC 3720 B.4
  EXPECT_EQ(Crc32c(std::string(32, '\xff')), 0x62a8ab43u);
  const uint32_t crc = Crc32c("123456789");
  EXPECT_EQ(MaskedCrc32c("123456789"), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

TEST(TensorBoardTest, WritesAVersionRecordThenScalarEvents) {
  const std::string dir = std::string(getenv("TEST_TMPDIR")) + "/run/tensorboard";
  const absl::Time now = absl::FromUnixSeconds(1796630400);
  auto writer = TensorBoardWriter::Open(dir, now);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)
                  ->Scalars(7, now + absl::Seconds(2), {{"train/loss", 2.5}, {"train/lr", 1e-3}})
                  .ok());
  ASSERT_TRUE((*writer)->Scalars(8, now + absl::Seconds(3), {{"train/loss", 2.25}}).ok());
  EXPECT_EQ(std::filesystem::path((*writer)->path()).parent_path(), dir);
  EXPECT_EQ(std::filesystem::path((*writer)->path())
                .filename()
                .string()
                .rfind("events.out.tfevents.1796630400.", 0),
            0u);
  // Readable while the writer is open (every event is flushed).
  const std::vector<tensorboard::Event> events = ReadEvents((*writer)->path());
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].file_version(), "brain.Event:2");
  EXPECT_DOUBLE_EQ(events[0].wall_time(), 1796630400.0);
  EXPECT_EQ(events[1].step(), 7);
  EXPECT_DOUBLE_EQ(events[1].wall_time(), 1796630402.0);
  ASSERT_EQ(events[1].summary().value_size(), 2);
  EXPECT_EQ(events[1].summary().value(0).tag(), "train/loss");
  EXPECT_FLOAT_EQ(events[1].summary().value(0).simple_value(), 2.5f);
  EXPECT_FLOAT_EQ(events[1].summary().value(1).simple_value(), 1e-3f);
  EXPECT_EQ(events[2].step(), 8);

  // A second attempt of the run gets a file of its own in the same directory.
  auto again = TensorBoardWriter::Open(dir, now + absl::Seconds(60));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_NE((*again)->path(), (*writer)->path());
  EXPECT_EQ(ReadEvents((*writer)->path()).size(), 3u);
}

TEST(TensorBoardTest, ADirectoryThatCannotBeMadeIsAClearError) {
  const std::string file = std::string(getenv("TEST_TMPDIR")) + "/plain_file";
  std::ofstream(file) << "x";
  auto writer = TensorBoardWriter::Open(file + "/tensorboard", absl::Now());
  ASSERT_FALSE(writer.ok());
  EXPECT_NE(writer.status().message().find("TensorBoard directory"), std::string::npos)
      << writer.status();
}

}  // namespace
}  // namespace mesa::model
