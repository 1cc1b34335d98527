#include "executor/functions.hpp"

#include <chrono>
#include <ctime>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include "executor/functions_internal.hpp"
#include "executor/kernels.hpp"
#include "executor/tracking_allocator.hpp"

namespace mist::executor::ops {

namespace detail {
std::vector<OpSample>* g_sink = nullptr;
bool g_recomputing = false;

void mm_into(at::Tensor out, const at::Tensor& a, const at::Tensor& b) {
  ScopedAllocClass ws(AllocClass::kWorkspace);
  at::mm_out(out, a, b);
}
}  // namespace detail

void set_op_sink(std::vector<OpSample>* sink) { detail::g_sink = sink; }

namespace {
bool g_thread_cpu_clock = false;
}

void use_thread_cpu_clock(bool on) { g_thread_cpu_clock = on; }

double clock_seconds() {
  if (g_thread_cpu_clock) {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

namespace {

using namespace detail;

// Column- or row-parallel linear (t = 1): saves its input; the weight gradient goes into main_w.
// `out_dtype` (-1: the input's): the output's dtype, fp32 for Megatron's router under
// --moe-router-dtype fp32 (RouterGatingLinearFunction: fp32 logits of bf16 operands, no input copy
// kept); the GEMMs then run on fp32 copies in the workspace.
struct LinearFn : torch::autograd::Function<LinearFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const LinearParams* p, int64_t op,
                            int64_t out_dtype) {
    Timed t(static_cast<int>(op), forward_phase());
    ctx->set_materialize_grads(false);
    const int64_t in = p->w.size(1), out = p->w.size(0);
    const auto dt = out_dtype < 0 ? x.scalar_type() : static_cast<at::ScalarType>(out_dtype);
    auto y = at::empty({x.size(0), x.size(1), out}, x.options().dtype(dt));
    auto y2 = y.view({-1, out});
    {
      ScopedAllocClass ws(AllocClass::kWorkspace);
      const auto x2 = x.reshape({-1, in}).to(dt), w = p->w.to(dt);
      if (p->b.defined())
        at::addmm_out(y2, p->b.to(dt), x2, w.t());
      else
        at::mm_out(y2, x2, w.t());
    }
    ctx->save_for_backward({x});
    ctx->saved_data["p"] = as_int(p);
    ctx->saved_data["op"] = op;
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const int op = static_cast<int>(ctx->saved_data["op"].toInt());
    Timed t(op, Phase::kBackward);
    const auto* p = saved_ptr<LinearParams>(ctx, "p");
    auto x = ctx->get_saved_variables()[0];
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
    const auto g = grads[0].is_contiguous() ? grads[0] : grads[0].contiguous();
    const int64_t in = p->w.size(1), out = p->w.size(0);
    auto gx = at::empty(x.sizes(), x.options());
    if (g.scalar_type() == x.scalar_type()) {
      mm_into(gx.view({-1, in}), g.view({-1, out}), p->w);
    } else {
      ScopedAllocClass ws(AllocClass::kWorkspace);
      gx.view({-1, in}).copy_(at::mm(g.view({-1, out}), p->w.to(g.scalar_type())));
    }
    {
      // Megatron's fused wgrad GEMM accumulates into main_grad without a temporary; a bf16 GEMM
      // here needs one, which is counted apart as a weight-gradient temporary.
      ScopedAllocClass wg(AllocClass::kWeightGrad);
      const auto g2 = g.view({-1, out}), x2 = x.view({-1, in});
      if (g.scalar_type() != x.scalar_type())  // fp32 logits' gradient, bf16 input: in fp32
        p->main_w.addmm_(g2.t().to(at::kFloat), x2.to(at::kFloat));
      else if (x.scalar_type() == at::kFloat)
        p->main_w.addmm_(g2.t(), x2);
      else
        p->main_w.add_(at::mm(g2.t(), x2));
      if (p->b.defined()) p->main_b.add_(g2.sum(0, false, at::kFloat));
    }
    return {gx, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// LayerNorm (saves input, fp32 mean and rstd) or RMSNorm (input, fp32 rstd).
struct NormFn : torch::autograd::Function<NormFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const NormParams* p, int64_t op) {
    Timed t(static_cast<int>(op), forward_phase());
    ctx->set_materialize_grads(false);
    const int64_t rows = x.numel() / x.size(-1);
    auto y = at::empty(x.sizes(), x.options());
    auto rstd = at::empty({rows}, x.options().dtype(at::kFloat));
    if (p->layernorm) {
      auto mean = at::empty({rows}, x.options().dtype(at::kFloat));
      kernels::layernorm_forward(x, p->w, p->b, p->eps, y, mean, rstd);
      ctx->save_for_backward({x, rstd, mean});
    } else {
      kernels::rmsnorm_forward(x, p->w, p->eps, y, rstd);
      ctx->save_for_backward({x, rstd});
    }
    ctx->saved_data["p"] = as_int(p);
    ctx->saved_data["op"] = op;
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Timed t(static_cast<int>(ctx->saved_data["op"].toInt()), Phase::kBackward);
    const auto* p = saved_ptr<NormParams>(ctx, "p");
    auto saved = ctx->get_saved_variables();
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
    const auto g = grads[0].is_contiguous() ? grads[0] : grads[0].contiguous();
    auto gx = at::empty(saved[0].sizes(), saved[0].options());
    if (p->layernorm)
      kernels::layernorm_backward(g, saved[0], saved[2], saved[1], p->w, gx, p->main_w, p->main_b);
    else
      kernels::rmsnorm_backward(g, saved[0], saved[1], p->w, gx, p->main_w);
    return {gx, at::Tensor(), at::Tensor()};
  }
};

// Residual or branch sum: saves nothing; both inputs receive the output gradient itself.
struct AddFn : torch::autograd::Function<AddFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b, int64_t op) {
    Timed t(static_cast<int>(op), forward_phase());
    ctx->set_materialize_grads(false);
    ctx->saved_data["op"] = op;
    return at::add(a, b);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Timed t(static_cast<int>(ctx->saved_data["op"].toInt()), Phase::kBackward);
    return {grads[0], grads[0], at::Tensor()};
  }
};

// Dropout: saves a 1-byte mask.
struct DropoutFn : torch::autograd::Function<DropoutFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, double p, int64_t seed, int64_t op) {
    Timed t(static_cast<int>(op), forward_phase());
    ctx->set_materialize_grads(false);
    const auto xc = x.is_contiguous() ? x : x.contiguous();
    auto y = at::empty(xc.sizes(), xc.options());
    auto mask = at::empty(xc.sizes(), xc.options().dtype(at::kByte));
    kernels::dropout_forward(xc, p, static_cast<uint64_t>(seed), y, mask);
    ctx->save_for_backward({mask});
    ctx->saved_data["p"] = p;
    ctx->saved_data["op"] = op;
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Timed t(static_cast<int>(ctx->saved_data["op"].toInt()), Phase::kBackward);
    auto mask = ctx->get_saved_variables()[0];
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    const auto g = grads[0].is_contiguous() ? grads[0] : grads[0].contiguous();
    auto gx = at::empty(g.sizes(), g.options());
    kernels::dropout_backward(g, mask, ctx->saved_data["p"].toDouble(), gx);
    return {gx, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// GELU (tanh approximation, as Megatron's fused bias-GELU): saves its input.
struct GeluFn : torch::autograd::Function<GeluFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t op) {
    Timed t(static_cast<int>(op), forward_phase());
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({x});
    ctx->saved_data["op"] = op;
    return at::gelu(x, "tanh");
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Timed t(static_cast<int>(ctx->saved_data["op"].toInt()), Phase::kBackward);
    auto x = ctx->get_saved_variables()[0];
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor()};
    return {at::gelu_backward(grads[0], x, "tanh"), at::Tensor()};
  }
};

