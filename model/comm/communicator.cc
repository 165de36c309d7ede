#include "model/comm/communicator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace mesa::model {

absl::Status Communicator::BroadcastBytes(void*, int64_t, int) {
  return absl::UnimplementedError(absl::StrCat(name(), " communicator: BroadcastBytes"));
}

absl::Status Communicator::Send(const float*, int64_t, int) {
  return absl::UnimplementedError(
      absl::StrCat("the ", name(), " communicator has no point-to-point send (MPI and NCCL have)"));
}

absl::Status Communicator::Recv(float*, int64_t, int) {
  return absl::UnimplementedError(absl::StrCat(
      "the ", name(), " communicator has no point-to-point receive (MPI and NCCL have)"));
}

absl::StatusOr<std::vector<std::string>> AllGatherBytes(Communicator& comm,
                                                        const std::string& mine) {
  const int world = comm.world_size();
  // Sizes as doubles: exact below 2^53 bytes.
  std::vector<double> sizes(world, 0.0);
  sizes[comm.rank()] = static_cast<double>(mine.size());
  if (absl::Status st = comm.AllReduce(sizes.data(), world, ReduceOp::kSum); !st.ok()) return st;
  std::vector<std::string> all(world);
  for (int r = 0; r < world; ++r) {
    all[r] = r == comm.rank() ? mine : std::string(static_cast<size_t>(sizes[r]), '\0');
    if (all[r].empty()) continue;
    if (absl::Status st =
            comm.BroadcastBytes(all[r].data(), static_cast<int64_t>(all[r].size()), r);
        !st.ok()) {
      return st;
    }
  }
  return all;
}

absl::Status Communicator::CheckLayout(const ShardLayout& layout) const {
  if (layout.world_size != world_size() || layout.total < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shard layout for ", layout.world_size, " ranks used on a communicator of ", world_size()));
  }
  return absl::OkStatus();
}

absl::Status Communicator::ReduceScatter(float* data, const ShardLayout& layout, ReduceOp op) {
  if (absl::Status st = CheckLayout(layout); !st.ok()) return st;
  return AllReduce(data, layout.padded_size(), op);
}

absl::Status Communicator::AllGather(float* data, const ShardLayout& layout) {
  if (absl::Status st = CheckLayout(layout); !st.ok()) return st;
  const int64_t shard = layout.shard_size();
  for (int r = 0; r < world_size(); ++r) {
    if (absl::Status st = Broadcast(data + r * shard, shard, r); !st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(int rank, int world_size) {
  if (world_size == 1 && rank == 0) return std::make_unique<LocalCommunicator>();
  return absl::UnimplementedError(
      absl::StrCat("world size ", world_size, " (rank ", rank,
                   "): multi-process communicators are created from the environment "
                   "(CreateCommunicatorFromEnv in model/comm/communicator_factory.h)"));
}

GradientBucketer::GradientBucketer(Communicator* comm, float* data, int64_t n,
                                   int64_t bucket_elements, ReduceOp op)
    : comm_(comm),
      data_(data),
      n_(n),
      bucket_elements_(std::max<int64_t>(1, bucket_elements)),
      op_(op) {}

absl::Status GradientBucketer::Send(int64_t begin, int64_t end) {
  ++buckets_sent_;
  sent_elements_ += end - begin;
  return comm_->AllReduceAsync(data_ + begin, end - begin, op_);
}

absl::Status GradientBucketer::MarkReady(int64_t offset, int64_t n) {
  if (offset < 0 || n < 0 || offset + n > n_) {
    return absl::OutOfRangeError(
        absl::StrCat("gradient range [", offset, ", ", offset + n, ") outside the buffer of ", n_));
  }
  if (n == 0) return absl::OkStatus();
  // Insert and merge with adjacent pending ranges.
  int64_t begin = offset, end = offset + n;
  auto it = std::lower_bound(pending_.begin(), pending_.end(), std::make_pair(begin, end));
  if (it != pending_.end() && it->first < end) {
    return absl::InvalidArgumentError("overlapping gradient ranges marked ready");
  }
  if (it != pending_.begin() && std::prev(it)->second > begin) {
    return absl::InvalidArgumentError("overlapping gradient ranges marked ready");
  }
  if (it != pending_.end() && it->first == end) {
    end = it->second;
    it = pending_.erase(it);
  }
  if (it != pending_.begin() && std::prev(it)->second == begin) {
    --it;
    begin = it->first;
    it = pending_.erase(it);
  }
  if (end - begin >= bucket_elements_) return Send(begin, end);
  pending_.insert(it, {begin, end});
  return absl::OkStatus();
}

absl::Status GradientBucketer::Finish() {
  absl::Status status;
  for (const auto& [begin, end] : pending_) {
    if (status.ok()) status = Send(begin, end);
  }
  pending_.clear();
  absl::Status wait = comm_->WaitAll();
  if (!status.ok()) return status;
  if (!wait.ok()) return wait;
  if (sent_elements_ != n_) {
    return absl::FailedPreconditionError(
        absl::StrCat("only ", sent_elements_, " of ", n_, " gradient elements were marked ready"));
  }
  return absl::OkStatus();
}

}  // namespace mesa::model
