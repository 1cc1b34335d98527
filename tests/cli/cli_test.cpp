#include "analysis/prediction.hpp"
#include "cli/commands.hpp"
#include "run_mist.hpp"

#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace mist::cli {
namespace {

namespace fs = std::filesystem;
using testing::kExamples;
using testing::mist;
using testing::Outcome;

// Writes `text` to a fresh temporary file and returns its path.
std::string temp_file(const std::string& name, const std::string& text) {
  const fs::path dir = testing::scratch_dir("cli");
  fs::path p = dir / name;
  std::ofstream(p) << text;
  return p.string();
}

std::vector<std::string> job(const std::string& cmd, const std::string& model, const std::string& cluster,
                             const std::string& training, const std::string& plan) {
  return {cmd, "--model", model, "--cluster", cluster, "--training", training, "--plan", plan};
}

std::vector<std::string> example_job(const std::string& cmd = "predict") {
  return job(cmd, "gpt3-13b", kExamples + "cluster_2x8_a100.json", kExamples + "training_gpt.json",
             kExamples + "plan_gpt13b_2x8.json");
}

TEST(Cli, PredictPrintsATableAndJson) {
  auto text = mist(example_job());
  ASSERT_EQ(text.code, kExitOk) << text.err;
  EXPECT_NE(text.out.find("The plan fits"), std::string::npos) << text.out;
  auto args = example_job();
  args.push_back("--json");
  auto js = mist(args);
  ASSERT_EQ(js.code, kExitOk) << js.err;
  auto j = nlohmann::json::parse(js.out);
  ASSERT_EQ(j["stages"].size(), 2u);
  for (const auto& s : j["stages"]) {
    for (const char* k : {"peak_memory_bytes", "reserved_memory_bytes", "device_memory_bytes",
                          "block_activation_bytes", "block_activation_bytes_recomputed"})
      EXPECT_GT(s[k].get<double>(), 0) << k;
    // Allocated <= reserved <= everything on the GPU; the replay's own allocated peak is near the
    // memory model's (Megatron-LM, no ZeRO-3: within 2%).
    EXPECT_LE(s["peak_memory_bytes"].get<double>(), s["reserved_memory_bytes"].get<double>());
    EXPECT_LT(s["reserved_memory_bytes"].get<double>(), s["device_memory_bytes"].get<double>());
    EXPECT_NEAR(s["allocator"]["replayed_allocated_bytes"].get<double>() / s["peak_memory_bytes"].get<double>(), 1,
                0.02);
    EXPECT_FALSE(s["allocator"]["expandable_segments"].get<bool>());
    for (const char* k : {"weights", "gradients", "optimizer_states", "activations", "cuda_context"})
      EXPECT_TRUE(s["memory"].contains(k)) << k;
    EXPECT_TRUE(s["fits"].is_boolean());
    // What is on the GPU is the sum of the terms (allocator_reserve: reserved - allocated).
    double sum = 0;
    for (const auto& [k, v] : s["memory"].items()) sum += v.get<double>();
    EXPECT_NEAR(sum, s["device_memory_bytes"].get<double>(), 1e-6 * sum);
    EXPECT_NEAR(s["memory"]["allocator_reserve"].get<double>(),
                s["reserved_memory_bytes"].get<double>() - s["peak_memory_bytes"].get<double>(), 1);
  }
}

// --engine selects the calibration of that stack (its fit on the job's GPU or the nearest
// generation), every prediction says which, and --uncalibrated gives the physics alone.
// Every prediction carries a band for its time (± the calibration's held-out mean error) and its
// peak memory (up to the allocator's reserve above it); tune keeps that memory band free by default.
TEST(Cli, PredictionsCarryBandsAndTuneKeepsTheMemoryHeadroom) {
  auto args = example_job();
  args.push_back("--json");
  auto r = mist(args);
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const double t = j["iteration_time_s"].get<double>();
  const auto& tb = j["bands"]["iteration_time_s"];
  const double held_out = j["calibration"]["held_out"]["mean_rel_error"].get<double>();
  EXPECT_DOUBLE_EQ(tb["relative"].get<double>(), held_out);
  EXPECT_NEAR(tb["low"].get<double>(), t * (1 - held_out), 1e-12 * t);
  EXPECT_NEAR(tb["high"].get<double>(), t * (1 + held_out), 1e-12 * t);
  double reserved = 0;
  for (const auto& s : j["stages"]) reserved = std::max(reserved, s["reserved_memory_bytes"].get<double>());
  EXPECT_DOUBLE_EQ(j["bands"]["reserved_memory_bytes"]["high"].get<double>(), reserved * (1 + analysis::kMemoryBand));
  EXPECT_DOUBLE_EQ(j["bands"]["reserved_memory_bytes"]["low"].get<double>(), reserved * (1 - analysis::kMemoryBand));
  EXPECT_NE(mist(example_job()).out.find("expect the iteration in"), std::string::npos);

  auto tune = [](std::vector<std::string> extra) {
    auto a = example_job("tune");
    a.resize(a.size() - 2);  // tune takes no --plan
    a.insert(a.end(), {"--json", "--top", "3"});
    a.insert(a.end(), extra.begin(), extra.end());
    return mist(a);
  };
  for (const auto& [extra, headroom] : std::vector<std::pair<std::vector<std::string>, double>>{
           {{}, analysis::kMemoryBand}, {{"--headroom", "0.2"}, 0.2}}) {
    auto out = tune(extra);
    ASSERT_EQ(out.code, kExitOk) << out.err;
    const auto tj = nlohmann::json::parse(out.out);
    for (const auto& s : tj["prediction"]["stages"])
      EXPECT_LE(s["device_memory_bytes"].get<double>(), (1 - headroom) * s["capacity_bytes"].get<double>());
  }
  auto bad = tune({"--headroom", "1.5"});
  EXPECT_EQ(bad.code, kExitInvalidInput);
  EXPECT_NE(bad.err.find("--headroom"), std::string::npos) << bad.err;
}

TEST(Cli, EngineSelectsTheCalibrationAndThePredictionSaysWhich) {
  auto run = [](std::vector<std::string> extra) {
    auto args = example_job();  // GPT-3 13B on 2x8 A100-80GB
    args.push_back("--json");
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = mist(args);
    EXPECT_EQ(r.code, kExitOk) << r.err;
    return r.code == kExitOk ? nlohmann::json::parse(r.out) : nlohmann::json{};
  };
  const auto megatron = run({}), deepspeed = run({"--engine", "deepspeed"}), physics = run({"--uncalibrated"});
  EXPECT_EQ(megatron["calibration"]["kind"], "stack");
  EXPECT_EQ(megatron["calibration"]["engine"], "megatron");
  EXPECT_EQ(megatron["calibration"]["fitted_gpu"], "A100-SXM4-80GB");
  EXPECT_GT(megatron["calibration"]["held_out"]["runs"].get<int>(), 0);
  EXPECT_EQ(deepspeed["calibration"]["engine"], "deepspeed");
  EXPECT_NE(deepspeed["calibration"]["stack"].get<std::string>().find("DeepSpeed"), std::string::npos);
  EXPECT_EQ(physics["calibration"]["kind"], "none");
  // The example's plan leaves its switches out: DeepSpeed's own apply (ZeRO-1 reduces gradients
  // after the backward, ...), said field by field; Megatron-LM's are the plan form's defaults.
  EXPECT_TRUE(megatron["engine_switches"].empty());
  EXPECT_FALSE(deepspeed["plan"]["overlap_grad_reduce"].get<bool>());
  EXPECT_FALSE(deepspeed["plan"]["async_tp_backward"].get<bool>());
  ASSERT_FALSE(deepspeed["engine_switches"].empty());
  EXPECT_NE(deepspeed["engine_switches"][0].get<std::string>().find("plan.overlap_grad_reduce: true -> false"),
            std::string::npos);
  auto ds_args = example_job();
  ds_args.insert(ds_args.end(), {"--engine", "deepspeed"});
  auto ds_text = mist(ds_args);
  EXPECT_NE(ds_text.out.find("as DeepSpeed runs it (the plan file left these out"), std::string::npos) << ds_text.out;
  // Calibrated GEMMs run below the catalog's MAMF: the same plan takes longer than the physics says.
  EXPECT_GT(megatron["iteration_time_s"].get<double>(), physics["iteration_time_s"].get<double>());
  EXPECT_LT(megatron["matmul_tflops"].get<double>(), physics["matmul_tflops"].get<double>());
  // The text names the calibration too.
  auto text = mist(example_job());
  EXPECT_NE(text.out.find("calibration: Megatron-LM"), std::string::npos) << text.out;
  // A stack mist does not know is bad input naming the option.
  auto args = example_job();
  args.insert(args.end(), {"--engine", "jax"});
  auto bad = mist(args);
  EXPECT_EQ(bad.code, kExitInvalidInput);
  EXPECT_NE(bad.err.find("--engine"), std::string::npos) << bad.err;
}

// The example NVL72 cluster (a GPU outside the catalog, written in full; an NVLink domain of 16
// trays): it loads, the header says the domain, and the same GPUs as separate trays are slower
// (the data-parallel reduction leaves the tray).
TEST(Cli, NvlinkDomainClusterExample) {
  const auto training = temp_file("gb200.training.json",
                                  R"({"global_batch_size": 256, "seq_length": 8192, "precision": "fp8",
                                      "fp8_recipe": "mxfp8", "grad_dtype": "bf16", "flash_attention": true})");
  const auto plan = temp_file("gb200.plan.json", R"({"dp": 8, "tp": 2, "pp": 4, "sequence_parallel": true,
      "virtual_pipeline_stages": 5, "micro_batch_size": 1, "grad_accum_steps": 32, "overlap_tp_comm": true,
      "stages": [{"num_layers": 20, "zero": 1}, {"num_layers": 20, "zero": 1}, {"num_layers": 20, "zero": 1},
                 {"num_layers": 20, "zero": 1}]})");
  auto rack = job("predict", "llama3-70b", kExamples + "cluster_gb200_nvl72.json", training, plan);
  auto text = mist(rack);
  ASSERT_EQ(text.code, kExitOk) << text.err;
  EXPECT_NE(text.out.find("on 16 × 4 GB200-NVL72-186GB (NVLink domains of 64 GPUs)"), std::string::npos) << text.out;
  auto cluster = nlohmann::json::parse(std::ifstream(kExamples + "cluster_gb200_nvl72.json"));
  cluster["nvlink_domain"] = 4;
  auto trays = job("predict", "llama3-70b", temp_file("trays.cluster.json", cluster.dump()), training, plan);
  rack.push_back("--json");
  trays.push_back("--json");
  auto a = mist(rack), b = mist(trays);
  ASSERT_EQ(a.code, kExitOk) << a.err;
  ASSERT_EQ(b.code, kExitOk) << b.err;
  EXPECT_LT(nlohmann::json::parse(a.out)["iteration_time_s"].get<double>(),
            nlohmann::json::parse(b.out)["iteration_time_s"].get<double>());
}

