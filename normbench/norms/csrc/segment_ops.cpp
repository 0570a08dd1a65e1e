// CPU kernels of normbench's norms on sequences: one pass over memory where torch's eager ops
// need several (each op reads and writes the whole tensor). Built on first use by
// normbench/norms/kernels.py (torch.utils.cpp_extension); the maths is documented there.
//
// "Segment" kernels see a (N, T, C) contiguous tensor (N segments of T rows of C channels) with
// optional row weights w (N, T) (0/1 masks: rows with w = 0 are skipped, their outputs are 0),
// and per-segment or shared per-channel coefficients of shape (N, C) or (1, C).
// "Row" kernels see an (A, C) contiguous tensor and work along each row (RMSNorm).
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <ATen/OpMathType.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace {

template <typename T>
const T* ptr_or_null(const torch::Tensor& t) {
  return t.numel() ? t.data_ptr<T>() : nullptr;
}

// Σ_{c<k} a[c]·b[c] with 16 independent partial sums: a single running sum is one long chain of
// dependent additions that the compiler may not reorder (no -ffast-math), so it runs neither in
// SIMD lanes nor pipelined; 16 lanes let it vectorize.
template <typename acc_t, typename T>
acc_t dot_lanes(const T* __restrict__ a, const T* __restrict__ b, int64_t k) {
  constexpr int64_t L = 16;
  acc_t part[L] = {};
  int64_t c = 0;
  for (; c + L <= k; c += L) {
    for (int64_t j = 0; j < L; ++j) part[j] += acc_t(a[c + j]) * acc_t(b[c + j]);
  }
  for (; c < k; ++c) part[0] += acc_t(a[c]) * acc_t(b[c]);
  acc_t total = 0;
  for (int64_t j = 0; j < L; ++j) total += part[j];
  return total;
}

// Σ_{c<k} a[c]·b[c]·d[c], in 16 lanes like dot_lanes.
template <typename acc_t, typename T>
acc_t dot3_lanes(const T* __restrict__ a, const T* __restrict__ b, const T* __restrict__ d, int64_t k) {
  constexpr int64_t L = 16;
  acc_t part[L] = {};
  int64_t c = 0;
  for (; c + L <= k; c += L) {
    for (int64_t j = 0; j < L; ++j) part[j] += acc_t(a[c + j]) * acc_t(b[c + j]) * acc_t(d[c + j]);
  }
  for (; c < k; ++c) part[0] += acc_t(a[c]) * acc_t(b[c]) * acc_t(d[c]);
  acc_t total = 0;
  for (int64_t j = 0; j < L; ++j) total += part[j];
  return total;
}

// Row ranges for per-thread partial column sums: `chunks` contiguous blocks of rows.
int64_t row_chunks(int64_t rows) {
  return std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), rows));
}

int64_t coef_stride(const torch::Tensor& t, int64_t c) {
  return t.size(0) == 1 ? 0 : c;
}

void check_segments(const torch::Tensor& x, const torch::Tensor& w) {
  TORCH_CHECK(x.dim() == 3 && x.is_contiguous() && x.device().is_cpu(), "segment kernels: x must be a contiguous CPU (N, T, C) tensor");
  if (w.numel()) {
    TORCH_CHECK(w.is_contiguous() && w.scalar_type() == x.scalar_type() && w.numel() == x.size(0) * x.size(1),
                "segment kernels: w must be a contiguous (N, T) tensor of x's dtype");
  }
}

}  // namespace

// Σ_t w·x (square = false) or Σ_t w·(x − center)² (square = true; center (N, C) or (1, C)) → (N, C).
torch::Tensor seg_sums(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& center, bool square) {
  check_segments(x, w);
  const int64_t N = x.size(0), T = x.size(1), C = x.size(2);
  auto out = torch::zeros({N, C}, x.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "seg_sums", [&] {
    const scalar_t* __restrict__ xp = x.data_ptr<scalar_t>();
    const scalar_t* __restrict__ wp = ptr_or_null<scalar_t>(w);
    const scalar_t* __restrict__ mp = ptr_or_null<scalar_t>(center);
    const int64_t ms = square ? coef_stride(center, C) : 0;
    scalar_t* __restrict__ op = out.data_ptr<scalar_t>();
    at::parallel_for(0, N, 1, [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n) {
        scalar_t* __restrict__ o = op + n * C;
        const scalar_t* __restrict__ mu = square ? mp + n * ms : nullptr;
        for (int64_t t = 0; t < T; ++t) {
          const scalar_t wt = wp ? wp[n * T + t] : scalar_t(1);
          if (wt == scalar_t(0)) continue;
          const scalar_t* __restrict__ xr = xp + (n * T + t) * C;
          if (square) {
            for (int64_t c = 0; c < C; ++c) {
              const scalar_t d = xr[c] - mu[c];
              o[c] += wt * d * d;
            }
          } else {
            for (int64_t c = 0; c < C; ++c) o[c] += wt * xr[c];
          }
        }
      }
    });
  });
  return out;
}

