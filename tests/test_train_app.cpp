// strata-train and the examples end to end: exit codes, messages, metrics.
#include "test_utils.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

namespace strata {
namespace {

namespace fs = std::filesystem;

std::string bin(const std::string& name) { return std::string(STRATA_BIN_DIR) + "/" + name; }

test::CommandResult train(const std::string& args) {
  return test::run_command(bin("strata-train") + " " + args);
}

class TrainApp : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("strata-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const std::string& content) const {
    std::ofstream(path(name)) << content;
    return path(name);
  }
  std::vector<nlohmann::json> read_metrics(const std::string& name) const {
    std::vector<nlohmann::json> lines;
    std::ifstream in(path(name));
    for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
    return lines;
  }
  fs::path dir_;
};

#define EXPECT_OUTPUT_HAS(result, text) \
  EXPECT_NE((result).output.find(text), std::string::npos) << (result).output

TEST_F(TrainApp, TutorialModelOnSyntheticDataWritesMetrics) {
  auto r = train("--dataset synthetic --layers 10,5,2 --loss mse --batch-size 32 --samples 320 "
                 "--steps 30 --log-every 10 --lr 0.05 --metrics " + path("m.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto all = read_metrics("m.jsonl");
  std::vector<nlohmann::json> m;  // training log lines
  bool has_test_loss = false;
  for (auto& j : all) {
    has_test_loss |= j.contains("test_loss");
    if (j.contains("loss")) m.push_back(j);
  }
  EXPECT_TRUE(has_test_loss);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0]["step"], 10);
  EXPECT_TRUE(m[0].contains("epoch"));
  EXPECT_EQ(m[2]["step"], 30);
  m.push_back(all.back());
  EXPECT_TRUE(m.back().contains("samples_per_sec") && m.back().contains("wall_s"));
  EXPECT_GT(m.back()["samples_per_sec"].get<double>(), 0);
  // Training reduces the loss on its own data.
  EXPECT_LT(m[2]["loss"].get<double>(), m[0]["loss"].get<double>());
  EXPECT_EQ(all.back()["steps"], 30);
}

TEST_F(TrainApp, LearnsASeparableCsvProblem) {
  // Class = which of two features is larger: linearly separable.
  std::string csv = "a,b,label\n";
  for (int i = 0; i < 400; ++i) {
    const double a = (i * 37 % 101) / 101.0, b = (i * 53 % 97) / 97.0;
    csv += std::to_string(a) + "," + std::to_string(b) + "," + (a > b ? "1" : "0") + "\n";
  }
  auto r = train("--dataset csv:" + write("d.csv", csv) +
                 " --layers 2,16,2 --optimizer adam --lr 0.01 --epochs 30 --batch-size 32 "
                 "--metrics " + path("m.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  double acc = -1;
  for (auto& j : read_metrics("m.jsonl"))
    if (j.contains("test_accuracy")) acc = j["test_accuracy"];
  EXPECT_GT(acc, 0.9) << r.output;
}

TEST_F(TrainApp, SameSeedSameLosses) {
  const std::string args = "--dataset synthetic --layers 8,16,3 --steps 12 --log-every 1 "
                           "--dropout 0.2 --optimizer adam --metrics ";
  ASSERT_EQ(train(args + path("a.jsonl")).exit_code, 0);
  ASSERT_EQ(train(args + path("b.jsonl")).exit_code, 0);
  auto a = read_metrics("a.jsonl"), b = read_metrics("b.jsonl");
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].contains("loss")) EXPECT_EQ(a[i]["loss"], b[i]["loss"]) << i;
}

std::vector<double> losses(const std::vector<nlohmann::json>& metrics) {
  std::vector<double> l;
  for (auto& j : metrics)
    if (j.contains("loss")) l.push_back(j["loss"]);
  return l;
}

void expect_close(const std::vector<double>& a, const std::vector<double>& b, double rel) {
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], rel * std::fabs(b[i])) << i;
}

