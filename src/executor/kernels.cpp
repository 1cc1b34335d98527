#include "executor/kernels.hpp"

#include <cmath>
#include <limits>

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>

namespace mist::executor::kernels {

namespace {

// Calls f(T{}) with T the C++ type of the tensor's dtype (the executor uses fp32 and bf16).
template <class F>
void dispatch(const at::Tensor& t, F&& f) {
  if (t.scalar_type() == at::kBFloat16)
    f(c10::BFloat16{});
  else
    f(float{});
}

// The same over each tensor's own dtype (probabilities in fp32 beside bf16 activations).
template <class F>
void dispatch(const at::Tensor& a, const at::Tensor& b, F&& f) {
  dispatch(a, [&](auto ta) { dispatch(b, [&](auto tb) { f(ta, tb); }); });
}
template <class F>
void dispatch(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, F&& f) {
  dispatch(a, b, [&](auto ta, auto tb) { dispatch(c, [&](auto tc) { f(ta, tb, tc); }); });
}

// Rows of a [s, b, width] tensor whose last dimension is contiguous (maybe a column slice).
template <class T>
struct Rows {
  T* base;
  int64_t b, s0, s1;
  Rows(const at::Tensor& t)
      : base(static_cast<T*>(t.data_ptr())), b(t.size(1)), s0(t.stride(0)), s1(t.stride(1)) {}
  T* operator[](int64_t r) const { return base + (r / b) * s0 + (r % b) * s1; }
};

template <class T>
T* ptr(const at::Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

inline float f32(float v) { return v; }
inline float f32(c10::BFloat16 v) { return static_cast<float>(v); }

int64_t grain(int64_t width) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(width, 1)); }

// Weight-gradient reduction over rows, split by columns so that threads never share a sum.
template <class F>
void column_sums(int64_t rows, int64_t h, F&& add_row_range) {
  at::parallel_for(0, h, 64, [&](int64_t c0, int64_t c1) {
    for (int64_t r = 0; r < rows; ++r) add_row_range(r, c0, c1);
  });
}

}  // namespace

void layernorm_forward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, double eps,
                       const at::Tensor& y, const at::Tensor& mean, const at::Tensor& rstd) {
  const int64_t h = x.size(-1), rows = x.numel() / h;
  dispatch(x, [&](auto tag) {
    using T = decltype(tag);
    const T *X = ptr<T>(x), *W = ptr<T>(w), *B = ptr<T>(b);
    T* Y = ptr<T>(y);
    float *M = ptr<float>(mean), *R = ptr<float>(rstd);
    at::parallel_for(0, rows, grain(h), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* xr = X + r * h;
        double sum = 0;
        for (int64_t c = 0; c < h; ++c) sum += f32(xr[c]);
        const float mu = static_cast<float>(sum / h);
        double var = 0;
        for (int64_t c = 0; c < h; ++c) var += (f32(xr[c]) - mu) * (f32(xr[c]) - mu);
        const float rs = static_cast<float>(1.0 / std::sqrt(var / h + eps));
        M[r] = mu;
        R[r] = rs;
        for (int64_t c = 0; c < h; ++c) Y[r * h + c] = T((f32(xr[c]) - mu) * rs * f32(W[c]) + f32(B[c]));
      }
    });
  });
}

