#include "analysis/pipeline_job.hpp"

namespace mist::analysis {

double term_seconds(const std::vector<TimeTerm>& terms, const std::string& name) {
  for (const auto& t : terms)
    if (t.name == name) return t.seconds;
  return 0;
}

double term_bytes(const StageMemory& s, const std::string& name) {
  for (const auto& t : s.terms)
    if (t.name == name) return t.bytes;
  return 0;
}

// The simulation's input from the two models. The time model folds p2p into T_i on the compute
// stream; here it is a send on the sender's collective stream, the stage's share of
// "pipeline_p2p" split evenly over the sends it makes per micro-batch (one per boundary and chunk).
sim::PipelineJob pipeline_job(const plan::Plan& p, const TimePrediction& t, const MemoryPrediction& m) {
  sim::PipelineJob pj;
  pj.micro_batches = p.grad_accum_steps;
  pj.virtual_stages = p.virtual_pipeline_stages;
  const size_t pp = t.stages.size();
  for (size_t i = 0; i < pp; ++i) {
    const auto& ts = t.stages[i];
    const auto& ms = m.stages[i];
    sim::StageWork w;
    w.fwd = ts.fwd_s;
    w.bwd = ts.bwd_s;
    const double boundaries = (i > 0 ? 1.0 : 0.0) + (i + 1 < pp ? 1.0 : 0.0);
    const double sends = boundaries * static_cast<double>(p.virtual_pipeline_stages);
    w.p2p_fwd = w.p2p_bwd = sends > 0 ? term_seconds(ts.stable_terms, "pipeline_p2p") / sends : 0;
    // The ZeRO-1/2 parameter all-gather precedes the first forward; everything else follows the
    // last backward.
    std::string last_name;
    for (const auto& d : ts.delta_terms) {
      if (d.name == "parameter_gather") {
        w.first_fwd_extra = d.seconds;
        w.first_fwd_extra_name = d.name;
      } else if (d.seconds > 0) {
        w.last_bwd_extra += d.seconds;
        last_name += (last_name.empty() ? "" : "+") + d.name;
      }
    }
    if (!last_name.empty()) w.last_bwd_extra_name = last_name;
    const double acts = term_bytes(ms, "activations");
    w.base_bytes = ms.peak_bytes - acts;
    w.activation_bytes_per_micro_batch = ms.in_flight > 0 ? acts / ms.in_flight : 0;
    // Chunks of unequal size take their share of the stage's blocks (the embedding's and the
    // head's work spread with them, as with equal chunks).
    if (plan::uneven_chunks(p) && p.stages[i].num_layers > 0)
      for (int64_t n : plan::stage_chunk_layers(p, i))
        w.chunk_share.push_back(static_cast<double>(n) / static_cast<double>(p.stages[i].num_layers));
    pj.stages.push_back(std::move(w));
  }
  return pj;
}

}  // namespace mist::analysis