TEST_F(TrainApp, DataParallelOnThreadRanksMatchesOneRank) {
  // Global batch 10 on 3 ranks: shards of 4, 3 and 3.
  const std::string args = "--dataset synthetic --layers 12,32,4 --samples 200 --batch-size 10 "
                           "--steps 15 --log-every 1 --optimizer adam --no-eval --metrics ";
  auto one = train(args + path("one.jsonl"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto three = train(args + path("three.jsonl") + " --ranks 3 --threads 1 --bucket-mb 0.001");
  ASSERT_EQ(three.exit_code, 0) << three.output;
  EXPECT_OUTPUT_HAS(three, "3 rank(s) (threads)");
  expect_close(losses(read_metrics("three.jsonl")), losses(read_metrics("one.jsonl")), 1e-5);
  EXPECT_EQ(read_metrics("three.jsonl").back()["ranks"], 3);
}

TEST_F(TrainApp, AccumulationMatchesALargerBatch) {
  const std::string args = "--dataset synthetic --layers 12,32,4 --samples 240 --steps 6 "
                           "--log-every 1 --no-eval --no-shuffle --metrics ";
  ASSERT_EQ(train(args + path("big.jsonl") + " --batch-size 30").exit_code, 0);
  auto acc = train(args + path("acc.jsonl") + " --batch-size 10 --accumulate 3 --ranks 2 --threads 1");
  ASSERT_EQ(acc.exit_code, 0) << acc.output;
  expect_close(losses(read_metrics("acc.jsonl")), losses(read_metrics("big.jsonl")), 1e-5);
}

#ifdef STRATA_MPIEXEC
TEST_F(TrainApp, DataParallelOnMpiRanksMatchesOneRank) {
  const std::string args = "--dataset synthetic --layers 12,32,4 --samples 200 --batch-size 10 "
                           "--steps 15 --log-every 1 --no-eval --metrics ";
  ASSERT_EQ(train(args + path("one.jsonl")).exit_code, 0);
  auto mpi = test::run_command(std::string("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                                           "OMPI_MCA_rmaps_base_oversubscribe=1 ") +
                               STRATA_MPIEXEC + " -n 2 " + bin("strata-train") + " " + args +
                               path("mpi.jsonl") + " --ranks 2 --threads 1");
  ASSERT_EQ(mpi.exit_code, 0) << mpi.output;
  EXPECT_OUTPUT_HAS(mpi, "4 rank(s) (hierarchical)");
  expect_close(losses(read_metrics("mpi.jsonl")), losses(read_metrics("one.jsonl")), 1e-5);
}
#endif

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

const char* kCheckpointRun =
    "--dataset synthetic --layers 12,32,16,4 --samples 300 --batch-size 16 --optimizer adam "
    "--dropout 0.1 --no-eval -q ";

TEST_F(TrainApp, ResumeIsBitwiseIdenticalToAnUninterruptedRun) {
  const std::string a = path("a"), b = path("b");
  ASSERT_EQ(train(std::string(kCheckpointRun) + "--steps 40 --checkpoint-dir " + a).exit_code, 0);
  // Stop at step 20 (mid-epoch: 17 steps per epoch), then resume to 40.
  ASSERT_EQ(train(std::string(kCheckpointRun) + "--steps 20 --checkpoint-dir " + b).exit_code, 0);
  auto r = train(std::string(kCheckpointRun) + "--steps 40 --checkpoint-dir " + b + " --resume");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string fa = file_bytes(a + "/ckpt-000000040.strata");
  ASSERT_FALSE(fa.empty());
  EXPECT_TRUE(fa == file_bytes(b + "/ckpt-000000040.strata"))
      << "parameters, optimizer state and counters must be bitwise identical";
}

TEST_F(TrainApp, DataParallelCheckpointResumesOnAnotherRankCount) {
  const std::string dir = path("ck");
  const std::string args = std::string(kCheckpointRun) + "--log-every 1 --checkpoint-dir " + dir;
  ASSERT_EQ(train(args + " --steps 10 --ranks 2 --threads 1").exit_code, 0);
  auto three = train(args + " --steps 20 --ranks 3 --threads 1 --resume --metrics " + path("3.jsonl"));
  ASSERT_EQ(three.exit_code, 0) << three.output;
  // The same continuation on one rank: the same data order, so the same losses.
  ASSERT_EQ(train(std::string(kCheckpointRun) + "--steps 10 --checkpoint-dir " + path("one")).exit_code, 0);
  auto one = train(std::string(kCheckpointRun) + "--log-every 1 --steps 20 --checkpoint-dir " +
                   path("one") + " --resume --metrics " + path("1.jsonl"));
  ASSERT_EQ(one.exit_code, 0);
  expect_close(losses(read_metrics("3.jsonl")), losses(read_metrics("1.jsonl")), 1e-5);
}

// Bad options, bad data, models that do not fit the data, and corrupt,
// foreign or unwritable checkpoints: the catalogue in test_bad_inputs.cpp
// (docs/errors.md).

TEST_F(TrainApp, HelpAndVersion) {
  auto h = train("--help");
  EXPECT_EQ(h.exit_code, 0);
  EXPECT_OUTPUT_HAS(h, "--batch-size");
  EXPECT_OUTPUT_HAS(h, "--metrics");
  auto v = train("--version");
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_OUTPUT_HAS(v, "Kokkos");
}

TEST_F(TrainApp, DivergenceExitsWith4NamingStepAndLayer) {
  auto r = train("--dataset synthetic --layers 10,32,2 --loss mse --lr 1e30 --steps 20");
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_OUTPUT_HAS(r, "diverged");
  EXPECT_OUTPUT_HAS(r, "at step 2");
  EXPECT_OUTPUT_HAS(r, "layer 2 (Linear(32, 2))");
}

TEST_F(TrainApp, AFailingThreadRankEndsTheRunWithAnErrorNamingIt) {
  auto r = test::run_command("STRATA_FAULT=1:5 STRATA_COMM_TIMEOUT=60 " + bin("strata-train") +
                             " --dataset synthetic --layers 10,32,2 --steps 20 --ranks 3 --threads 1");
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_OUTPUT_HAS(r, "injected failure of rank 1 at step 5");
}

#ifdef STRATA_MPIEXEC
TEST_F(TrainApp, AKilledMpiProcessEndsTheJob) {
  auto r = test::run_command(std::string("STRATA_FAULT=1:5 OMPI_ALLOW_RUN_AS_ROOT=1 "
                                         "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                                         "OMPI_MCA_rmaps_base_oversubscribe=1 timeout 120 ") +
                             STRATA_MPIEXEC + " -n 2 " + bin("strata-train") +
                             " --dataset synthetic --layers 10,32,2 --steps 20");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << "the job hung until the test's own timeout";
  EXPECT_OUTPUT_HAS(r, "killing rank 1 at step 5");
  EXPECT_OUTPUT_HAS(r, "rank 1");
}
#endif

TEST_F(TrainApp, FashionMnistShortRun) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  auto r = train("--steps 30 --log-every 10 --optimizer adam --metrics " + path("m.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  double acc = -1;
  for (auto& j : read_metrics("m.jsonl"))
    if (j.contains("test_accuracy")) acc = j["test_accuracy"];
  EXPECT_GT(acc, 0.5) << "30 Adam steps should beat chance (0.1) by far";
}

#ifdef STRATA_HAS_EXAMPLES
TEST(ExampleSimpleModel, TrainsAndRefusesTheTutorialsShapeMismatch) {
  auto ok = test::run_command(bin("strata-example-simple-model") + " --steps 20");
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_OUTPUT_HAS(ok, "step 20 loss");
  auto bad = test::run_command(bin("strata-example-simple-model") + " --target-width 5");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_OUTPUT_HAS(bad, "MSE loss");
  EXPECT_OUTPUT_HAS(bad, "(32, 5)");
  EXPECT_OUTPUT_HAS(bad, "(32, 2)");
}

TEST(ExampleDataParallel, ThreadRanksMatchTheSingleRankExample) {
  // Same model, batch and seed: 3 thread ranks print the single-rank losses.
  auto one = test::run_command(bin("strata-example-simple-model") + " --steps 20");
  auto dp = test::run_command(bin("strata-example-data-parallel") + " --steps 20 --ranks 3");
  ASSERT_EQ(dp.exit_code, 0) << dp.output;
  auto loss_at_20 = [](const std::string& out) {
    const auto p = out.find("step 20 loss ");
    return p == std::string::npos ? -1.0 : std::stod(out.substr(p + 13));
  };
  EXPECT_NEAR(loss_at_20(dp.output), loss_at_20(one.output), 1e-5 * loss_at_20(one.output))
      << one.output << dp.output;
  EXPECT_OUTPUT_HAS(dp, "3 ranks, threads");
}
#endif

}  // namespace
}  // namespace strata