TEST(Cli, PredictSimulateReportsBothTimes) {
  auto args = example_job();
  args.push_back("--simulate");
  args.push_back("--json");
  auto o = mist(args);
  ASSERT_EQ(o.code, kExitOk) << o.err;
  auto j = nlohmann::json::parse(o.out);
  ASSERT_TRUE(j.value("simulated", false));
  const double sim = j["iteration_time_s"], closed = j["closed_form_iteration_time_s"];
  EXPECT_GT(sim, 0);
  EXPECT_NEAR(sim / closed, 1.0, 0.05);  // docs/simulation.md: within a few percent on such plans
  // Throughput follows the simulated time.
  EXPECT_NEAR(j["tokens_per_s"].get<double>() * sim, 512.0 * 2048, 1e-6 * 512 * 2048);
}

// "How does my current run do?": a Megatron-LM command line instead of a plan file.
TEST(Cli, PredictFromMegatronFlags) {
  const std::string flags =
      "--tensor-model-parallel-size 4 --pipeline-model-parallel-size 2 --micro-batch-size 2 "
      "--global-batch-size 512 --sequence-parallel --use-distributed-optimizer --bf16 --seq-length 2048";
  auto o = mist({"predict", "--model", "gpt3-13b", "--cluster", kExamples + "cluster_2x8_a100.json", "--training",
                 kExamples + "training_gpt.json", "--from-megatron", flags, "--json"});
  ASSERT_EQ(o.code, kExitOk) << o.err;
  auto j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["plan"]["tp"], 4);
  EXPECT_EQ(j["plan"]["pp"], 2);
  EXPECT_EQ(j["plan"]["dp"], 2);
  EXPECT_EQ(j["plan"]["grad_accum_steps"], 128);
  EXPECT_EQ(j["plan"]["stages"][0]["zero"], 1);
  // The flags leave Megatron-LM's dropout at 0.1; the training file's "dropout": false stands, and
  // the difference is said. --job-from-flags predicts the flags' job instead.
  EXPECT_EQ(j["training"]["dropout"], false);
  EXPECT_EQ(j["job_from"], "training_file");
  ASSERT_EQ(j["job_differences"].size(), 1u) << j["job_differences"];
  EXPECT_EQ(j["job_differences"][0]["field"], "dropout");
  auto flags_job = mist({"predict", "--model", "gpt3-13b", "--cluster", kExamples + "cluster_2x8_a100.json", "--training",
                         kExamples + "training_gpt.json", "--from-megatron", flags, "--json", "--job-from-flags"});
  ASSERT_EQ(flags_job.code, kExitOk) << flags_job.err;
  auto jf = nlohmann::json::parse(flags_job.out);
  EXPECT_EQ(jf["training"]["dropout"], true);
  EXPECT_EQ(jf["job_from"], "flags");
  EXPECT_GT(jf["stages"][0]["peak_memory_bytes"].get<double>(), j["stages"][0]["peak_memory_bytes"].get<double>());
  auto text = mist({"predict", "--model", "gpt3-13b", "--cluster", kExamples + "cluster_2x8_a100.json", "--training",
                    kExamples + "training_gpt.json", "--from-megatron", flags});
  EXPECT_NE(text.out.find("dropout true (the training file: false)"), std::string::npos) << text.out;
  auto stray = mist({"predict", "--model", "gpt3-13b", "--cluster", kExamples + "cluster_2x8_a100.json", "--training",
                     kExamples + "training_gpt.json", "--plan", kExamples + "plan_gpt13b_2x8.json", "--job-from-flags"});
  EXPECT_EQ(stray.code, kExitInvalidInput);
  EXPECT_NE(stray.err.find("--job-from-flags"), std::string::npos) << stray.err;
  // A micro-batch · dp (3·2) that does not divide the file's global batch names the option given.
  auto odd = mist({"predict", "--model", "gpt3-13b", "--cluster", kExamples + "cluster_2x8_a100.json", "--training",
                   kExamples + "training_gpt.json", "--from-megatron",
                   "--tensor-model-parallel-size 4 --pipeline-model-parallel-size 2 --micro-batch-size 3 "
                   "--global-batch-size 510 --bf16"});
  EXPECT_EQ(odd.code, kExitInvalidInput);
  EXPECT_EQ(odd.err.find("--compare-to"), std::string::npos) << odd.err;
  EXPECT_NE(odd.err.find("--from-megatron"), std::string::npos) << odd.err;
  // Neither or both of --plan and --from-megatron is a usage error.
  auto both = mist({"predict", "--model", "gpt3-13b", "--cluster", kExamples + "cluster_2x8_a100.json", "--training",
                    kExamples + "training_gpt.json", "--plan", kExamples + "plan_gpt13b_2x8.json", "--from-megatron",
                    flags});
  EXPECT_EQ(both.code, kExitInvalidInput);
  EXPECT_NE(both.err.find("--plan"), std::string::npos);
  auto bad = mist({"predict", "--model", "gpt3-13b", "--cluster", kExamples + "cluster_2x8_a100.json", "--training",
                   kExamples + "training_gpt.json", "--from-megatron", "--tensor-model-parallel-size 3"});
  EXPECT_EQ(bad.code, kExitInvalidInput);
  EXPECT_NE(bad.err.find("--tensor-model-parallel-size"), std::string::npos) << bad.err;
}