// y = (x·a + b)·w + v, a and b (N, C) or (1, C), w and v (N, T) per row, each optional (w: 1,
// v: 0); rows with w = 0 get v.
torch::Tensor seg_affine(const torch::Tensor& x, const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& w,
                         const torch::Tensor& v) {
  check_segments(x, w);
  const int64_t N = x.size(0), T = x.size(1), C = x.size(2);
  TORCH_CHECK(!v.numel() || (v.is_contiguous() && v.numel() == N * T && v.scalar_type() == x.scalar_type()),
              "seg_affine: v must be a contiguous (N, T) tensor of x's dtype");
  auto y = torch::empty_like(x);
  const int64_t sa = coef_stride(a, C), sb = coef_stride(b, C);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "seg_affine", [&] {
    const scalar_t* __restrict__ xp = x.data_ptr<scalar_t>();
    const scalar_t* __restrict__ ap = a.data_ptr<scalar_t>();
    const scalar_t* __restrict__ bp = b.data_ptr<scalar_t>();
    const scalar_t* __restrict__ wp = ptr_or_null<scalar_t>(w);
    const scalar_t* __restrict__ vp = ptr_or_null<scalar_t>(v);
    scalar_t* __restrict__ yp = y.data_ptr<scalar_t>();
    at::parallel_for(0, N, 1, [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n) {
        const scalar_t* __restrict__ an = ap + n * sa;
        const scalar_t* __restrict__ bn = bp + n * sb;
        for (int64_t t = 0; t < T; ++t) {
          const scalar_t* __restrict__ xr = xp + (n * T + t) * C;
          scalar_t* __restrict__ yr = yp + (n * T + t) * C;
          const scalar_t wt = wp ? wp[n * T + t] : scalar_t(1);
          const scalar_t vt = vp ? vp[n * T + t] : scalar_t(0);
          if (wt == scalar_t(0)) {
            std::fill(yr, yr + C, vt);
          } else if (wt == scalar_t(1) && !vp) {
            for (int64_t c = 0; c < C; ++c) yr[c] = xr[c] * an[c] + bn[c];
          } else {
            for (int64_t c = 0; c < C; ++c) yr[c] = (xr[c] * an[c] + bn[c]) * wt + vt;
          }
        }
      }
    });
  });
  return y;
}

// (Σ_t w·g, Σ_t w·g·(x − center)) → (2, N, C); center (N, C), (1, C) or empty (0).
torch::Tensor seg_dot(const torch::Tensor& g, const torch::Tensor& x, const torch::Tensor& center, const torch::Tensor& w) {
  check_segments(x, w);
  TORCH_CHECK(g.sizes() == x.sizes() && g.is_contiguous() && g.scalar_type() == x.scalar_type(), "seg_dot: g must match x");
  const int64_t N = x.size(0), T = x.size(1), C = x.size(2);
  auto out = torch::zeros({2, N, C}, x.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "seg_dot", [&] {
    const scalar_t* __restrict__ xp = x.data_ptr<scalar_t>();
    const scalar_t* __restrict__ gp = g.data_ptr<scalar_t>();
    const scalar_t* __restrict__ mp = ptr_or_null<scalar_t>(center);
    const int64_t ms = mp ? coef_stride(center, C) : 0;
    const scalar_t* __restrict__ wp = ptr_or_null<scalar_t>(w);
    scalar_t* __restrict__ op = out.data_ptr<scalar_t>();
    std::vector<scalar_t> zeros(mp ? 0 : C, scalar_t(0));
    at::parallel_for(0, N, 1, [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n) {
        scalar_t* __restrict__ s0 = op + n * C;
        scalar_t* __restrict__ s1 = op + (N + n) * C;
        const scalar_t* __restrict__ mu = mp ? mp + n * ms : zeros.data();
        for (int64_t t = 0; t < T; ++t) {
          const scalar_t wt = wp ? wp[n * T + t] : scalar_t(1);
          if (wt == scalar_t(0)) continue;
          const scalar_t* __restrict__ xr = xp + (n * T + t) * C;
          const scalar_t* __restrict__ gr = gp + (n * T + t) * C;
          for (int64_t c = 0; c < C; ++c) {
            const scalar_t wg = wt * gr[c];
            s0[c] += wg;
            s1[c] += wg * (xr[c] - mu[c]);
          }
        }
      }
    });
  });
  return out;
}