void layernorm_backward(const at::Tensor& gy, const at::Tensor& x, const at::Tensor& mean,
                        const at::Tensor& rstd, const at::Tensor& w, const at::Tensor& gx,
                        const at::Tensor& main_gw, const at::Tensor& main_gb) {
  const int64_t h = x.size(-1), rows = x.numel() / h;
  dispatch(x, [&](auto tag) {
    using T = decltype(tag);
    const T *G = ptr<T>(gy), *X = ptr<T>(x), *W = ptr<T>(w);
    const float *M = ptr<float>(mean), *R = ptr<float>(rstd);
    T* GX = ptr<T>(gx);
    at::parallel_for(0, rows, grain(h), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T *gr = G + r * h, *xr = X + r * h;
        double s1 = 0, s2 = 0;  // mean of gxhat and of gxhat·xhat
        for (int64_t c = 0; c < h; ++c) {
          const float xh = (f32(xr[c]) - M[r]) * R[r], g = f32(gr[c]) * f32(W[c]);
          s1 += g;
          s2 += g * xh;
        }
        const float m1 = static_cast<float>(s1 / h), m2 = static_cast<float>(s2 / h);
        for (int64_t c = 0; c < h; ++c) {
          const float xh = (f32(xr[c]) - M[r]) * R[r], g = f32(gr[c]) * f32(W[c]);
          GX[r * h + c] = T(R[r] * (g - m1 - xh * m2));
        }
      }
    });
    float *GW = ptr<float>(main_gw), *GB = ptr<float>(main_gb);
    column_sums(rows, h, [&](int64_t r, int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        const float g = f32(G[r * h + c]);
        GW[c] += g * (f32(X[r * h + c]) - M[r]) * R[r];
        GB[c] += g;
      }
    });
  });
}

void rmsnorm_forward(const at::Tensor& x, const at::Tensor& w, double eps, const at::Tensor& y,
                     const at::Tensor& rstd) {
  const int64_t h = x.size(-1), rows = x.numel() / h;
  dispatch(x, [&](auto tag) {
    using T = decltype(tag);
    const T *X = ptr<T>(x), *W = ptr<T>(w);
    T* Y = ptr<T>(y);
    float* R = ptr<float>(rstd);
    at::parallel_for(0, rows, grain(h), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* xr = X + r * h;
        double ss = 0;
        for (int64_t c = 0; c < h; ++c) ss += f32(xr[c]) * f32(xr[c]);
        const float rs = static_cast<float>(1.0 / std::sqrt(ss / h + eps));
        R[r] = rs;
        for (int64_t c = 0; c < h; ++c) Y[r * h + c] = T(f32(xr[c]) * rs * f32(W[c]));
      }
    });
  });
}

void rmsnorm_backward(const at::Tensor& gy, const at::Tensor& x, const at::Tensor& rstd,
                      const at::Tensor& w, const at::Tensor& gx, const at::Tensor& main_gw) {
  const int64_t h = x.size(-1), rows = x.numel() / h;
  dispatch(x, [&](auto tag) {
    using T = decltype(tag);
    const T *G = ptr<T>(gy), *X = ptr<T>(x), *W = ptr<T>(w);
    const float* R = ptr<float>(rstd);
    T* GX = ptr<T>(gx);
    at::parallel_for(0, rows, grain(h), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T *gr = G + r * h, *xr = X + r * h;
        double s2 = 0;
        for (int64_t c = 0; c < h; ++c) s2 += f32(gr[c]) * f32(W[c]) * f32(xr[c]) * R[r];
        const float m2 = static_cast<float>(s2 / h);
        for (int64_t c = 0; c < h; ++c) {
          const float xh = f32(xr[c]) * R[r];
          GX[r * h + c] = T(R[r] * (f32(gr[c]) * f32(W[c]) - xh * m2));
        }
      }
    });
    float* GW = ptr<float>(main_gw);
    column_sums(rows, h, [&](int64_t r, int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) GW[c] += f32(G[r * h + c]) * f32(X[r * h + c]) * R[r];
    });
  });
}

void causal_softmax_forward(const at::Tensor& scores, double scale, const at::Tensor& probs) {
  const int64_t s = scores.size(-1), rows = scores.numel() / s;
  dispatch(scores, [&](auto tag) {
    using T = decltype(tag);
    const T* X = ptr<T>(scores);
    T* P = ptr<T>(probs);
    const float sc = static_cast<float>(scale);
    at::parallel_for(0, rows, grain(s), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t n = r % s + 1;  // a query attends to itself and earlier positions
        const T* xr = X + r * s;
        T* pr = P + r * s;
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t c = 0; c < n; ++c) mx = std::max(mx, sc * f32(xr[c]));
        double sum = 0;
        for (int64_t c = 0; c < n; ++c) sum += std::exp(sc * f32(xr[c]) - mx);
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t c = 0; c < n; ++c) pr[c] = T(std::exp(sc * f32(xr[c]) - mx) * inv);
        for (int64_t c = n; c < s; ++c) pr[c] = T(0.0f);
      }
    });
  });
}

