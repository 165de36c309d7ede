#include "serve/prefix_cache.h"

#include <vector>

#include "gtest/gtest.h"

namespace mesa::serve {
namespace {

TEST(PrefixCacheTest, FindsTheLongestSnapshotOfAPrefixUnderTheSameMode) {
  PrefixCache cache(/*rows=*/3, /*first_row=*/10);
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8};
  ASSERT_EQ(cache.Insert(a, 4, /*mode=*/1), 10);
  ASSERT_EQ(cache.Insert(a, 8, 1), 11);
  EXPECT_EQ(cache.Insert(a, 8, 1), std::nullopt);  // there already
  const std::vector<int64_t> lengths = {4, 8};
  auto hit = cache.Lookup(a, lengths, 1);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->row, 11);
  EXPECT_EQ(hit->length, 8);
  // Another continuation of the first four tokens.
  const std::vector<int32_t> b = {1, 2, 3, 4, 9, 9, 9, 9};
  hit = cache.Lookup(b, lengths, 1);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->length, 4);
  // Another solver setting's states are not these.
  EXPECT_FALSE(cache.Lookup(a, lengths, 2).has_value());
  // Another first token shares nothing.
  EXPECT_FALSE(cache.Lookup(std::vector<int32_t>{0, 2, 3, 4}, {4}, 1).has_value());
  EXPECT_EQ(cache.hits(), 2);
  EXPECT_EQ(cache.misses(), 2);
}

TEST(PrefixCacheTest, OverwritesTheLeastRecentlyUsed) {
  PrefixCache cache(2, 0);
  const std::vector<int32_t> x = {1, 1}, y = {2, 2}, z = {3, 3};
  ASSERT_EQ(cache.Insert(x, 2, 0), 0);
  ASSERT_EQ(cache.Insert(y, 2, 0), 1);
  ASSERT_TRUE(cache.Lookup(x, {2}, 0).has_value());  // x is now the most recent
  ASSERT_EQ(cache.Insert(z, 2, 0), 1);               // so y's row is taken
  EXPECT_FALSE(cache.Lookup(y, {2}, 0).has_value());
  EXPECT_TRUE(cache.Lookup(x, {2}, 0).has_value());
  EXPECT_TRUE(cache.Lookup(z, {2}, 0).has_value());
  EXPECT_EQ(cache.evictions(), 1);
  EXPECT_EQ(cache.entries(), 2);
}

// Prefixes across and at the boundaries of the key's 64-token blocks, inserted from one sequence
// and looked up from another that shares them: the keys agree however they were computed.
TEST(PrefixCacheTest, KeysAgreeAcrossBlockBoundaries) {
  PrefixCache cache(8, 0);
  std::vector<int32_t> a(300), b(300);
  for (int i = 0; i < 300; ++i) a[i] = b[i] = i * 7 % 1000;
  for (int i = 131; i < 300; ++i) b[i] = -i;  // b shares a's first 131 tokens
  for (int64_t length : {63, 64, 65, 128, 130, 131, 256}) {
    ASSERT_TRUE(cache.Insert(a, length, 3).has_value()) << length;
  }
  const std::vector<int64_t> lengths = {1, 63, 64, 65, 100, 128, 130, 131, 132, 256, 300};
  auto hit = cache.Lookup(b, lengths, 3);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->length, 131);
  hit = cache.Lookup(a, lengths, 3);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->length, 256);
  for (int64_t length : {63, 64, 65, 128}) {
    hit = cache.Lookup(b, std::vector<int64_t>{length}, 3);
    ASSERT_TRUE(hit.has_value()) << length;
    EXPECT_EQ(hit->length, length);
  }
  EXPECT_FALSE(cache.Lookup(b, std::vector<int64_t>{132, 256}, 3).has_value());
}

TEST(PrefixCacheTest, NoRowsNoCache) {
  PrefixCache cache(0, 0);
  const std::vector<int32_t> x = {1, 2};
  EXPECT_EQ(cache.Insert(x, 2, 0), std::nullopt);
  EXPECT_FALSE(cache.Lookup(x, {2}, 0).has_value());
}

}  // namespace
}  // namespace mesa::serve