// dx = (g·p·u + x·q + r)·w, p, q, r (N, C) or (1, C), u and w (N, T) per row, each optional
// (1); 0 on rows with w = 0.
torch::Tensor seg_grad(const torch::Tensor& g, const torch::Tensor& x, const torch::Tensor& p, const torch::Tensor& q,
                       const torch::Tensor& r, const torch::Tensor& w, const torch::Tensor& u) {
  check_segments(x, w);
  TORCH_CHECK(g.sizes() == x.sizes() && g.is_contiguous() && g.scalar_type() == x.scalar_type(), "seg_grad: g must match x");
  const int64_t N = x.size(0), T = x.size(1), C = x.size(2);
  TORCH_CHECK(!u.numel() || (u.is_contiguous() && u.numel() == N * T && u.scalar_type() == x.scalar_type()),
              "seg_grad: u must be a contiguous (N, T) tensor of x's dtype");
  auto dx = torch::empty_like(x);
  const int64_t sp = coef_stride(p, C), sq = coef_stride(q, C), sr = coef_stride(r, C);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "seg_grad", [&] {
    const scalar_t* __restrict__ xp = x.data_ptr<scalar_t>();
    const scalar_t* __restrict__ gp = g.data_ptr<scalar_t>();
    const scalar_t* __restrict__ pp = p.data_ptr<scalar_t>();
    const scalar_t* __restrict__ qp = q.data_ptr<scalar_t>();
    const scalar_t* __restrict__ rp = r.data_ptr<scalar_t>();
    const scalar_t* __restrict__ wp = ptr_or_null<scalar_t>(w);
    const scalar_t* __restrict__ up = ptr_or_null<scalar_t>(u);
    scalar_t* __restrict__ dp = dx.data_ptr<scalar_t>();
    at::parallel_for(0, N, 1, [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n) {
        const scalar_t* __restrict__ pn = pp + n * sp;
        const scalar_t* __restrict__ qn = qp + n * sq;
        const scalar_t* __restrict__ rn = rp + n * sr;
        for (int64_t t = 0; t < T; ++t) {
          const scalar_t* __restrict__ xr = xp + (n * T + t) * C;
          const scalar_t* __restrict__ gr = gp + (n * T + t) * C;
          scalar_t* __restrict__ dr = dp + (n * T + t) * C;
          const scalar_t wt = wp ? wp[n * T + t] : scalar_t(1);
          const scalar_t ut = up ? up[n * T + t] : scalar_t(1);
          if (wt == scalar_t(0)) {
            std::fill(dr, dr + C, scalar_t(0));
          } else if (wt == scalar_t(1) && !up) {
            for (int64_t c = 0; c < C; ++c) dr[c] = gr[c] * pn[c] + xr[c] * qn[c] + rn[c];
          } else {
            for (int64_t c = 0; c < C; ++c) dr[c] = (gr[c] * pn[c] * ut + xr[c] * qn[c] + rn[c]) * wt;
          }
        }
      }
    });
  });
  return dx;
}

// Σ_c g·(x·a + b) along each row: g, x (N, T, C), a and b (N, C) or (1, C) → (N, T).
torch::Tensor seg_row_dot(const torch::Tensor& g, const torch::Tensor& x, const torch::Tensor& a, const torch::Tensor& b) {
  TORCH_CHECK(x.dim() == 3 && x.is_contiguous() && x.device().is_cpu(), "seg_row_dot: x must be a contiguous CPU (N, T, C) tensor");
  TORCH_CHECK(g.sizes() == x.sizes() && g.is_contiguous() && g.scalar_type() == x.scalar_type(), "seg_row_dot: g must match x");
  const int64_t N = x.size(0), T = x.size(1), C = x.size(2);
  auto out = torch::empty({N, T}, x.options());
  const int64_t sa = coef_stride(a, C), sb = coef_stride(b, C);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "seg_row_dot", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* __restrict__ xp = x.data_ptr<scalar_t>();
    const scalar_t* __restrict__ gp = g.data_ptr<scalar_t>();
    const scalar_t* __restrict__ ap = a.data_ptr<scalar_t>();
    const scalar_t* __restrict__ bp = b.data_ptr<scalar_t>();
    scalar_t* __restrict__ op = out.data_ptr<scalar_t>();
    at::parallel_for(0, N, 1, [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n) {
        for (int64_t t = 0; t < T; ++t) {
          const scalar_t* __restrict__ xr = xp + (n * T + t) * C;
          const scalar_t* __restrict__ gr = gp + (n * T + t) * C;
          op[n * T + t] = scalar_t(dot3_lanes<acc_t>(gr, xr, ap + n * sa, C) + dot_lanes<acc_t>(gr, bp + n * sb, C));
        }
      }
    });
  });
  return out;
}