void causal_softmax_backward(const at::Tensor& gp, const at::Tensor& probs, double scale,
                             const at::Tensor& gx) {
  const int64_t s = probs.size(-1), rows = probs.numel() / s;
  dispatch(probs, [&](auto tag) {
    using T = decltype(tag);
    const T *G = ptr<T>(gp), *P = ptr<T>(probs);
    T* GX = ptr<T>(gx);
    const float sc = static_cast<float>(scale);
    at::parallel_for(0, rows, grain(s), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t n = r % s + 1;
        const T *gr = G + r * s, *pr = P + r * s;
        double dot = 0;
        for (int64_t c = 0; c < n; ++c) dot += f32(gr[c]) * f32(pr[c]);
        const float d = static_cast<float>(dot);
        for (int64_t c = 0; c < n; ++c) GX[r * s + c] = T(sc * f32(pr[c]) * (f32(gr[c]) - d));
        for (int64_t c = n; c < s; ++c) GX[r * s + c] = T(0.0f);
      }
    });
  });
}

namespace {
// splitmix64: a counter-based generator, so the mask does not depend on the thread split.
inline uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
}  // namespace

void dropout_forward(const at::Tensor& x, double p, uint64_t seed, const at::Tensor& y,
                     const at::Tensor& mask) {
  const int64_t n = x.numel();
  const uint64_t threshold = static_cast<uint64_t>(p * 18446744073709551615.0);
  const float keep_scale = static_cast<float>(1.0 / (1.0 - p));
  dispatch(x, [&](auto tag) {
    using T = decltype(tag);
    const T* X = ptr<T>(x);
    T* Y = ptr<T>(y);
    uint8_t* K = static_cast<uint8_t*>(mask.data_ptr());
    at::parallel_for(0, n, 65536, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const bool keep = mix(seed ^ mix(static_cast<uint64_t>(i))) >= threshold;
        K[i] = keep;
        Y[i] = T(keep ? f32(X[i]) * keep_scale : 0.0f);
      }
    });
  });
}

void dropout_backward(const at::Tensor& gy, const at::Tensor& mask, double p, const at::Tensor& gx) {
  const int64_t n = gy.numel();
  const float keep_scale = static_cast<float>(1.0 / (1.0 - p));
  dispatch(gy, [&](auto tag) {
    using T = decltype(tag);
    const T* G = ptr<T>(gy);
    T* GX = ptr<T>(gx);
    const uint8_t* K = static_cast<const uint8_t*>(mask.data_ptr());
    at::parallel_for(0, n, 65536, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) GX[i] = T(K[i] ? f32(G[i]) * keep_scale : 0.0f);
    });
  });
}

namespace {
// y = rotate(x) by +angle (sign 1) or -angle (sign -1), rotate-half pairing (i, i + d/2).
template <class T>
void rotate(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, int64_t d,
            float sign, const at::Tensor& y) {
  const int64_t rows = x.size(0) * x.size(1), width = x.size(2), heads = width / d, half = d / 2;
  const int64_t b = x.size(1);
  Rows<T> X(x);
  T* Y = ptr<T>(y);
  const float *C = ptr<float>(cos), *S = ptr<float>(sin);
  at::parallel_for(0, rows, grain(width), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = X[r];
      T* yr = Y + r * width;
      const float *cr = C + (r / b) * half, *sr = S + (r / b) * half;
      for (int64_t hd = 0; hd < heads; ++hd)
        for (int64_t i = 0; i < half; ++i) {
          const float x1 = f32(xr[hd * d + i]), x2 = f32(xr[hd * d + half + i]);
          const float c = cr[i], s = sign * sr[i];
          yr[hd * d + i] = T(x1 * c - x2 * s);
          yr[hd * d + half + i] = T(x2 * c + x1 * s);
        }
    }
  });
}
}  // namespace

