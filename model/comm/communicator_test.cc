#include "model/comm/communicator.h"

#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace mesa::model {
namespace {

TEST(ShardLayoutTest, EqualChunksLastPadded) {
  const ShardLayout l{1001, 3};
  EXPECT_EQ(l.shard_size(), 334);
  EXPECT_EQ(l.padded_size(), 1002);
  EXPECT_EQ(l.begin(0), 0);
  EXPECT_EQ(l.end(0), 334);
  EXPECT_EQ(l.begin(2), 668);
  EXPECT_EQ(l.end(2), 1001);
  EXPECT_EQ(l.size(2), 333);
  // More ranks than elements: trailing ranks own nothing but still take part.
  const ShardLayout tiny{2, 4};
  EXPECT_EQ(tiny.shard_size(), 1);
  EXPECT_EQ(tiny.size(1), 1);
  EXPECT_EQ(tiny.size(2), 0);
  EXPECT_EQ(tiny.size(3), 0);
  EXPECT_EQ(tiny.padded_size(), 4);
  const ShardLayout exact{12, 4};
  EXPECT_EQ(exact.padded_size(), 12);
  EXPECT_EQ(exact.size(3), 3);
}

TEST(LocalCommunicatorTest, IdentityAndLayoutCheck) {
  LocalCommunicator comm;
  std::vector<float> x = {1, 2, 3};
  ASSERT_TRUE(comm.AllReduce(x.data(), 3, ReduceOp::kAverage).ok());
  EXPECT_EQ(x, (std::vector<float>{1, 2, 3}));
  EXPECT_TRUE(comm.ReduceScatter(x.data(), ShardLayout{3, 1}, ReduceOp::kSum).ok());
  EXPECT_EQ(comm.AllGather(x.data(), ShardLayout{3, 2}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(CreateCommunicator(0, 2).ok());
  EXPECT_TRUE(CreateCommunicator(0, 1).ok());
}

// Records what the bucketer hands to the communicator.
class RecordingCommunicator : public LocalCommunicator {
 public:
  absl::Status AllReduceAsync(float* data, int64_t n, ReduceOp) override {
    sent.emplace_back(data - base, n);
    return absl::OkStatus();
  }
  absl::Status WaitAll() override {
    ++waits;
    return absl::OkStatus();
  }
  float* base = nullptr;
  std::vector<std::pair<int64_t, int64_t>> sent;
  int waits = 0;
};

TEST(GradientBucketerTest, MergesAdjacentRangesIntoBuckets) {
  std::vector<float> grads(100);
  RecordingCommunicator comm;
  comm.base = grads.data();
  GradientBucketer b(&comm, grads.data(), 100, /*bucket_elements=*/30);
  // Backward order: from the end.
  ASSERT_TRUE(b.MarkReady(80, 20).ok());  // 20 < 30: held
  EXPECT_TRUE(comm.sent.empty());
  ASSERT_TRUE(b.MarkReady(70, 10).ok());  // [70,100) = 30: sent
  ASSERT_EQ(comm.sent.size(), 1u);
  EXPECT_EQ(comm.sent[0], std::make_pair(int64_t{70}, int64_t{30}));
  ASSERT_TRUE(b.MarkReady(10, 5).ok());   // not adjacent to anything pending
  ASSERT_TRUE(b.MarkReady(20, 50).ok());  // [20,70): sent on its own
  ASSERT_EQ(comm.sent.size(), 2u);
  EXPECT_EQ(comm.sent[1], std::make_pair(int64_t{20}, int64_t{50}));
  ASSERT_TRUE(b.MarkReady(15, 5).ok());  // merges with [10,15) → [10,20), held
  EXPECT_EQ(b.MarkReady(12, 2).code(), absl::StatusCode::kInvalidArgument);  // overlap
  EXPECT_EQ(b.MarkReady(95, 10).code(), absl::StatusCode::kOutOfRange);
  // Finish with [0,10) missing: sends what is pending, then complains.
  EXPECT_EQ(b.Finish().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(comm.sent.back(), std::make_pair(int64_t{10}, int64_t{10}));
  EXPECT_EQ(comm.waits, 1);
}

TEST(GradientBucketerTest, FinishSendsTheRest) {
  std::vector<float> grads(10);
  RecordingCommunicator comm;
  comm.base = grads.data();
  GradientBucketer b(&comm, grads.data(), 10, 1000);
  ASSERT_TRUE(b.MarkReady(5, 5).ok());
  ASSERT_TRUE(b.MarkReady(0, 5).ok());
  EXPECT_TRUE(comm.sent.empty());
  ASSERT_TRUE(b.Finish().ok());
  ASSERT_EQ(comm.sent.size(), 1u);
  EXPECT_EQ(comm.sent[0], std::make_pair(int64_t{0}, int64_t{10}));
  EXPECT_EQ(b.buckets_sent(), 1);
}

}  // namespace
}  // namespace mesa::model
