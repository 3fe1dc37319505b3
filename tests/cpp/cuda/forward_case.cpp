// See forward_case.hpp.
#include "forward_case.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <sstream>

#include "core/mask.hpp"
#include "core/numeric.hpp"
#include "cuda/backend.hpp"

namespace fa_cuda_test {
namespace {

using flashattn::Status;
using flashattn::StatusCode;
using flashattn::core::AttentionParams;
using flashattn::core::ElementType;
using flashattn::core::Operand;

constexpr uint16_t kPoison = 0xFFFF;  // NaN in fp16 and bf16

float to_float(uint16_t bits, ElementType t) {
  return t == ElementType::kF16 ? flashattn::core::fp16_to_float(bits)
                                : flashattn::core::bf16_to_float(bits);
}
uint16_t from_float(float x, ElementType t) {
  return t == ElementType::kF16 ? flashattn::core::float_to_fp16(x)
                                : flashattn::core::float_to_bf16(x);
}

#define CUDA_OK(expr)                                                            \
  do {                                                                           \
    const cudaError_t err_ = (expr);                                             \
    if (err_ != cudaSuccess) {                                                   \
      out.status = Status(StatusCode::kCudaError, std::string(#expr) + ": " +   \
                                                      cudaGetErrorString(err_)); \
      return out;                                                                \
    }                                                                            \
  } while (0)

template <class T>
struct DeviceBuffer {
  T* ptr = nullptr;
  ~DeviceBuffer() {
    if (ptr) cudaFree(ptr);
  }
  cudaError_t alloc(size_t count) { return cudaMalloc(&ptr, std::max<size_t>(count, 1) * sizeof(T)); }
};

// A [batch, rows, heads, dim] operand on the host: its elements live in `data` (its own
// buffer or a shared packed one) at the strides of `op`.
struct HostOperand {
  std::vector<uint16_t>* data = nullptr;
  int64_t base = 0;  // element offset of (0, 0, 0, 0)
  Operand op;
};

struct Sequence {
  int64_t q_start, k_start;  // packed row of row 0 (varlen) or batch index * seqlen (dense)
  int sq, sk;
};

}  // namespace

std::string describe(const FwdCase& c) {
  std::ostringstream s;
  s << (c.dtype == ElementType::kF16 ? "fp16" : "bf16") << " b=" << c.batch << " h=" << c.nheads
    << " hk=" << c.nheads_k << " d=" << c.head_dim;
  if (c.varlen_q.empty()) {
    s << " sq=" << c.seqlen_q << " sk=" << c.seqlen_k;
  } else {
    s << " varlen q=[";
    for (int v : c.varlen_q) s << v << ",";
    s << "] k=[";
    for (int v : c.varlen_k) s << v << ",";
    s << "]";
    if (!c.seqused_k.empty()) s << " seqused_k";
  }
  if (c.causal) s << " causal";
  if (c.window_left >= 0 || c.window_right >= 0) {
    s << " window=(" << c.window_left << "," << c.window_right << ")";
  }
  if (c.softcap > 0) s << " softcap=" << c.softcap;
  if (c.scale > 0) s << " scale=" << c.scale;
  if (c.alibi) s << " alibi=" << (c.alibi == 1 ? "[h]" : "[b,h]");
  if (c.layout != Layout::kContiguous) s << " layout=" << static_cast<int>(c.layout);
  if (c.row_pad) s << " row_pad=" << c.row_pad;
  if (!c.want_lse) s << " no-lse";
  if (c.input_scale != 1.f) s << " input_scale=" << c.input_scale;
  return s.str();
}

std::string FwdOutcome::describe() const {
  std::ostringstream s;
  s << "status=" << flashattn::to_string(status.code()) << " " << status.message()
    << " error=" << error << " baseline=" << baseline << " lse_error=" << lse_error
    << " lse_baseline=" << lse_baseline << " empty_row_failures=" << empty_row_failures
    << " gap_writes=" << gap_writes << " nan_outputs=" << nan_outputs
    << (used_workspace ? " (padded path)" : "");
  return s.str();
}

bool FwdOutcome::passed() const {
  return status.ok() && error <= 2 * baseline + 1e-5 && lse_error <= 2 * lse_baseline + 1e-4 &&
         empty_row_failures == 0 && gap_writes == 0 && nan_outputs == 0;
}

FwdOutcome run_forward_case(const FwdCase& c, uint32_t seed) {
  FwdOutcome out;
  std::mt19937 rng(seed);
  const bool varlen = !c.varlen_q.empty();
  const int b = varlen ? static_cast<int>(c.varlen_q.size()) : c.batch;
  const int h = c.nheads, hk = c.nheads_k, d = c.head_dim;
  const ElementType t = c.dtype;

  // Sequences and packed row counts.
  std::vector<Sequence> seqs(b);
  std::vector<int32_t> cu_q(b + 1, 0), cu_k(b + 1, 0);
  int max_q = 0, max_k = 0;
  for (int i = 0; i < b; ++i) {
    const int sq = varlen ? c.varlen_q[i] : c.seqlen_q;
    const int sk_alloc = varlen ? c.varlen_k[i] : c.seqlen_k;
    cu_q[i + 1] = cu_q[i] + sq;
    cu_k[i + 1] = cu_k[i] + sk_alloc;
    max_q = std::max(max_q, sq);
    max_k = std::max(max_k, sk_alloc);
    const int sk = c.seqused_k.empty() ? sk_alloc : c.seqused_k[i];
    seqs[i] = {varlen ? cu_q[i] : int64_t{0}, varlen ? cu_k[i] : int64_t{0}, sq, sk};
  }
  const int64_t rows_q = varlen ? cu_q[b] : int64_t{b} * c.seqlen_q;
  const int64_t rows_k = varlen ? cu_k[b] : int64_t{b} * c.seqlen_k;
  const int seqlen_q = varlen ? max_q : c.seqlen_q;
  const int seqlen_k = varlen ? max_k : c.seqlen_k;

  // Host buffers in the requested layout.
  std::vector<uint16_t> qb, kb, vb, ob, packed;
  auto make = [&](std::vector<uint16_t>& buf, int64_t rows, int seqlen, int heads) {
    HostOperand hop;
    hop.data = &buf;
    const int64_t row = static_cast<int64_t>(heads) * d;
    switch (c.layout) {
      case Layout::kHeadMajor:
        hop.op.head_stride = static_cast<int64_t>(seqlen) * d;
        hop.op.row_stride = d;
        hop.op.batch_stride = row * seqlen;
        break;
      case Layout::kRowPadded:
        hop.op.head_stride = d;
        hop.op.row_stride = row + c.row_pad;
        hop.op.batch_stride = hop.op.row_stride * seqlen;
        break;
      default:
        hop.op.head_stride = d;
        hop.op.row_stride = row;
        hop.op.batch_stride = row * seqlen;
    }
    // Varlen tensors are packed rows: head-major makes no sense there, keep rows packed.
    if (varlen && c.layout == Layout::kHeadMajor) {
      hop.op.head_stride = d;
      hop.op.row_stride = row;
    }
    const int64_t span = varlen ? rows * hop.op.row_stride : b * hop.op.batch_stride;
    buf.assign(static_cast<size_t>(span + 8), 0);
    return hop;
  };
  HostOperand hq, hkk, hv, ho;
  if (c.layout == Layout::kPackedQKV && !varlen) {
    const int64_t row = static_cast<int64_t>(h + 2 * hk) * d;
    packed.assign(static_cast<size_t>(b * c.seqlen_q * row + 8), 0);
    for (HostOperand* hop : {&hq, &hkk, &hv}) {
      hop->data = &packed;
      hop->op.head_stride = d;
      hop->op.row_stride = row;
      hop->op.batch_stride = row * c.seqlen_q;
    }
    hkk.base = static_cast<int64_t>(h) * d;
    hv.base = static_cast<int64_t>(h + hk) * d;
    ho = make(ob, rows_q, seqlen_q, h);
  } else {
    hq = make(qb, rows_q, seqlen_q, h);
    hkk = make(kb, rows_k, seqlen_k, hk);
    hv = make(vb, rows_k, seqlen_k, hk);
    ho = make(ob, rows_q, seqlen_q, h);
  }
  std::normal_distribution<float> normal(0.f, c.input_scale);
  for (std::vector<uint16_t>* buf : {&qb, &kb, &vb, &packed}) {
    for (uint16_t& x : *buf) x = from_float(normal(rng), t);
  }
  std::fill(ob.begin(), ob.end(), kPoison);

  auto offset = [&](const HostOperand& hop, int bi, int64_t row, int head) {
    const Operand& op = hop.op;
    return hop.base + (varlen ? 0 : bi * op.batch_stride) + row * op.row_stride +
           head * op.head_stride;
  };
  auto q_at = [&](int bi, const Sequence& s, int i, int head, int col) {
    const int64_t row = varlen ? s.q_start + i : i;
    return to_float((*hq.data)[offset(hq, bi, row, head) + col], t);
  };
  auto k_at = [&](const HostOperand& hop, int bi, const Sequence& s, int j, int head, int col) {
    const int64_t row = varlen ? s.k_start + j : j;
    return to_float((*hop.data)[offset(hop, bi, row, head) + col], t);
  };

  std::vector<float> slopes;
  if (c.alibi) {
    std::uniform_real_distribution<float> u(0.05f, 0.5f);
    slopes.resize(c.alibi == 1 ? h : static_cast<size_t>(b) * h);
    for (float& x : slopes) x = u(rng);
  }
  const float scale = c.scale > 0 ? c.scale : 1.f / std::sqrt(static_cast<float>(d));
  const int wl = c.window_left;
  const int wr = c.causal ? 0 : c.window_right;

  // Device buffers.
  DeviceBuffer<uint16_t> dq, dk, dv, dout, dpacked;
  DeviceBuffer<float> dlse, dslopes;
  DeviceBuffer<int32_t> dcu_q, dcu_k, dused;
  DeviceBuffer<unsigned char> dws;
  auto upload = [](DeviceBuffer<uint16_t>& dst, const std::vector<uint16_t>& src) {
    cudaError_t e = dst.alloc(src.size());
    if (e == cudaSuccess && !src.empty()) {
      e = cudaMemcpy(dst.ptr, src.data(), src.size() * 2, cudaMemcpyHostToDevice);
    }
    return e;
  };
  AttentionParams p;
  p.dtype = t;
  p.batch = b;
  p.nheads = h;
  p.nheads_k = hk;
  p.head_dim = d;
  p.head_dim_v = d;
  p.seqlen_q = seqlen_q;
  p.seqlen_k = seqlen_k;
  p.total_q = static_cast<int>(rows_q);
  if (c.layout == Layout::kPackedQKV && !varlen) {
    CUDA_OK(upload(dpacked, packed));
    p.q = hq.op;
    p.k = hkk.op;
    p.v = hv.op;
    p.q.ptr = dpacked.ptr;
    p.k.ptr = dpacked.ptr + hkk.base;
    p.v.ptr = dpacked.ptr + hv.base;
  } else {
    CUDA_OK(upload(dq, qb));
    CUDA_OK(upload(dk, kb));
    CUDA_OK(upload(dv, vb));
    p.q = hq.op;
    p.q.ptr = dq.ptr;
    p.k = hkk.op;
    p.k.ptr = dk.ptr;
    p.v = hv.op;
    p.v.ptr = dv.ptr;
  }
  CUDA_OK(upload(dout, ob));
  p.out = ho.op;
  p.out.ptr = dout.ptr;
  const int64_t lse_count = rows_q * h;
  if (c.want_lse) {
    CUDA_OK(dlse.alloc(lse_count));
    CUDA_OK(cudaMemset(dlse.ptr, 0xFF, std::max<int64_t>(lse_count, 1) * 4));
    p.lse = dlse.ptr;
    p.lse_head_stride = varlen ? rows_q : seqlen_q;
    p.lse_batch_stride = varlen ? 0 : int64_t{h} * seqlen_q;
  }
  if (varlen) {
    CUDA_OK(dcu_q.alloc(b + 1));
    CUDA_OK(dcu_k.alloc(b + 1));
    CUDA_OK(cudaMemcpy(dcu_q.ptr, cu_q.data(), (b + 1) * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dcu_k.ptr, cu_k.data(), (b + 1) * 4, cudaMemcpyHostToDevice));
    p.cu_seqlens_q = dcu_q.ptr;
    p.cu_seqlens_k = dcu_k.ptr;
    if (!c.seqused_k.empty()) {
      CUDA_OK(dused.alloc(b));
      CUDA_OK(cudaMemcpy(dused.ptr, c.seqused_k.data(), b * 4, cudaMemcpyHostToDevice));
      p.seqused_k = dused.ptr;
    }
  }
  if (c.alibi) {
    CUDA_OK(dslopes.alloc(slopes.size()));
    CUDA_OK(cudaMemcpy(dslopes.ptr, slopes.data(), slopes.size() * 4, cudaMemcpyHostToDevice));
    p.alibi_slopes = dslopes.ptr;
    p.alibi_batch_stride = c.alibi == 2 ? h : 0;
  }
  p.scale = scale;
  p.scale_log2 = scale * 1.4426950408889634f;
  p.softcap = c.softcap;
  p.window_left = wl;
  p.window_right = wr;
  if (c.dropout_p > 0) {
    p.dropout_p = c.dropout_p;
    p.dropout_rescale = 1.f / (1.f - c.dropout_p);
  }

  out.status = flashattn::cuda::check_forward(p, 0);
  if (!out.status.ok()) return out;
  const size_t ws = flashattn::cuda::forward_workspace_size(p);
  out.used_workspace = ws > 0;
  if (ws > 0) CUDA_OK(dws.alloc(ws));
  out.status = flashattn::cuda::forward(p, dws.ptr, nullptr);
  if (!out.status.ok()) return out;
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaGetLastError());
  std::vector<uint16_t> got(ob.size());
  CUDA_OK(cudaMemcpy(got.data(), dout.ptr, got.size() * 2, cudaMemcpyDeviceToHost));
  std::vector<float> got_lse(static_cast<size_t>(std::max<int64_t>(lse_count, 0)));
  if (c.want_lse && lse_count > 0) {
    CUDA_OK(cudaMemcpy(got_lse.data(), dlse.ptr, lse_count * 4, cudaMemcpyDeviceToHost));
  }