// RMS over the first k channels of each row of an (A, C) tensor: s = 1/sqrt(mean_{c<k} x² + eps),
// y = x·s·γ (γ optional). Returns (y, s) with s of shape (A).
std::vector<torch::Tensor> row_rms_forward(const torch::Tensor& x, const torch::Tensor& gamma, int64_t k, double eps) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && x.device().is_cpu(), "row_rms_forward: x must be a contiguous CPU (A, C) tensor");
  TORCH_CHECK(k >= 1 && k <= x.size(1), "row_rms_forward: k out of range");
  const int64_t A = x.size(0), C = x.size(1);
  auto y = torch::empty_like(x);
  auto inv = torch::empty({A}, x.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "row_rms_forward", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* __restrict__ xp = x.data_ptr<scalar_t>();
    const scalar_t* __restrict__ gp = ptr_or_null<scalar_t>(gamma);
    scalar_t* __restrict__ yp = y.data_ptr<scalar_t>();
    scalar_t* __restrict__ ip = inv.data_ptr<scalar_t>();
    at::parallel_for(0, A, 16, [&](int64_t a0, int64_t a1) {
      for (int64_t a = a0; a < a1; ++a) {
        const scalar_t* __restrict__ xr = xp + a * C;
        scalar_t* __restrict__ yr = yp + a * C;
        const acc_t ss = dot_lanes<acc_t>(xr, xr, k);
        const scalar_t s = scalar_t(acc_t(1) / std::sqrt(ss / acc_t(k) + acc_t(eps)));
        ip[a] = s;
        if (gp) {
          for (int64_t c = 0; c < C; ++c) yr[c] = xr[c] * s * gp[c];
        } else {
          for (int64_t c = 0; c < C; ++c) yr[c] = xr[c] * s;
        }
      }
    });
  });
  return {y, inv};
}

// Backward of row_rms_forward, g = dy·γ, x̂ = x·s: dx = s·(g − [c < k]·x̂·Σ_c g·x̂ / k),
// dγ = Σ_a dy·x̂ (empty when γ is). Returns (dx, dγ).
std::vector<torch::Tensor> row_rms_backward(const torch::Tensor& dy, const torch::Tensor& x, const torch::Tensor& inv,
                                            const torch::Tensor& gamma, int64_t k) {
  TORCH_CHECK(dy.sizes() == x.sizes() && dy.is_contiguous() && x.is_contiguous(), "row_rms_backward: dy must match x");
  const int64_t A = x.size(0), C = x.size(1);
  auto dx = torch::empty_like(x);
  const bool has_gamma = gamma.numel() > 0;
  const int64_t chunks = has_gamma ? std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), A)) : 1;
  auto partial = torch::zeros({has_gamma ? chunks : 0, C}, x.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "row_rms_backward", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* __restrict__ xp = x.data_ptr<scalar_t>();
    const scalar_t* __restrict__ gp = dy.data_ptr<scalar_t>();
    const scalar_t* __restrict__ ip = inv.data_ptr<scalar_t>();
    const scalar_t* __restrict__ wp = ptr_or_null<scalar_t>(gamma);
    scalar_t* __restrict__ dp = dx.data_ptr<scalar_t>();
    scalar_t* __restrict__ pp = has_gamma ? partial.data_ptr<scalar_t>() : nullptr;
    at::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t ch = c0; ch < c1; ++ch) {
        const int64_t a_begin = A * ch / chunks, a_end = A * (ch + 1) / chunks;
        scalar_t* __restrict__ dgamma = pp ? pp + ch * C : nullptr;
        for (int64_t a = a_begin; a < a_end; ++a) {
          const scalar_t* __restrict__ xr = xp + a * C;
          const scalar_t* __restrict__ gr = gp + a * C;
          scalar_t* __restrict__ dr = dp + a * C;
          const scalar_t s = ip[a];
          acc_t dot = 0;  // Σ_c γ·dy·x
          if (wp) {
            for (int64_t c = 0; c < C; ++c) dgamma[c] += gr[c] * xr[c] * s;
            constexpr int64_t L = 16;
            acc_t part[L] = {};
            int64_t c = 0;
            for (; c + L <= C; c += L) {
              for (int64_t j = 0; j < L; ++j) part[j] += acc_t(gr[c + j]) * acc_t(xr[c + j]) * acc_t(wp[c + j]);
            }
            for (; c < C; ++c) part[0] += acc_t(gr[c]) * acc_t(xr[c]) * acc_t(wp[c]);
            for (int64_t j = 0; j < L; ++j) dot += part[j];
          } else {
            dot = dot_lanes<acc_t>(gr, xr, C);
          }
          const scalar_t coef = scalar_t(dot) * s * s * s / scalar_t(k);  // s³·Σ g·x / k
          if (wp) {
            for (int64_t c = 0; c < C; ++c) dr[c] = gr[c] * wp[c] * s;
          } else {
            for (int64_t c = 0; c < C; ++c) dr[c] = gr[c] * s;
          }
          for (int64_t c = 0; c < k; ++c) dr[c] -= xr[c] * coef;
        }
      }
    });
  });
  return {dx, has_gamma ? partial.sum(0) : partial};
}