TEST(Cli, ExplainShowsFormulas) {
  auto o = mist(example_job("explain"));
  ASSERT_EQ(o.code, kExitOk) << o.err;
  for (const char* s : {"optimizer_states", "P_stage", "A_blk", "2·s·b·h/t", "(1 - ao)·(p·(A_mb - H·A_head) + ph·H·A_head)"})
    EXPECT_NE(o.out.find(s), std::string::npos) << s;
}

TEST(Cli, ListsCatalogsAndHelp) {
  EXPECT_NE(mist({"list", "models"}).out.find("llama3-405b"), std::string::npos);
  EXPECT_NE(mist({"list", "gpus"}).out.find("H100-SXM5-80GB"), std::string::npos);
  auto h = mist({"--help"});
  EXPECT_EQ(h.code, kExitOk);
  EXPECT_NE(h.out.find("predict"), std::string::npos);
  auto ph = mist({"predict", "--help"});
  EXPECT_EQ(ph.code, kExitOk);
  EXPECT_NE(ph.out.find("--plan"), std::string::npos);
}

TEST(Cli, BadInputNamesTheFieldAndExitsTwo) {
  const std::string cluster = kExamples + "cluster_2x8_a100.json";
  const std::string training = kExamples + "training_gpt.json";
  const std::string plan = kExamples + "plan_gpt13b_2x8.json";
  struct Case {
    std::vector<std::string> args;
    std::string expect;  // a piece of the message
  };
  const Case cases[] = {
      {job("predict", "no-such-model", cluster, training, plan), "no-such-model"},
      {job("predict", "gpt3-13b", temp_file("bad.json", "{\"gpu\": \"A100\", nodes: 2}"), training, plan),
       "malformed JSON"},
      {job("predict", "gpt3-13b", temp_file("gpu.json", R"({"gpu": "Z100", "nodes": 2})"), training, plan),
       "cluster.gpu"},
      {job("predict", "gpt3-13b", temp_file("nodes.json", R"({"gpu": "A100-SXM4-80GB", "nodes": 0})"), training,
           plan),
       "cluster.nodes"},
      {job("predict", "gpt3-13b", temp_file("bw.json", R"({"gpu": "A100-SXM4-80GB", "nodes": 2, "inter_node_GBps": -5})"),
           training, plan),
       "cluster.inter_node_GBps"},
      {job("predict", "gpt3-13b", cluster, temp_file("gbs.json", R"({"global_batch_size": 1e15, "seq_length": 2048})"),
           plan),
       "training.global_batch_size"},
      {job("predict", "gpt3-13b", cluster, temp_file("prec.json", R"({"global_batch_size": 512, "seq_length": 2048, "precision": "fp8"})"),
           plan),
       "training.precision"},
      {job("predict", "gpt3-13b", cluster, training,
           temp_file("frac.json", R"({"dp": 2, "tp": 4, "pp": 2, "micro_batch_size": 2, "grad_accum_steps": 128,
             "stages": [{"num_layers": 20, "offload": {"activations": 2}}, {"num_layers": 20}]})")),
       "plan.stages[0].offload.activations"},
      {job("predict", "gpt3-13b", cluster, training,
           temp_file("sum.json", R"({"dp": 2, "tp": 4, "pp": 2, "micro_batch_size": 2, "grad_accum_steps": 128,
             "stages": [{"num_layers": 20}, {"num_layers": 21}]})")),
       "add up to 41 but the model has 40"},
      {job("predict", temp_file("model.json", R"({"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
             "num_attention_heads": 0, "intermediate_size": 11008, "vocab_size": 32000})"),
           cluster, training, plan),
       "num_attention_heads"},
      {job("predict", "gpt3-13b", cluster, training, "/no/such/plan.json"), "/no/such/plan.json"},
      {{"predict", "--model", "gpt3-13b"}, "--cluster"},
      {{"frobnicate"}, "frobnicate"},
  };
  for (const auto& c : cases) {
    auto o = mist(c.args);
    EXPECT_EQ(o.code, kExitInvalidInput) << c.expect << "\n" << o.out;
    EXPECT_NE(o.err.find(c.expect), std::string::npos) << "expected '" << c.expect << "' in: " << o.err;
    EXPECT_TRUE(o.out.empty()) << o.out;
  }
}

