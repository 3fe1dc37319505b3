#include "support/naive_attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace fa_test {

NaiveResult naive_attention(const Rows& q, const Rows& k, const Rows& v, int value_dim,
                            const NaiveOptions& options) {
  const int sq = static_cast<int>(q.size());
  const int sk = static_cast<int>(k.size());
  const int d = q.empty() ? 0 : static_cast<int>(q[0].size());
  const int dv = value_dim;
  const double scale = options.scale != 0.0 ? options.scale : 1.0 / std::sqrt(double(d));
  NaiveResult result;
  result.out.assign(sq, std::vector<double>(dv, 0.0));
  result.lse.assign(sq, -std::numeric_limits<double>::infinity());
  result.p.assign(sq, std::vector<double>(sk, 0.0));

  for (int i = 0; i < sq; ++i) {
    const int diagonal = i + sk - sq;
    std::vector<bool> seen(sk);
    std::vector<double> s(sk);
    double max_score = -std::numeric_limits<double>::infinity();
    for (int j = 0; j < sk; ++j) {
      const bool left_ok = options.window_left < 0 || j >= diagonal - options.window_left;
      const bool right_ok = options.window_right < 0 || j <= diagonal + options.window_right;
      seen[j] = left_ok && right_ok;
      if (!seen[j]) continue;
      double dot = 0.0;
      for (int t = 0; t < d; ++t) dot += q[i][t] * k[j][t];
      s[j] = scale * dot;
      if (options.softcap > 0) s[j] = options.softcap * std::tanh(s[j] / options.softcap);
      s[j] -= options.alibi_slope * std::abs(diagonal - j);
      max_score = std::max(max_score, s[j]);
    }
    if (max_score == -std::numeric_limits<double>::infinity()) continue;
    double sum = 0.0;
    for (int j = 0; j < sk; ++j) sum += seen[j] ? std::exp(s[j] - max_score) : 0.0;
    result.lse[i] = max_score + std::log(sum);
    for (int j = 0; j < sk; ++j) {
      if (!seen[j]) continue;
      result.p[i][j] = std::exp(s[j] - result.lse[i]);
      for (int t = 0; t < dv; ++t) result.out[i][t] += result.p[i][j] * v[j][t];
    }
  }
  return result;
}

Rows head_rows(const HostTensor& t, int batch, int head, int row0, int rows) {
  const bool packed = t.rank() == 3;
  const int64_t seq = packed ? 0 : t.size(1);
  const int64_t heads = t.size(t.rank() - 2);
  const int64_t dim = t.size(t.rank() - 1);
  Rows out(rows, std::vector<double>(dim));
  for (int r = 0; r < rows; ++r) {
    const int64_t row = (packed ? 0 : batch * seq) + row0 + r;
    for (int64_t c = 0; c < dim; ++c) out[r][c] = t.get((row * heads + head) * dim + c);
  }
  return out;
}

namespace {

bool close(double x, double expected, double tolerance) {
  if (std::isinf(expected)) return x == expected;
  return std::fabs(x - expected) <= tolerance * std::max(1.0, std::fabs(expected));
}

}  // namespace

double lse_at(const Problem& problem, const HostTensor& lse, int b, int head, int row) {
  if (problem.varlen()) {
    return lse.get(int64_t(head) * problem.total_q() + problem.q_row0(b) + row);
  }
  return lse.get((int64_t(b) * problem.nheads + head) * problem.seqlen_q + row);
}

::testing::AssertionResult matches_naive(const Problem& p, const Inputs& in, const Outputs& out,
                                         double tolerance) {
  for (int b = 0; b < p.sequences(); ++b) {
    const int q0 = p.q_row0(b), k0 = p.k_row0(b);
    const int sq = p.seqlen_q_of(b), sk = p.keys_of(b);
    for (int h = 0; h < p.nheads; ++h) {
      const int hk = h / (p.nheads / p.nheads_k);
      NaiveOptions options;
      options.scale = p.softmax_scale;
      options.window_left = p.window_left;
      options.window_right = p.causal ? 0 : p.window_right;
      options.softcap = p.softcap;
      if (p.alibi) {
        options.alibi_slope = in.alibi_slopes.get(p.alibi_per_batch ? b * p.nheads + h : h);
      }
      const NaiveResult expected =
          naive_attention(head_rows(in.q, b, h, q0, sq), head_rows(in.k, b, hk, k0, sk),
                          head_rows(in.v, b, hk, k0, sk), p.dim_v(), options);
      const Rows got = head_rows(out.out, b, h, q0, sq);
      for (int i = 0; i < sq; ++i) {
        const double lse = lse_at(p, out.lse, b, h, i);
        if (!close(lse, expected.lse[i], tolerance)) {
          return ::testing::AssertionFailure() << "lse of sequence " << b << " head " << h
                                               << " row " << i << ": " << lse << ", expected "
                                               << expected.lse[i];
        }
        for (int c = 0; c < p.dim_v(); ++c) {
          if (!close(got[i][c], expected.out[i][c], tolerance)) {
            return ::testing::AssertionFailure()
                   << "out of sequence " << b << " head " << h << " row " << i << " dim " << c
                   << ": " << got[i][c] << ", expected " << expected.out[i][c];
          }
        }
      }
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace fa_test