  // Reference, per (batch entry, head, row).
  std::vector<uint8_t> written(ob.size(), 0);
  std::vector<double> score(seqlen_k > 0 ? seqlen_k : 1), score_low(score.size());
  std::vector<double> ref(d), low(d);
  for (int bi = 0; bi < b; ++bi) {
    const Sequence& s = seqs[bi];
    for (int head = 0; head < h; ++head) {
      const int kv_head = head / (h / hk);
      const float slope = c.alibi ? slopes[(c.alibi == 2 ? bi * h : 0) + head] : 0.f;
      for (int i = 0; i < s.sq; ++i) {
        const flashattn::core::KeyRange r =
            flashattn::core::visible_keys(i, s.sq, s.sk, wl, wr);
        double max_ref = -INFINITY, max_low = -INFINITY;
        for (int j = r.begin; j < r.end; ++j) {
          double dot = 0;
          float dot_f = 0;
          for (int col = 0; col < d; ++col) {
            const float qv = q_at(bi, s, i, head, col);
            const float kv = k_at(hkk, bi, s, j, kv_head, col);
            dot += static_cast<double>(qv) * kv;
            dot_f += qv * kv;
          }
          double sc = scale * dot;
          float sl = flashattn::core::round_to(scale * dot_f, t);
          if (c.softcap > 0) {
            sc = c.softcap * std::tanh(sc / c.softcap);
            sl = c.softcap * std::tanh(sl / c.softcap);
          }
          if (c.alibi) {
            const double bias = flashattn::core::alibi_bias(slope, i, j, s.sq, s.sk);
            sc += bias;
            sl += static_cast<float>(bias);
          }
          score[j] = sc;
          score_low[j] = sl;
          max_ref = std::max(max_ref, sc);
          max_low = std::max(max_low, static_cast<double>(sl));
        }
        double sum_ref = 0, sum_low = 0;
        for (int j = r.begin; j < r.end; ++j) {
          sum_ref += std::exp(score[j] - max_ref);
          sum_low += std::exp(static_cast<float>(score_low[j] - max_low));
        }
        std::fill(ref.begin(), ref.end(), 0.0);
        std::fill(low.begin(), low.end(), 0.0);
        for (int j = r.begin; j < r.end; ++j) {
          const double pr = std::exp(score[j] - max_ref) / sum_ref;
          const float pl = flashattn::core::round_to(
              static_cast<float>(std::exp(static_cast<float>(score_low[j] - max_low)) / sum_low), t);
          for (int col = 0; col < d; ++col) {
            const float vv = k_at(hv, bi, s, j, kv_head, col);
            ref[col] += pr * vv;
            low[col] += pl * vv;
          }
        }
        const bool empty = r.end <= r.begin;
        const int64_t row = varlen ? s.q_start + i : i;
        const int64_t o_off = offset(ho, bi, row, head);
        for (int col = 0; col < d; ++col) {
          written[o_off + col] = 1;
          const float g = to_float(got[o_off + col], t);
          const float lo = flashattn::core::round_to(static_cast<float>(low[col]), t);
          if (empty) {
            if (g != 0.f) ++out.empty_row_failures;
            continue;
          }
          if (std::isnan(g)) {
            ++out.nan_outputs;
            continue;
          }
          out.error = std::max(out.error, std::abs(g - ref[col]));
          out.baseline = std::max(out.baseline, std::abs(lo - ref[col]));
        }
        if (c.want_lse) {
          const int64_t l_off = varlen ? head * rows_q + row : (int64_t{bi} * h + head) * seqlen_q + i;
          const float gl = got_lse[l_off];
          if (empty) {
            if (!(std::isinf(gl) && gl < 0)) ++out.empty_row_failures;
          } else if (std::isnan(gl)) {
            ++out.nan_outputs;
          } else {
            const double lr = max_ref + std::log(sum_ref);
            const double ll = max_low + std::log(sum_low);
            out.lse_error = std::max(out.lse_error, std::abs(gl - lr));
            out.lse_baseline = std::max(out.lse_baseline, std::abs(ll - lr));
          }
        }
      }
    }
  }
  for (size_t n = 0; n < got.size(); ++n) {
    if (!written[n] && got[n] != kPoison) ++out.gap_writes;
  }
  return out;
}

}  // namespace fa_cuda_test