void rotary_forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                    int64_t head_dim, const at::Tensor& y) {
  dispatch(x, [&](auto tag) { rotate<decltype(tag)>(x, cos, sin, head_dim, 1.0f, y); });
}

void rotary_backward(const at::Tensor& gy, const at::Tensor& cos, const at::Tensor& sin,
                     int64_t head_dim, const at::Tensor& gx) {
  // The rotation is orthogonal: its transpose is the rotation by the opposite angle.
  dispatch(gy, [&](auto tag) { rotate<decltype(tag)>(gy, cos, sin, head_dim, -1.0f, gx); });
}

void swiglu_forward(const at::Tensor& gu, const at::Tensor& y) {
  const int64_t f = y.size(-1), rows = y.numel() / f;
  dispatch(gu, [&](auto tag) {
    using T = decltype(tag);
    const T* GU = ptr<T>(gu);
    T* Y = ptr<T>(y);
    at::parallel_for(0, rows, grain(f), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = 0; c < f; ++c) {
          const float g = f32(GU[r * 2 * f + c]), u = f32(GU[r * 2 * f + f + c]);
          Y[r * f + c] = T(g / (1.0f + std::exp(-g)) * u);
        }
    });
  });
}

void swiglu_backward(const at::Tensor& gy, const at::Tensor& gu, const at::Tensor& ggu) {
  const int64_t f = gy.size(-1), rows = gy.numel() / f;
  dispatch(gu, [&](auto tag) {
    using T = decltype(tag);
    const T *G = ptr<T>(gy), *GU = ptr<T>(gu);
    T* GGU = ptr<T>(ggu);
    at::parallel_for(0, rows, grain(f), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = 0; c < f; ++c) {
          const float g = f32(GU[r * 2 * f + c]), u = f32(GU[r * 2 * f + f + c]), dy = f32(G[r * f + c]);
          const float sig = 1.0f / (1.0f + std::exp(-g));
          GGU[r * 2 * f + c] = T(dy * u * sig * (1.0f + g * (1.0f - sig)));
          GGU[r * 2 * f + f + c] = T(dy * g * sig);
        }
    });
  });
}

void weight_rows_forward(const at::Tensor& x, const at::Tensor& p, const at::Tensor& y) {
  const int64_t f = y.size(-1), rows = y.numel() / f;
  dispatch(x, p, y, [&](auto xt, auto pt, auto yt) {
    using T = decltype(xt);
    using Pt = decltype(pt);
    using Yt = decltype(yt);
    const T* X = ptr<T>(x);
    const Pt* P = ptr<Pt>(p);
    Yt* Y = ptr<Yt>(y);
    at::parallel_for(0, rows, grain(f), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float w = f32(P[r]);
        for (int64_t c = 0; c < f; ++c) Y[r * f + c] = Yt(f32(X[r * f + c]) * w);
      }
    });
  });
}

void weight_rows_backward(const at::Tensor& gy, const at::Tensor& x, const at::Tensor& p, const at::Tensor& gx,
                          const at::Tensor& gp) {
  const int64_t f = gy.size(-1), rows = gy.numel() / f;
  dispatch(x, p, [&](auto xt, auto pt) {
    using T = decltype(xt);
    using Pt = decltype(pt);
    const T *G = ptr<T>(gy), *X = ptr<T>(x);
    const Pt* P = ptr<Pt>(p);
    T* GX = ptr<T>(gx);
    Pt* GP = ptr<Pt>(gp);
    at::parallel_for(0, rows, grain(f), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float w = f32(P[r]);
        float dw = 0;
        for (int64_t c = 0; c < f; ++c) {
          const float dy = f32(G[r * f + c]);
          dw += dy * f32(X[r * f + c]);
          GX[r * f + c] = T(dy * w);
        }
        GP[r] = Pt(dw);
      }
    });
  });
}

