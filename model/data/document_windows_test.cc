#include "model/data/document_windows.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mesa::model {
namespace {

constexpr int32_t kBos = 9;

std::string ShardPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name + ".bin";
}

// Rows of the windows as they come, one vector per row.
std::vector<std::vector<int32_t>> Rows(const std::vector<int32_t>& flat, int seq_len) {
  std::vector<std::vector<int32_t>> rows;
  for (size_t i = 0; i < flat.size(); i += seq_len)
    rows.emplace_back(flat.begin() + i, flat.begin() + i + seq_len);
  return rows;
}

TEST(DocumentWindows, OneRowPerDocumentPaddedOrCut) {
  // Documents: [9 1 2], [9 3 4 5 6 7] (longer than the window: cut), [9 8] in one shard; [9 1 1 1]
  // in another.
  const std::string a = ShardPath("docs_a"), b = ShardPath("docs_b");
  ASSERT_TRUE(WriteTokenShard(a, {9, 1, 2, 9, 3, 4, 5, 6, 7, 9, 8}).ok());
  ASSERT_TRUE(WriteTokenShard(b, {9, 1, 1, 1}).ok());
  auto w = DocumentWindows::Open({a, b}, /*batch=*/2, /*seq_len=*/4, 0, 1, kBos);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->documents(), 4);
  std::vector<int32_t> tokens, targets;
  ASSERT_TRUE((*w)->Next(&tokens, &targets, false).ok());
  EXPECT_EQ(Rows(tokens, 4), (std::vector<std::vector<int32_t>>{{9, 1, 2, 9}, {9, 3, 4, 5}}));
  EXPECT_EQ(Rows(targets, 4), (std::vector<std::vector<int32_t>>{{1, 2, 9, 9}, {3, 4, 5, 6}}));
  ASSERT_TRUE((*w)->Next(&tokens, &targets, false).ok());
  EXPECT_EQ(Rows(tokens, 4), (std::vector<std::vector<int32_t>>{{9, 8, 9, 9}, {9, 1, 1, 1}}));
  EXPECT_EQ(Rows(targets, 4), (std::vector<std::vector<int32_t>>{{8, 9, 9, 9}, {1, 1, 1, 9}}));
  EXPECT_EQ((*w)->Next(&tokens, &targets, false).code(), absl::StatusCode::kOutOfRange);
  ASSERT_TRUE((*w)->Next(&tokens, &targets, true).ok());  // wraps for training-style reads
  EXPECT_EQ((*w)->position().epoch, 1);
}

TEST(DocumentWindows, RanksShareTheDocumentsInEqualBatches) {
  const std::string a = ShardPath("docs_ranks");
  // Five documents of one token each after BOS: 9 k.
  ASSERT_TRUE(WriteTokenShard(a, {9, 1, 9, 2, 9, 3, 9, 4, 9, 5}).ok());
  std::vector<int32_t> seen;
  for (int rank = 0; rank < 2; ++rank) {
    auto w = DocumentWindows::Open({a}, 2, 3, rank, 2, kBos);
    ASSERT_TRUE(w.ok()) << w.status();
    std::vector<int32_t> tokens, targets;
    int batches = 0;
    while ((*w)->Next(&tokens, &targets, false).ok()) {
      ++batches;
      for (size_t r = 0; r < 2; ++r) {
        if (tokens[r * 3 + 1] != kBos) seen.push_back(tokens[r * 3 + 1]);
      }
    }
    EXPECT_EQ(batches, 2) << rank;  // ceil(5 / (2 x 2)): the same on both ranks
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<int32_t>{1, 2, 3, 4, 5}));
}

}  // namespace
}  // namespace mesa::model