// PowerNorm's training forward on rows (A, C), G groups of C/G channels (Shen et al. 2020):
// GroupScaling s[a, g] = w_a / sqrt(mean_{c in g} x² + eps) (0 on rows with w = 0), and the
// column sums Σ_a (x·s)² (ψ²_B·n). Returns (s (A, G), sums (C)).
std::vector<torch::Tensor> pn_rows_forward(const torch::Tensor& x, const torch::Tensor& w, int64_t groups, double eps) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && x.device().is_cpu(), "pn_rows_forward: x must be a contiguous CPU (A, C) tensor");
  const int64_t A = x.size(0), C = x.size(1), cg = C / groups;
  TORCH_CHECK(groups >= 1 && cg * groups == C, "pn_rows_forward: groups must divide C");
  auto inv = torch::empty({A, groups}, x.options());
  const int64_t chunks = row_chunks(A);
  auto partial = torch::zeros({chunks, C}, x.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "pn_rows_forward", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* __restrict__ xp = x.data_ptr<scalar_t>();
    const scalar_t* __restrict__ wp = ptr_or_null<scalar_t>(w);
    scalar_t* __restrict__ ip = inv.data_ptr<scalar_t>();
    scalar_t* __restrict__ pp = partial.data_ptr<scalar_t>();
    at::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t ch = c0; ch < c1; ++ch) {
        scalar_t* __restrict__ sums = pp + ch * C;
        for (int64_t a = A * ch / chunks; a < A * (ch + 1) / chunks; ++a) {
          const scalar_t wt = wp ? wp[a] : scalar_t(1);
          const scalar_t* __restrict__ xr = xp + a * C;
          for (int64_t g = 0; g < groups; ++g) {
            const scalar_t* __restrict__ xg = xr + g * cg;
            scalar_t s = 0;
            if (wt != scalar_t(0)) {
              const acc_t ss = dot_lanes<acc_t>(xg, xg, cg);
              s = scalar_t(acc_t(wt) / std::sqrt(ss / acc_t(cg) + acc_t(eps)));
            }
            ip[a * groups + g] = s;
            if (s == scalar_t(0)) continue;
            const scalar_t s2 = s * s;
            scalar_t* __restrict__ sg = sums + g * cg;
            for (int64_t c = 0; c < cg; ++c) sg[c] += xg[c] * xg[c] * s2;
          }
        }
      }
    });
  });
  return {inv, partial.sum(0)};
}