void weighted_swiglu_forward(const at::Tensor& gu, const at::Tensor& p, const at::Tensor& y) {
  const int64_t f = y.size(-1), rows = y.numel() / f;
  dispatch(gu, p, [&](auto tag, auto pt) {
    using T = decltype(tag);
    using Pt = decltype(pt);
    const T* GU = ptr<T>(gu);
    const Pt* P = ptr<Pt>(p);
    T* Y = ptr<T>(y);
    at::parallel_for(0, rows, grain(f), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float w = f32(P[r]);
        for (int64_t c = 0; c < f; ++c) {
          const float g = f32(GU[r * 2 * f + c]), u = f32(GU[r * 2 * f + f + c]);
          Y[r * f + c] = T(g / (1.0f + std::exp(-g)) * u * w);
        }
      }
    });
  });
}

void weighted_swiglu_backward(const at::Tensor& gy, const at::Tensor& gu, const at::Tensor& p, const at::Tensor& ggu,
                              const at::Tensor& gp) {
  const int64_t f = gy.size(-1), rows = gy.numel() / f;
  dispatch(gu, p, [&](auto tag, auto pt) {
    using T = decltype(tag);
    using Pt = decltype(pt);
    const T *G = ptr<T>(gy), *GU = ptr<T>(gu);
    const Pt* P = ptr<Pt>(p);
    T* GGU = ptr<T>(ggu);
    Pt* GP = ptr<Pt>(gp);
    at::parallel_for(0, rows, grain(f), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float w = f32(P[r]);
        float dw = 0;
        for (int64_t c = 0; c < f; ++c) {
          const float g = f32(GU[r * 2 * f + c]), u = f32(GU[r * 2 * f + f + c]), dy = f32(G[r * f + c]);
          const float sig = 1.0f / (1.0f + std::exp(-g));
          dw += g * sig * u * dy;
          GGU[r * 2 * f + c] = T(dy * w * u * sig * (1.0f + g * (1.0f - sig)));
          GGU[r * 2 * f + f + c] = T(dy * w * g * sig);
        }
        GP[r] = Pt(dw);
      }
    });
  });
}

void expand_heads_forward(const at::Tensor& x, int64_t head_dim, int64_t heads, const at::Tensor& y) {
  const int64_t rows = x.size(0) * x.size(1), groups = x.size(2) / head_dim, rep = heads / groups;
  dispatch(x, [&](auto tag) {
    using T = decltype(tag);
    Rows<T> X(x);
    T* Y = ptr<T>(y);
    at::parallel_for(0, rows, grain(heads * head_dim), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t hd = 0; hd < heads; ++hd)
          std::copy_n(X[r] + (hd / rep) * head_dim, head_dim, Y + (r * heads + hd) * head_dim);
    });
  });
}

void expand_heads_backward(const at::Tensor& gy, int64_t head_dim, int64_t groups, const at::Tensor& gx) {
  const int64_t rows = gy.size(0) * gy.size(1), heads = gy.size(2) / head_dim, rep = heads / groups;
  dispatch(gy, [&](auto tag) {
    using T = decltype(tag);
    const T* G = ptr<T>(gy);
    T* GX = ptr<T>(gx);
    at::parallel_for(0, rows, grain(heads * head_dim), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t gi = 0; gi < groups; ++gi)
          for (int64_t i = 0; i < head_dim; ++i) {
            float sum = 0;
            for (int64_t k = 0; k < rep; ++k) sum += f32(G[(r * heads + gi * rep + k) * head_dim + i]);
            GX[(r * groups + gi) * head_dim + i] = T(sum);
          }
    });
  });
}

}  // namespace mist::executor::kernels