// Fused SwiGLU (Megatron's bias_swiglu): saves only its input [gate | up].
struct SwigluFn : torch::autograd::Function<SwigluFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gu, int64_t op) {
    Timed t(static_cast<int>(op), forward_phase());
    ctx->set_materialize_grads(false);
    auto y = at::empty({gu.size(0), gu.size(1), gu.size(2) / 2}, gu.options());
    kernels::swiglu_forward(gu, y);
    ctx->save_for_backward({gu});
    ctx->saved_data["op"] = op;
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Timed t(static_cast<int>(ctx->saved_data["op"].toInt()), Phase::kBackward);
    auto gu = ctx->get_saved_variables()[0];
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor()};
    const auto g = grads[0].is_contiguous() ? grads[0] : grads[0].contiguous();
    auto ggu = at::empty(gu.sizes(), gu.options());
    kernels::swiglu_backward(g, gu, ggu);
    return {ggu, at::Tensor()};
  }
};

struct CheckpointFn : torch::autograd::Function<CheckpointFn> {
  static variable_list forward(AutogradContext* ctx, const Region* region, at::TensorList inputs) {
    ctx->set_materialize_grads(false);
    ctx->saved_data["region"] = as_int(region);
    ctx->save_for_backward(inputs.vec());
    return (*region)(inputs.vec());  // grad mode is off here: nothing inside is kept
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto* region = saved_ptr<Region>(ctx, "region");
    std::vector<at::Tensor> detached;
    for (const auto& s : ctx->get_saved_variables())
      detached.push_back(s.detach().requires_grad_(s.requires_grad()));
    variable_list outputs;
    {
      at::AutoGradMode grad(true);
      struct Recomputing {  // reset even when the region throws
        Recomputing() { g_recomputing = true; }
        ~Recomputing() { g_recomputing = false; }
      } recomputing;
      outputs = (*region)(detached);
    }
    // As Megatron's CheckpointFunction, the recomputed outputs stay referenced during the
    // backward through them.
    variable_list outs, gs;
    for (size_t i = 0; i < outputs.size(); ++i)
      if (grads[i].defined() && outputs[i].requires_grad()) outs.push_back(outputs[i]), gs.push_back(grads[i]);
    torch::autograd::backward(outs, gs);
    variable_list result{at::Tensor()};
    for (auto& d : detached) result.push_back(d.grad());
    return result;
  }
};

}  // namespace

at::Tensor linear(at::Tensor x, const LinearParams& p, int op, std::optional<at::ScalarType> out_dtype) {
  return LinearFn::apply(x, &p, static_cast<int64_t>(op), out_dtype ? static_cast<int64_t>(*out_dtype) : -1);
}
at::Tensor norm(at::Tensor x, const NormParams& p, int op) {
  return NormFn::apply(x, &p, static_cast<int64_t>(op));
}
at::Tensor add(at::Tensor a, at::Tensor b, int op) {
  return AddFn::apply(a, b, static_cast<int64_t>(op));
}
at::Tensor dropout(at::Tensor x, double p, uint64_t seed, int op) {
  return DropoutFn::apply(x, p, static_cast<int64_t>(seed), static_cast<int64_t>(op));
}
at::Tensor gelu(at::Tensor x, int op) { return GeluFn::apply(x, static_cast<int64_t>(op)); }
at::Tensor swiglu(at::Tensor gate_up, int op) {
  return SwigluFn::apply(gate_up, static_cast<int64_t>(op));
}
std::vector<at::Tensor> checkpoint(const Region& region, std::vector<at::Tensor> inputs) {
  return CheckpointFn::apply(&region, at::TensorList(inputs));
}

}  // namespace mist::executor::ops