// y = x·s[a, g]·coef[c] + bias[c]·w_a (bias optional).
torch::Tensor pn_rows_affine(const torch::Tensor& x, const torch::Tensor& inv, const torch::Tensor& coef,
                             const torch::Tensor& bias, const torch::Tensor& w) {
  const int64_t A = x.size(0), C = x.size(1), groups = inv.size(1), cg = C / groups;
  auto y = torch::empty_like(x);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "pn_rows_affine", [&] {
    const scalar_t* __restrict__ xp = x.data_ptr<scalar_t>();
    const scalar_t* __restrict__ ip = inv.data_ptr<scalar_t>();
    const scalar_t* __restrict__ ap = coef.data_ptr<scalar_t>();
    const scalar_t* __restrict__ bp = ptr_or_null<scalar_t>(bias);
    const scalar_t* __restrict__ wp = ptr_or_null<scalar_t>(w);
    scalar_t* __restrict__ yp = y.data_ptr<scalar_t>();
    at::parallel_for(0, A, 16, [&](int64_t a0, int64_t a1) {
      for (int64_t a = a0; a < a1; ++a) {
        const scalar_t wt = wp ? wp[a] : scalar_t(1);
        const scalar_t* __restrict__ xr = xp + a * C;
        scalar_t* __restrict__ yr = yp + a * C;
        for (int64_t g = 0; g < groups; ++g) {
          const scalar_t s = ip[a * groups + g];
          const int64_t o = g * cg;
          if (bp) {
            for (int64_t c = 0; c < cg; ++c) yr[o + c] = xr[o + c] * s * ap[o + c] + bp[o + c] * wt;
          } else {
            for (int64_t c = 0; c < cg; ++c) yr[o + c] = xr[o + c] * s * ap[o + c];
          }
        }
      }
    });
  });
  return y;
}

// PowerNorm's approximate backward on rows, GroupScaling's exact backward included (see
// batch_functional._PowerNormFunction): per row and group, dot = s·Σ p·dy·x − s²·Σ q·x²,
// dx = s·p·dy − s²·x·(q + dot/(C/G)); and the column sums Σ_a w·dy and Σ_a dy·x·s.
// Returns (dx, Σ w·dy (C), Σ dy·x̃ (C)).
std::vector<torch::Tensor> pn_rows_backward(const torch::Tensor& dy, const torch::Tensor& x, const torch::Tensor& inv,
                                            const torch::Tensor& p, const torch::Tensor& q, const torch::Tensor& w) {
  TORCH_CHECK(dy.sizes() == x.sizes() && dy.is_contiguous() && x.is_contiguous(), "pn_rows_backward: dy must match x");
  const int64_t A = x.size(0), C = x.size(1), groups = inv.size(1), cg = C / groups;
  auto dx = torch::empty_like(x);
  const int64_t chunks = row_chunks(A);
  auto partial = torch::zeros({2, chunks, C}, x.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "pn_rows_backward", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* __restrict__ xp = x.data_ptr<scalar_t>();
    const scalar_t* __restrict__ gp = dy.data_ptr<scalar_t>();
    const scalar_t* __restrict__ ip = inv.data_ptr<scalar_t>();
    const scalar_t* __restrict__ pp = p.data_ptr<scalar_t>();
    const scalar_t* __restrict__ qp = q.data_ptr<scalar_t>();
    const scalar_t* __restrict__ wp = ptr_or_null<scalar_t>(w);
    scalar_t* __restrict__ dp = dx.data_ptr<scalar_t>();
    scalar_t* __restrict__ part = partial.data_ptr<scalar_t>();
    at::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t ch = c0; ch < c1; ++ch) {
        scalar_t* __restrict__ sum_dy = part + ch * C;
        scalar_t* __restrict__ sum_dy_xt = part + (chunks + ch) * C;
        for (int64_t a = A * ch / chunks; a < A * (ch + 1) / chunks; ++a) {
          const scalar_t wt = wp ? wp[a] : scalar_t(1);
          const scalar_t* __restrict__ xr = xp + a * C;
          const scalar_t* __restrict__ gr = gp + a * C;
          scalar_t* __restrict__ dr = dp + a * C;
          if (wt != scalar_t(0)) {
            for (int64_t c = 0; c < C; ++c) sum_dy[c] += wt * gr[c];
          }
          for (int64_t g = 0; g < groups; ++g) {
            const int64_t o = g * cg;
            const scalar_t s = ip[a * groups + g];
            if (s == scalar_t(0)) {
              std::fill(dr + o, dr + o + cg, scalar_t(0));
              continue;
            }
            const acc_t a1 = dot3_lanes<acc_t>(pp + o, gr + o, xr + o, cg);
            const acc_t a2 = dot3_lanes<acc_t>(qp + o, xr + o, xr + o, cg);
            const scalar_t dot = scalar_t(acc_t(s) * a1 - acc_t(s) * acc_t(s) * a2);
            const scalar_t s2 = s * s, extra = dot / scalar_t(cg);
            for (int64_t c = 0; c < cg; ++c) {
              dr[o + c] = s * pp[o + c] * gr[o + c] - s2 * xr[o + c] * (qp[o + c] + extra);
              sum_dy_xt[o + c] += gr[o + c] * xr[o + c] * s;
            }
          }
        }
      }
    });
  });
  auto sums = partial.sum(1);
  return {dx, sums[0], sums[1]};
}

