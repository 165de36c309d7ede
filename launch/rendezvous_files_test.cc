#include "launch/rendezvous_files.h"

#include "gtest/gtest.h"

namespace mesa::launch {
namespace {

TEST(RendezvousFiles, KeysAreSafeFileNames) {
  EXPECT_TRUE(IsRendezvousKey("job-1.2.nccl"));
  EXPECT_TRUE(IsRendezvousKey(std::string(128, 'a')));
  EXPECT_FALSE(IsRendezvousKey(std::string(129, 'a')));
  EXPECT_FALSE(IsRendezvousKey(""));
  EXPECT_FALSE(IsRendezvousKey("."));
  EXPECT_FALSE(IsRendezvousKey(".."));
  EXPECT_FALSE(IsRendezvousKey("a/b"));
  EXPECT_FALSE(IsRendezvousKey("a+want"));
}

TEST(RendezvousFiles, EntriesAreClassifiedAndTemporariesIgnored) {
  std::string key;
  EXPECT_EQ(ClassifyRendezvousEntry("j.1.tcp", &key), RendezvousEntry::kValue);
  EXPECT_EQ(key, "j.1.tcp");
  EXPECT_EQ(ClassifyRendezvousEntry("j.1.nccl+want", &key), RendezvousEntry::kWant);
  EXPECT_EQ(key, "j.1.nccl");
  EXPECT_EQ(ClassifyRendezvousEntry("j.1.tcp+tmp.123", &key), RendezvousEntry::kOther);
  EXPECT_EQ(ClassifyRendezvousEntry("+want", &key), RendezvousEntry::kOther);
  EXPECT_EQ(RendezvousValuePath("/r", "k"), "/r/k");
  EXPECT_EQ(RendezvousWantPath("/r", "k"), "/r/k+want");
}

}  // namespace
}  // namespace mesa::launch
