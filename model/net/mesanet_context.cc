// Context parallelism of MesaNet (mesanet.h, docs/distributed.md): the hand-over of each mixer
// layer's recurrent state from one slice of a sequence to the next, and of its gradient back.
// A first version: the slices run one after the other per layer (slice r's layer l waits for
// slice r - 1's), which pipelines over the layers but does not overlap a transfer with compute.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/net/mesanet.h"

namespace mesa::model {

absl::Status MesaNet::SetContextParallel(const ContextParallel& cp) {
  if (cp.comm == nullptr) {
    cp_ = {};
    carry_in_.clear();
    carry_out_.reset();
    d_carry_out_.reset();
    d_carry_in_.reset();
    return absl::OkStatus();
  }
  if (!cp.comm->has_point_to_point()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "context parallelism hands states from rank to rank, which the ", cp.comm->name(),
        " communicator cannot (MPI and NCCL can: start CPU ranks with mpirun)"));
  }
  const int world = cp.comm->world_size();
  for (int peer : {cp.prev, cp.next}) {
    if (peer < -1 || peer >= world || peer == cp.comm->rank()) {
      return absl::InvalidArgumentError(absl::StrCat("context-parallel neighbour rank ", peer,
                                                     " of rank ", cp.comm->rank(), " in ", world));
    }
  }
  if (seq_len_ < config_.conv_width - 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a context-parallel slice of ", seq_len_,
        " tokens is shorter than the short convolution's tail of ", config_.conv_width - 1));
  }
  for (int l = 0; l < config_.n_layers; ++l) {
    if (acts_[l].mixer->CarryElems(1) < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("layer ", l, "'s mixer \"", MixerName(config_.LayerMixer(l)),
                       "\" cannot run context-parallel (it has no fixed-size state to hand on)"));
    }
  }
  int64_t most = 0;
  carry_in_.clear();
  for (const LayerActs& a : acts_) {
    const int64_t n = a.mixer->CarryElems(max_batch_);
    most = std::max(most, n);
    carry_in_.push_back(std::make_unique<DeviceFloats>(*backend_, n));
  }
  carry_out_ = std::make_unique<DeviceFloats>(*backend_, most);
  d_carry_out_ = std::make_unique<DeviceFloats>(*backend_, most);
  d_carry_in_ = std::make_unique<DeviceFloats>(*backend_, most);
  for (const auto* buffer : {carry_out_.get(), d_carry_out_.get(), d_carry_in_.get()}) {
    if (buffer->get() == nullptr) return absl::ResourceExhaustedError("context-parallel states");
  }
  for (const auto& buffer : carry_in_) {
    if (buffer->get() == nullptr) return absl::ResourceExhaustedError("context-parallel states");
  }
  cp_ = cp;
  return absl::OkStatus();
}

absl::Status MesaNet::ReceiveCarry(int l, int batch, MixerCall& call) {
  call.carry_out = carry_out_->get();
  if (cp_.prev < 0) return absl::OkStatus();  // the first slice starts from zero
  float* in = carry_in_[l]->get();
  if (absl::Status s = cp_.comm->Recv(in, acts_[l].mixer->CarryElems(batch), cp_.prev); !s.ok()) {
    return s;
  }
  call.carry_in = in;
  return absl::OkStatus();
}

absl::Status MesaNet::SendCarry(int l, int batch) {
  if (cp_.next < 0) return absl::OkStatus();
  return cp_.comm->Send(carry_out_->get(), acts_[l].mixer->CarryElems(batch), cp_.next);
}

absl::Status MesaNet::ReceiveCarryGrad(int l, int batch, MixerCall& call) {
  if (cp_.prev >= 0) {
    call.carry_in = carry_in_[l]->get();
    call.d_carry_in = d_carry_in_->get();
  }
  if (cp_.next < 0) return absl::OkStatus();  // nothing after the last slice: zero gradient
  if (absl::Status s =
          cp_.comm->Recv(d_carry_out_->get(), acts_[l].mixer->CarryElems(batch), cp_.next);
      !s.ok()) {
    return s;
  }
  call.d_carry_out = d_carry_out_->get();
  return absl::OkStatus();
}

absl::Status MesaNet::SendCarryGrad(int l, int batch) {
  if (cp_.prev < 0) return absl::OkStatus();
  return cp_.comm->Send(d_carry_in_->get(), acts_[l].mixer->CarryElems(batch), cp_.prev);
}

namespace {

void FillNan(Backend& backend, float* device, int64_t n) {
  const std::vector<float> nan(n, NAN);
  backend.CopyToDevice(device, nan.data(), sizeof(float) * n);
}

}  // namespace

absl::Status MesaNet::DrainForward(int l, int batch) {
  for (int rest = l; rest < config_.n_layers; ++rest) {
    const int64_t n = acts_[rest].mixer->CarryElems(batch);
    if (rest > l && cp_.prev >= 0) {
      if (absl::Status s = cp_.comm->Recv(carry_in_[rest]->get(), n, cp_.prev); !s.ok()) return s;
    }
    if (cp_.next >= 0) {
      FillNan(*backend_, carry_out_->get(), n);
      if (absl::Status s = SendCarry(rest, batch); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

absl::Status MesaNet::DrainBackward(int l, int batch) {
  for (int rest = l; rest >= 0; --rest) {
    const int64_t n = acts_[rest].mixer->CarryElems(batch);
    if (rest < l && cp_.next >= 0) {
      if (absl::Status s = cp_.comm->Recv(d_carry_out_->get(), n, cp_.next); !s.ok()) return s;
    }
    if (cp_.prev >= 0) {
      FillNan(*backend_, d_carry_in_->get(), n);
      if (absl::Status s = SendCarryGrad(rest, batch); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace mesa::model