// Uniforms in [0, 1) from Philox4x32-10 (Salmon et al. 2011, "Parallel random numbers: as easy
// as 1, 2, 3"), counter-based: element (r, c) of a (rows, cols) float32 tensor is output c % 4 of
// the block with counter (c / 4, r, domain, 0) under the key (key0, key1), so any element can be
// drawn alone, in any order, and row r never depends on how many rows are drawn. 24-bit
// uniforms: (x >> 8) · 2⁻²⁴.
torch::Tensor philox_uniform(int64_t rows, int64_t cols, int64_t key0, int64_t key1, int64_t domain) {
  TORCH_CHECK(rows >= 0 && cols >= 0 && rows < (int64_t(1) << 32) && cols / 4 < (int64_t(1) << 32),
              "philox_uniform: size out of range");
  auto out = torch::empty({rows, cols}, torch::dtype(torch::kFloat32));
  float* __restrict__ op = out.data_ptr<float>();
  const uint32_t k0 = uint32_t(key0), k1 = uint32_t(key1), dom = uint32_t(domain);
  const int64_t blocks = (cols + 3) / 4;
  at::parallel_for(0, rows, 1, [&](int64_t r0, int64_t r1) {
    std::vector<uint32_t> buf(blocks * 4);
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t b = 0; b < blocks; ++b) {
        uint32_t c0 = uint32_t(b), c1 = uint32_t(r), c2 = dom, c3 = 0, ka = k0, kb = k1;
        for (int round = 0; round < 10; ++round) {
          const uint64_t p0 = uint64_t(0xD2511F53u) * c0, p1 = uint64_t(0xCD9E8D57u) * c2;
          const uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ ka, n2 = uint32_t(p0 >> 32) ^ c3 ^ kb;
          c1 = uint32_t(p1);
          c3 = uint32_t(p0);
          c0 = n0;
          c2 = n2;
          ka += 0x9E3779B9u;
          kb += 0xBB67AE85u;
        }
        uint32_t* q = buf.data() + b * 4;
        q[0] = c0;
        q[1] = c1;
        q[2] = c2;
        q[3] = c3;
      }
      float* __restrict__ row = op + r * cols;
      for (int64_t c = 0; c < cols; ++c) row[c] = float(buf[c] >> 8) * (1.0f / 16777216.0f);
    }
  });
  return out;
}

namespace {

// log(y) for y in (0, 1] in plain arithmetic (so that loops over it vectorize): y = 2^e·m with m
// in [√½, √2), log m = 2·atanh(t), t = (m − 1)/(m + 1), |t| ≤ 0.172, five terms of the series
// (next term below 3e-9).
inline float log_unit(float y) {
  int32_t bits;
  std::memcpy(&bits, &y, sizeof bits);
  int32_t e = ((bits >> 23) & 0xff) - 127;
  int32_t mbits = (bits & 0x7fffff) | 0x3f800000;
  float m;
  std::memcpy(&m, &mbits, sizeof m);
  const bool big = m > 1.41421356f;
  m = big ? m * 0.5f : m;
  e = big ? e + 1 : e;
  const float t = (m - 1.0f) / (m + 1.0f), t2 = t * t;
  const float series = 1.0f + t2 * (1.0f / 3 + t2 * (1.0f / 5 + t2 * (1.0f / 7 + t2 * (1.0f / 9))));
  return float(e) * 0.693147181f + 2.0f * t * series;
}

// erfinv(x) from y = 1 − x² (given separately, computed without cancellation): M. Giles,
// "Approximating the erfinv function" (GPU Computing Gems, 2011), single precision; both
// branches computed and one selected, so that it vectorizes.
inline float erfinv_from(float x, float y) {
  const float w = -log_unit(y);
  float a = w - 2.5f;
  float p = 2.81022636e-08f;
  p = 3.43273939e-07f + p * a;
  p = -3.5233877e-06f + p * a;
  p = -4.39150654e-06f + p * a;
  p = 0.00021858087f + p * a;
  p = -0.00125372503f + p * a;
  p = -0.00417768164f + p * a;
  p = 0.246640727f + p * a;
  p = 1.50140941f + p * a;
  float b = std::sqrt(w) - 3.0f;
  float q = -0.000200214257f;
  q = 0.000100950558f + q * b;
  q = 0.00134934322f + q * b;
  q = -0.00367342844f + q * b;
  q = 0.00573950773f + q * b;
  q = -0.0076224613f + q * b;
  q = 0.00943887047f + q * b;
  q = 1.00167406f + q * b;
  q = 2.83297682f + q * b;
  return (w < 5.0f ? p : q) * x;
}

}  // namespace