TEST(Cli, LargeJobsGiveFiniteNumbers) {
  const std::string cluster = temp_file("big.json", R"({"gpu": "H100-SXM5-80GB", "nodes": 128, "gpus_per_node": 8})");
  const std::string training = temp_file("bigt.json", R"({"global_batch_size": 2048, "seq_length": 8192})");
  std::string stages;
  for (int i = 0; i < 14; ++i) stages += std::string(i ? "," : "") + R"({"num_layers": 9, "zero": 1, "ckpt_layers": 9})";
  const std::string plan = temp_file(
      "bigp.json", R"({"dp": 9, "tp": 8, "pp": 14, "sequence_parallel": true, "micro_batch_size": 1,
                      "grad_accum_steps": 227, "stages": [)" + stages + "]}");
  // 9·8·14 = 1008 GPUs: not the cluster's 1024, so this must be rejected...
  auto bad = mist(job("predict", "llama3-405b", cluster, training, plan));
  EXPECT_EQ(bad.code, kExitInvalidInput);
  EXPECT_NE(bad.err.find("1024 GPUs"), std::string::npos) << bad.err;
  // ... and a consistent 1024-GPU plan predicts finite, positive numbers.
  std::string st2;
  for (int i = 0; i < 16; ++i)
    st2 += std::string(i ? "," : "") + R"({"num_layers": )" + (i < 14 ? "8" : "7") + R"(, "zero": 1, "ckpt_layers": 4})";
  const std::string plan2 = temp_file(
      "bigp2.json", R"({"dp": 8, "tp": 8, "pp": 16, "sequence_parallel": true, "micro_batch_size": 1,
                       "grad_accum_steps": 256, "stages": [)" + st2 + "]}");
  auto args = job("predict", "llama3-405b", cluster, training, plan2);
  args.push_back("--json");
  auto o = mist(args);
  ASSERT_EQ(o.code, kExitOk) << o.err;
  auto j = nlohmann::json::parse(o.out);
  for (const auto& s : j["stages"]) {
    double peak = s["peak_memory_bytes"].get<double>();
    EXPECT_TRUE(std::isfinite(peak) && peak > 0);
  }
}

// The real binary: exit status and streams, as a user sees them.
TEST(Cli, BinaryExitStatus) {
  auto status = [](const std::string& args) {
    int raw = std::system((std::string(MIST_BINARY) + " " + args + " >/dev/null 2>&1").c_str());
    return WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  };
  EXPECT_EQ(status("list models"), 0);
  EXPECT_EQ(status("predict --model gpt3-13b --cluster " + kExamples + "cluster_2x8_a100.json --training " +
                   kExamples + "training_gpt.json --plan " + kExamples + "plan_gpt13b_2x8.json"),
            0);
  EXPECT_EQ(status("predict --model nope --cluster x --training y --plan z"), 2);
  EXPECT_EQ(status("no-such-command"), 2);
}

}  // namespace
}  // namespace mist::cli