// The noise of Santurkar et al. 2018 (see batch_functional.santurkar_noise) from Philox
// uniforms: unit draws u (domain 0, 2·C) → μ_j = (2u − 1)·n_μ, σ_j = 1 + u·(n_σ − 1); per sample
// (domain 1, 2·C each) → m_ij = μ_j + (2u − 1)·r_μ and s_ij = σ_j + r_σ·√2·erfinv(2v − 1) with
// v ≥ 2⁻²⁴. Returns (m, s), each (N, C) float32.
std::vector<torch::Tensor> santurkar_draw(int64_t N, int64_t C, double n_mu, double n_sigma, double r_mu, double r_sigma,
                                          int64_t key0, int64_t key1) {
  auto unit = philox_uniform(1, 2 * C, key0, key1, 0);
  auto u = philox_uniform(N, 2 * C, key0, key1, 1);
  auto m = torch::empty({N, C}, torch::dtype(torch::kFloat32));
  auto s = torch::empty({N, C}, torch::dtype(torch::kFloat32));
  std::vector<float> mu(C), sigma(C);
  const float* up = unit.data_ptr<float>();
  for (int64_t j = 0; j < C; ++j) {
    mu[j] = (2.0f * up[j] - 1.0f) * float(n_mu);
    sigma[j] = 1.0f + up[C + j] * float(n_sigma - 1.0);
  }
  const float* __restrict__ uu = u.data_ptr<float>();
  float* __restrict__ mp = m.data_ptr<float>();
  float* __restrict__ sp = s.data_ptr<float>();
  const float rm = float(r_mu), rs = float(r_sigma) * 1.41421356f;
  const float* __restrict__ mup = mu.data();
  const float* __restrict__ sgp = sigma.data();
  at::parallel_for(0, N, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float* __restrict__ ui = uu + i * 2 * C;
      for (int64_t j = 0; j < C; ++j) {
        mp[i * C + j] = mup[j] + (2.0f * ui[j] - 1.0f) * rm;
        const float v = std::max(ui[C + j], 1.0f / 16777216.0f);
        sp[i * C + j] = sgp[j] + rs * erfinv_from(2.0f * v - 1.0f, 4.0f * v * (1.0f - v));
      }
    }
  });
  return {m, s};
}

// erfinv(2v − 1) of the noise above, exposed for its test against torch.erfinv.
torch::Tensor erfinv_of_uniform(const torch::Tensor& v) {
  auto vc = v.contiguous().to(torch::kFloat32);
  auto out = torch::empty_like(vc);
  const float* vp = vc.data_ptr<float>();
  float* op = out.data_ptr<float>();
  for (int64_t k = 0; k < vc.numel(); ++k) {
    const float x = std::max(vp[k], 1.0f / 16777216.0f);
    op[k] = erfinv_from(2.0f * x - 1.0f, 4.0f * x * (1.0f - x));
  }
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("philox_uniform", &philox_uniform);
  m.def("santurkar_draw", &santurkar_draw);
  m.def("erfinv_of_uniform", &erfinv_of_uniform);
  m.def("pn_rows_forward", &pn_rows_forward);
  m.def("pn_rows_affine", &pn_rows_affine);
  m.def("pn_rows_backward", &pn_rows_backward);
  m.def("seg_sums", &seg_sums);
  m.def("seg_affine", &seg_affine);
  m.def("seg_dot", &seg_dot);
  m.def("seg_grad", &seg_grad);
  m.def("seg_row_dot", &seg_row_dot);
  m.def("row_rms_forward", &row_rms_forward);
  m.def("row_rms_backward", &row_rms_backward);
}
