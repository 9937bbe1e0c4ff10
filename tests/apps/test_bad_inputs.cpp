// The bad-input catalogue of strata-train (docs/errors.md): every entry runs
// the program on one defect and checks the exit code (2 configuration, 3 data,
// 4 runtime; apps/common/app_main.hpp) and that the message names the
// problem. Entries that involve checkpoints also check that the checkpoints
// already on disk are byte-for-byte untouched and still resume.
//
// Each entry's name is a row of the table in docs/errors.md, with the same
// exit code (DocsListEveryEntryWithItsExitCode checks this).
//
// Covered elsewhere and referenced in docs/errors.md: divergence and a
// failing rank (test_train_app), a loss target of the wrong shape (reachable
// through the API and strata-example-simple-model, test_train_app).
#include "data/safetensors.hpp"
#include "strategies/checkpoint.hpp"
#include "strata_config.hpp"
#include "test_utils.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace strata {
namespace {

namespace fs = std::filesystem;

std::string bin(const std::string& name) { return std::string(STRATA_BIN_DIR) + "/" + name; }

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void put32(std::string& s, std::uint32_t v) {
  for (int b = 3; b >= 0; --b) s.push_back(static_cast<char>((v >> (8 * b)) & 0xff));
}

// An IDX file: magic, dimensions, then `payload` bytes of value `fill`.
std::string idx(std::uint32_t magic, const std::vector<std::uint32_t>& dims, std::size_t payload,
                char fill = 1) {
  std::string s;
  put32(s, magic);
  for (std::uint32_t d : dims) put32(s, d);
  s.append(payload, fill);
  return s;
}

// A fresh folder per entry, and the files entries are made of.
class Workspace {
 public:
  explicit Workspace(const std::string& name) {
    std::string clean = name;
    for (char& ch : clean)
      if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    dir_ = fs::temp_directory_path() / ("strata-bad-" + std::to_string(::getpid()) + "-" + clean);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~Workspace() { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const std::string& bytes) const {
    fs::create_directories(fs::path(path(name)).parent_path());
    std::ofstream(path(name), std::ios::binary) << bytes;
    return path(name);
  }

  // A Fashion-MNIST folder of small valid files (10 training, 2 test images).
  std::string fashion_mnist() const {
    write("fm/train-images-idx3-ubyte", idx(0x803, {10, 28, 28}, 10 * 784));
    write("fm/train-labels-idx1-ubyte", idx(0x801, {10}, 10, 3));
    write("fm/t10k-images-idx3-ubyte", idx(0x803, {2, 28, 28}, 2 * 784));
    write("fm/t10k-labels-idx1-ubyte", idx(0x801, {2}, 2, 3));
    return path("fm");
  }

  // Checkpoints at steps 5, 10, 15 and 20 of kCheckpointArgs in ck/ (with
  // kShardedArgs: sharded, a manifest and a folder of shards each).
  std::string checkpoints(const std::string& extra = "") {
    const auto r = test::run_command(bin("strata-train") + " " + kCheckpointArgs + extra +
                                     " --steps 20 --checkpoint-every 5 --keep-checkpoints 10 "
                                     "--checkpoint-dir " + path("ck"));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    snapshot_ = files_in_ck();
    EXPECT_EQ(snapshot_.size(), extra.empty() ? 5u : 13u)
        << "4 checkpoints (of 2 shards each) and 'latest'";
    return path("ck");
  }
  std::string checkpoint(int step) const {
    char name[64];
    std::snprintf(name, sizeof name, "ck/ckpt-%09d.strata", step);
    return path(name);
  }
  // The shard file of `rank` of a sharded checkpoint.
  std::string shard(int step, int rank) const {
    char prefix[64];
    std::snprintf(prefix, sizeof prefix, "rank-%05d-of-", rank);
    const fs::path folder = fs::path(checkpoint(step)).replace_extension(".shards");
    for (const auto& e : fs::directory_iterator(folder))
      if (e.path().filename().string().rfind(prefix, 0) == 0) return e.path().string();
    ADD_FAILURE() << "no shard of rank " << rank << " in " << folder;
    return std::string();
  }
  // Records that the entry damages this file on purpose (empty bytes and
  // remove: deletes it).
  void damage(const std::string& file, const std::string& bytes, bool remove = false) {
    if (remove) fs::remove(file);
    else write(fs::relative(file, dir_).string(), bytes);
    damaged_.push_back(fs::relative(file, path("ck")).string());
  }

  // After the run: every checkpoint file that was there before and was not
  // damaged on purpose is byte-for-byte the same, nothing was added (but the
  // shards of a failed sharded write, in a folder without a manifest, which
  // the next checkpoint removes), and an intact checkpoint still loads and
  // resumes.
  void expect_checkpoints_untouched() const {
    if (snapshot_.empty()) return;
    const auto now = files_in_ck();
    for (const auto& [name, bytes] : snapshot_) {
      if (std::find(damaged_.begin(), damaged_.end(), name) != damaged_.end()) continue;
      ASSERT_TRUE(now.count(name)) << name << " was removed";
      EXPECT_TRUE(now.at(name) == bytes) << name << " changed";
    }
    for (const auto& [name, bytes] : now) {
      const auto slash = name.find(".shards/");
      const bool orphan = slash != std::string::npos &&
                          !fs::exists(path("ck/" + name.substr(0, slash) + ".strata"));
      EXPECT_TRUE(snapshot_.count(name) || orphan) << name << " was added";
    }
    std::string intact;
    for (int step : {15, 10, 5}) {
      const std::string name = fs::path(checkpoint(step)).filename().string();
      bool hit = false;
      for (const auto& d : damaged_) hit |= d.rfind(name.substr(0, 14), 0) == 0;
      if (!hit) {
        intact = checkpoint(step);
        break;
      }
    }
    ASSERT_FALSE(intact.empty());
    EXPECT_NO_THROW(checkpoint::load(intact)) << intact;
    const auto r = test::run_command(bin("strata-train") + " " + kCheckpointArgs +
                                     "--steps 25 --resume-from " + intact);
    EXPECT_EQ(r.exit_code, 0) << "resuming from " << intact << ":\n" << r.output;
  }

  static constexpr const char* kCheckpointArgs =
      "--dataset synthetic --layers 12,32,4 --samples 300 --batch-size 16 --optimizer adam "
      "--no-eval -q ";
  // Model-parallel runs write sharded checkpoints.
  static constexpr const char* kShardedArgs = "--strategy pipeline --ranks 2 --threads 1 ";

 private:
  // Files under ck/ (relative paths) and their bytes.
  std::map<std::string, std::string> files_in_ck() const {
    std::map<std::string, std::string> files;
    for (const auto& e : fs::recursive_directory_iterator(path("ck")))
      if (e.is_regular_file())
        files[fs::relative(e.path(), path("ck")).string()] = file_bytes(e.path().string());
    return files;
  }

  fs::path dir_;
  std::map<std::string, std::string> snapshot_;
  std::vector<std::string> damaged_;
};

struct Entry {
  std::string name;  // the row of docs/errors.md
  int exit_code;
  std::vector<std::string> message;  // pieces the output must contain
  // Prepares the files and returns strata-train's arguments.
  std::function<std::string(Workspace&)> prepare;
  std::string env = {};  // VAR=VALUE ... for the run
  std::string never_written = {};  // a file of the workspace the run must not create
};

void PrintTo(const Entry& e, std::ostream* os) { *os << e.name; }

std::string csv(Workspace& w, const std::string& text) { return "--dataset csv:" + w.write("d.csv", text); }

// The weights of the MLP of kCheckpointArgs (--layers 12,32,4) as safetensors
// bytes; `shapes` replaces the shape of the tensors it names, `drop` leaves
// one out.
std::string mlp_weights(const std::map<std::string, std::vector<std::uint64_t>>& shapes = {},
                        const std::string& drop = "") {
  safetensors::File f;
  const std::vector<std::pair<std::string, std::vector<std::uint64_t>>> tensors{
      {"0.weight", {32, 12}}, {"0.bias", {32}}, {"2.weight", {4, 32}}, {"2.bias", {4}}};
  for (auto [name, shape] : tensors) {
    if (name == drop) continue;
    if (shapes.count(name)) shape = shapes.at(name);
    std::uint64_t n = 1;
    for (auto d : shape) n *= d;
    f.tensors.push_back(safetensors::make_tensor(name, shape, std::vector<double>(n, 0.01), safetensors::DType::F32));
  }
  return safetensors::serialize(f);
}
constexpr const char* kWeightArgs =
    "--dataset synthetic --layers 12,32,4 --samples 300 --batch-size 16 --no-eval -q --steps 2 ";

const std::vector<Entry>& catalogue() {
  static const std::vector<Entry> entries = {
      // ---------------------------------------------------------- options (2)
      {"unknown option", 2, {"--no-such-option", "not expected"},
       [](Workspace&) { return "--no-such-option"; }},
      {"option without its value", 2, {"--layers", "missing"},
       [](Workspace&) { return "--layers"; }},
      // Found by fuzz_train_args: "runtime error: stoll", exit 4.
      {"value given to a flag", 2, {"--no-overlap", "mse"},
       [](Workspace&) { return "--dataset synthetic --no-overlap=mse"; }},
      {"malformed number", 2, {"--batch-size", "'ten' is not a whole number"},
       [](Workspace&) { return "--batch-size ten"; }},
      {"negative count", 2, {"--seed", "'-1' is not a whole number (it is negative)"},
       [](Workspace&) { return "--seed -1"; }},
      {"zero where a positive count is needed", 2, {"--batch-size", "must be a positive whole number, got '0'"},
       [](Workspace&) { return "--batch-size 0"; }},
      {"number out of range", 2, {"--dropout", "'1.5' is out of range [0, 0.99]"},
       [](Workspace&) { return "--dropout 1.5"; }},
      {"not a finite number", 2, {"--bucket-mb", "'nan' is not a finite number"},
       [](Workspace&) { return "--bucket-mb nan"; }},
      {"rank count out of range", 2, {"--ranks", "'0' is out of range [1, 1024]"},
       [](Workspace&) { return "--ranks 0"; }},
      {"malformed layer widths", 2, {"layer widths '10,abc,2'", "'abc' is not a positive integer"},
       [](Workspace&) { return "--layers 10,abc,2"; }},
      {"a single layer width", 2, {"layer widths '10'", "need at least an input and an output width"},
       [](Workspace&) { return "--layers 10"; }},
      {"unknown optimizer", 2, {"unknown optimizer 'lbfgs'"},
       [](Workspace&) { return "--optimizer lbfgs"; }},
      {"unknown loss", 2, {"unknown loss 'hinge'"}, [](Workspace&) { return "--loss hinge"; }},
      {"unknown activation", 2, {"unknown activation 'swish'"},
       [](Workspace&) { return "--activation swish"; }},
      {"unknown data set", 2, {"--dataset: unknown data set 'imagenet'"},
       [](Workspace&) { return "--dataset imagenet"; }},
      {"unknown strategy", 2, {"--strategy: unknown strategy 'zigzag'"},
       [](Workspace&) { return "--strategy zigzag"; }},
      {"negative learning rate", 2, {"learning rate must be finite and >= 0, got -1"},
       [](Workspace&) { return "--dataset synthetic --lr -1"; }},
      {"--epochs with --steps", 2, {"--epochs excludes --steps"},
       [](Workspace&) { return "--epochs 2 --steps 3"; }},
      {"--resume with --resume-from", 2, {"--resume and --resume-from contradict each other"},
       [](Workspace&) { return "--checkpoint-dir x --resume --resume-from y"; }},
      {"--init-from with --resume", 2, {"--init-from starts a new run from weights"},
       [](Workspace&) { return "--checkpoint-dir x --resume --init-from w.safetensors"; }},
      {"unknown --export-dtype", 2, {"--export-dtype: unknown dtype 'int4'"},
       [](Workspace&) { return "--export w.safetensors --export-dtype int4"; }},
      // ------------------------------------------------- weights (--init-from)
      {"weights file that is not safetensors", 3, {"safetensors file '", "w.safetensors'", "not a safetensors file"},
       [](Workspace& w) { return std::string(kWeightArgs) + "--init-from " + w.write("w.safetensors", "1,2,3\n4,5,6\n"); }},
      {"truncated weights file", 3, {"w.safetensors', tensor '2.bias': data_offsets [2176, 2192] reach past the 2182 bytes"},
       [](Workspace& w) {
         const std::string b = mlp_weights();
         return std::string(kWeightArgs) + "--init-from " + w.write("w.safetensors", b.substr(0, b.size() - 10));
       }},
      {"weights header longer than the file", 3, {"w.safetensors': the header says it is", "bytes long"},
       [](Workspace& w) {
         std::string b = mlp_weights();
         b[3] = 1;  // header length + 2^24
         return std::string(kWeightArgs) + "--init-from " + w.write("w.safetensors", b);
       }},
      {"overlapping tensors in a weights file", 3, {"w.safetensors': tensor '0.bias' (bytes [1532, 1660)) overlaps tensor '0.weight'"},
       [](Workspace& w) {
         std::string b = mlp_weights();
         const auto at = b.find("[1536,1664]");  // 0.bias, moved 4 bytes into 0.weight
         b.replace(at, 11, "[1532,1660]");
         return std::string(kWeightArgs) + "--init-from " + w.write("w.safetensors", b);
       }},
      {"unknown dtype in a weights file", 3, {"w.safetensors', tensor '0.bias': unknown dtype 'F99'"},
       [](Workspace& w) {
         std::string b = mlp_weights();
         b.replace(b.find("F32"), 3, "F99");
         return std::string(kWeightArgs) + "--init-from " + w.write("w.safetensors", b);
       }},
      {"weights of another shape", 3, {"w.safetensors' does not match the model", "1 of another shape: 0.weight: file [32, 13], model [32, 12]"},
       [](Workspace& w) {
         return std::string(kWeightArgs) + "--init-from " + w.write("w.safetensors", mlp_weights({{"0.weight", {32, 13}}}));
       }},
      {"weights missing a tensor", 3, {"1 of the model's tensors missing: 2.bias [4]", "--no-strict"},
       [](Workspace& w) {
         return std::string(kWeightArgs) + "--init-from " + w.write("w.safetensors", mlp_weights({}, "2.bias"));
       }},
      {"unwritable --export path", 4, {"--export: cannot write '", "no-dir/w.safetensors'"},
       [](Workspace& w) {
         return std::string(kWeightArgs) + "--metrics " + w.path("m.jsonl") + " --export " + w.path("no-dir/w.safetensors");
       },
       {},
       "m.jsonl"},
      {"--resume without --checkpoint-dir", 2, {"--resume needs --checkpoint-dir"},
       [](Workspace&) { return "--resume"; }},
      {"--checkpoint-every without --checkpoint-dir", 2, {"--checkpoint-every needs --checkpoint-dir"},
       [](Workspace&) { return "--checkpoint-every 5"; }},
      {"--dp that disagrees with the ranks", 2, {"--dp 3 but 2 rank(s) were started"},
       [](Workspace&) { return "--dataset synthetic --steps 1 --ranks 2 --dp 3"; }},
      {"fp16 gradient compression without loss scaling", 2,
       {"--grad-compression fp16 without loss scaling", "use --grad-compression bf16"},
       [](Workspace&) { return "--dataset synthetic --steps 1 --ranks 2 --grad-compression fp16"; }},
      {"more micro-batches than samples in a batch", 2,
       {"--micro-batches 8 splits each batch of --batch-size 4 samples"},
       [](Workspace&) { return "--dataset synthetic --steps 1 --ranks 2 --pp 2 --batch-size 4 --micro-batches 8"; }},
      {"--chunk without --reproducible", 2, {"--chunk applies to --reproducible runs"},
       [](Workspace&) { return "--dataset synthetic --steps 1 --chunk 8"; }},
      {"--reproducible with shards of part chunks", 2,
       {"--reproducible: a global batch of 20 samples splits over 3 data-parallel rank(s) into "
        "shards of 7, 7, 6 samples", "multiple of 6 (3 x 2)"},
       [](Workspace&) {
         return "--dataset synthetic --steps 1 --ranks 3 --batch-size 20 --reproducible --chunk 2";
       }},
      {"--reproducible with tensor parallelism and no --tp-chunk", 2,
       {"--reproducible with --tp 2 needs --tp-chunk S"},
       [](Workspace&) {
         return "--dataset synthetic --steps 1 --ranks 2 --tp 2 --batch-size 8 --reproducible --chunk 2";
       }},
      {"--tp-chunk that a rank's shard is not whole chunks of", 2,
       {"--tp-chunk 48: ColumnParallelLinear(784, 256, tp=2) holds 128 output features on a rank",
        "give a --tp-chunk that divides 128"},
       [](Workspace&) {
         return "--dataset synthetic --steps 1 --ranks 2 --tp 2 --batch-size 8 --reproducible "
                "--chunk 2 --tp-chunk 48";
       }},
      {"--sequence-parallel without tensor parallelism", 2,
       {"--sequence-parallel shards the sequence over the tensor-parallel ranks: give --tp 2 or more"},
       [](Workspace&) { return "--dataset synthetic --steps 1 --ranks 2 --sequence-parallel"; }},
      {"--sequence-parallel on a model without a sequence", 2,
       {"sequence parallelism: the model has no block with a tensor-parallel pair"},
       [](Workspace&) {
         return "--dataset synthetic --steps 1 --ranks 2 --tp 2 --batch-size 8 --sequence-parallel";
       }},
      {"--tp-chunk without --reproducible", 2, {"--tp-chunk applies to --reproducible runs"},
       [](Workspace&) { return "--dataset synthetic --steps 1 --tp-chunk 8"; }},
      {"--strategy plan with a layout option", 2,
       {"--strategy plan chooses --dp, --pp, --tp, --zero, --micro-batches, --sequence-parallel and "
        "--recompute itself"},
       [](Workspace&) { return "--dataset synthetic --steps 1 --strategy plan --plan-profile p.json --pp 2"; }},
      {"--strategy plan with a profile missing a field", 2, {"the profile has no 'launch'"},
       [](Workspace& w) {
         return "--dataset synthetic --steps 1 --ranks 2 --strategy plan --plan-profile " +
                w.write("p.json", R"({"format": "strata-machine-profile", "version": 1, "kind": "cpu",
                  "nodes": 1, "devices_per_node": 2, "memory_per_node": 8e9,
                  "gemm_flops": {"fp32": 5e10, "bf16": 5e10}, "gemm_half_flops": 1e6,
                  "memory_bandwidth": 2e10,
                  "intra_node": {"latency": 1e-6, "bandwidth": 1e10},
                  "inter_node": {"latency": 1e-6, "bandwidth": 1e10}})");
       }},
      {"--plan-profile or --profile from a calibration before 2026-12-07", 2,
       {"'measured_gemms' is from an older strata-plan calibrate", "calibrate again"},
       [](Workspace& w) {
         return "--dataset synthetic --steps 1 --ranks 2 --strategy plan --plan-profile " +
                w.write("p.json", R"({"format": "strata-machine-profile", "version": 1, "kind": "cpu",
                  "name": "old", "nodes": 1, "devices_per_node": 2, "memory_per_node": 8e9,
                  "gemm_flops": {"fp32": 5e10, "bf16": 5e10}, "gemm_half_flops": 1e6,
                  "memory_bandwidth": 2e10, "launch": 3e-6,
                  "intra_node": {"latency": 1e-6, "bandwidth": 1e10},
                  "inter_node": {"latency": 1e-6, "bandwidth": 1e10},
                  "measured_gemms": [{"rows": 64, "n": 10, "k": 784, "threads": 1, "ranks": 2,
                                      "forward": 1e-4, "backward": 2e-4}]})");
       }},
      {"--threads with --kokkos-threads", 2, {"--threads and --kokkos-threads", "give one"},
       [](Workspace&) { return "--dataset synthetic --steps 1 --threads 2 --kokkos-threads=1"; }},
      {"--loss-scale-growth-interval without loss scaling", 2,
       {"--loss-scale-growth-interval needs dynamic loss scaling"},
       [](Workspace&) { return "--dataset synthetic --steps 1 --loss-scale-growth-interval 5"; }},
      {"--strategy local with several ranks", 2, {"--strategy local runs one rank, but 2 ranks"},
       [](Workspace&) { return "--dataset synthetic --strategy local --ranks 2"; }},
      {"--loss mse on class labels", 2, {"--loss mse needs regression targets"},
       [](Workspace&) { return "--loss mse --dataset fashion-mnist"; }},
      {"--data-dir with another data set", 2, {"--data-dir applies to --dataset fashion-mnist only"},
       [](Workspace&) { return "--dataset synthetic --data-dir x"; }},
      {"unwritable --metrics file", 2, {"--metrics: cannot open", "no-such-dir/m.jsonl"},
       [](Workspace& w) {
         return "--dataset synthetic --layers 4,2 --steps 1 --metrics " + w.path("no-such-dir/m.jsonl");
       }},
      {"unknown communicator", 2, {"--comm: unknown communicator 'carrier-pigeon'"},
       [](Workspace&) { return "--comm carrier-pigeon"; }},
      // This build's kernels run on the host: without NCCL or with it, NCCL is refused.
      {"a communicator this build cannot use", 2, {"--comm nccl: ", "(available: self, threads"},
       [](Workspace&) { return "--dataset synthetic --layers 4,2 --steps 1 --comm nccl"; }},
      {"--device on a host build", 2, {"--device 0: this build runs its kernels on", "not on a GPU"},
       [](Workspace&) { return "--dataset synthetic --layers 4,2 --steps 1 --device 0"; }},
      {"a communicator that does not fit the ranks", 2, {"--comm self runs one rank, not 2 thread rank(s)"},
       [](Workspace&) { return "--dataset synthetic --layers 4,2 --steps 1 --comm self --ranks 2"; }},
      // -------------------------------------------------------- model files (2)
      {"--model with --layers", 2, {"describes the layers; --layers, --activation and --dropout describe an MLP"},
       [](Workspace& w) { return "--model " + w.write("m.toml", "input = [4]\n") + " --layers 4,2"; }},
      {"missing model file", 2, {"model file '", "nowhere.toml' cannot be opened"},
       [](Workspace& w) { return "--model " + w.path("nowhere.toml") + " --steps 1"; }},
      {"model file that is not TOML", 2, {"m.toml:2: "},
       [](Workspace& w) { return "--model " + w.write("m.toml", "input = [4]\n[[layers\n") + " --steps 1"; }},
      {"unknown layer type", 2, {"m.toml:2: unknown layer type 'convolution' (known: "},
       [](Workspace& w) {
         return "--model " + w.write("m.toml", "input = [4]\n[[layers]]\ntype = \"convolution\"\n") + " --steps 1";
       }},
      {"misspelt layer option", 2, {"m.toml:5: layer type 'linear', key 'bias_'", "unknown option"},
       [](Workspace& w) {
         return "--model " + w.write("m.toml", "input = [4]\n[[layers]]\ntype = \"linear\"\nout = 2\nbias_ = false\n") +
                " --steps 1";
       }},
      {"a convolution whose output would be empty", 2,
       {"m.toml:2: layer 0 (conv2d) with input shape {1, 4, 4}", "Conv2d(1, 2, kernel 5x5)",
        "would be empty"},
       [](Workspace& w) {
         return "--model " +
                w.write("m.toml", "input = [1, 4, 4]\n[[layers]]\ntype = \"conv2d\"\nout = 2\nkernel = 5\n") +
                " --dataset synthetic --steps 1";
       }},
      {"channels that do not divide by groups", 2,
       {"m.toml:2", "input channels (3) do not divide by groups (2)"},
       [](Workspace& w) {
         return "--model " +
                w.write("m.toml",
                        "input = [3, 4, 4]\n[[layers]]\ntype = \"conv2d\"\nout = 2\nkernel = 3\ngroups = 2\n") +
                " --dataset synthetic --steps 1";
       }},
      {"images whose size disagrees with the model's input", 2,
       {"takes inputs of shape {3, 32, 32} (3072 values)", "784 features per sample"},
       [](Workspace& w) {
         return "--model " +
                w.write("m.toml",
                        "input = [3, 32, 32]\n[[layers]]\ntype = \"conv2d\"\nout = 2\nkernel = 3\n"
                        "[[layers]]\ntype = \"global_avgpool\"\n[[layers]]\ntype = \"linear\"\nout = 10\n") +
                " --steps 1";
       }},
      {"images whose shape disagrees with the model's input", 2,
       {"takes inputs of shape {4, 14, 14} (784 values)", "has samples of shape {1, 28, 28}"},
       [](Workspace& w) {
         return "--model " +
                w.write("m.toml",
                        "input = [4, 14, 14]\n[[layers]]\ntype = \"conv2d\"\nout = 2\nkernel = 3\n"
                        "[[layers]]\ntype = \"global_avgpool\"\n[[layers]]\ntype = \"linear\"\nout = 10\n") +
                " --steps 1";
       }},
      {"--input-shape that disagrees with the CSV", 2,
       {"--input-shape 2,2 has 4 values per sample but", "has 3"},
       [](Workspace& w) {
         return "--dataset csv:" + w.write("d.csv", "1,2,3,0\n4,5,6,1\n3,2,1,0\n") +
                " --layers 3,2 --input-shape 2,2 --steps 1";
       }},
      {"augmentation of data without an image shape", 2,
       {"--random-crop and --random-flip augment images", "shape {8}"},
       [](Workspace&) { return std::string("--dataset synthetic --layers 8,2 --random-flip --steps 1"); }},
      {"SyncBatchNorm with a pipeline", 2,
       {"SyncBatchNorm (sync_batchnorm, --sync-bn) works with data parallelism"},
       [](Workspace& w) {
         return "--model " +
                w.write("m.toml", "input = [4]\n[[layers]]\ntype = \"linear\"\nout = 4\n[[layers]]\n"
                                  "type = \"batchnorm\"\n[[layers]]\ntype = \"linear\"\nout = 2\n") +
                " --dataset synthetic --sync-bn --strategy pipeline --ranks 2 --steps 1";
       }},
      {"a residual block that changes the shape", 2,
       {"m.toml:2: layer 0 (residual) with input shape {4}", "must keep the shape of its input {4}"},
       [](Workspace& w) {
         return "--model " +
                w.write("m.toml", "input = [4]\n[[layers]]\ntype = \"residual\"\nlayers = [ { type = "
                                  "\"linear\", out = 2 } ]\n") +
                " --steps 1";
       }},
      // ---------------------------------------------------- model vs data (2)
      {"input width differs from the data", 2, {"--layers starts with width 4", "d.csv", "has 3 features"},
       [](Workspace& w) { return csv(w, "1,2,3,0\n4,5,6,1\n7,8,9,2\n1,1,1,0\n") + " --layers 4,2,3 --steps 1"; }},
      {"fewer outputs than classes", 2, {"--layers ends with width 2", "d.csv", "has 3 classes"},
       [](Workspace& w) { return csv(w, "1,2,3,0\n4,5,6,1\n7,8,9,2\n1,1,1,0\n") + " --layers 3,2 --steps 1"; }},
      {"regression targets of another width", 2, {"--layers starts with width 3", "has 2 features", "the last 2 columns"},
       [](Workspace& w) { return csv(w, "1,2,3,0\n4,5,6,1\n7,8,9,2\n1,1,1,0\n") + " --loss mse --layers 3,2 --steps 1"; }},
      // -------------------------------------------------------------- data (3)
      {"missing data directory", 3, {"Fashion-MNIST directory", "nowhere", "does not exist"},
       [](Workspace& w) { return "--data-dir " + w.path("nowhere") + " --steps 1"; }},
      {"missing IDX file", 3, {"t10k-labels-idx1-ubyte", "not found in"},
       [](Workspace& w) {
         const std::string dir = w.fashion_mnist();
         fs::remove(dir + "/t10k-labels-idx1-ubyte");
         return "--data-dir " + dir + " --steps 1";
       }},
      {"truncated IDX file", 3, {"train-images-idx3-ubyte' is truncated", "expected 7840 bytes of data, got 7835"},
       [](Workspace& w) {
         const std::string dir = w.fashion_mnist();
         w.write("fm/train-images-idx3-ubyte", idx(0x803, {10, 28, 28}, 10 * 784 - 5));
         return "--data-dir " + dir + " --steps 1";
       }},
      {"corrupt IDX magic", 3, {"train-labels-idx1-ubyte", "wrong magic number", "expected 0x00000801", "found 0x00000803"},
       [](Workspace& w) {
         const std::string dir = w.fashion_mnist();
         w.write("fm/train-labels-idx1-ubyte", idx(0x803, {10}, 10, 3));
         return "--data-dir " + dir + " --steps 1";
       }},
      {"corrupt gzip stream", 3,
       {"train-images-idx3-ubyte.gz", STRATA_HAS_ZLIB ? "corrupt gzip data" : "built without zlib"},
       [](Workspace& w) {
         const std::string dir = w.fashion_mnist();
         fs::remove(dir + "/train-images-idx3-ubyte");
         // A gzip header followed by a deflate block of the reserved type 3.
         w.write("fm/train-images-idx3-ubyte.gz", std::string("\x1f\x8b\x08\0\0\0\0\0\0\x03\xff\xff\xff\xff", 14));
         return "--data-dir " + dir + " --steps 1";
       }},
      {"image and label counts differ", 3, {"image and label counts differ", "10 images", "9 labels"},
       [](Workspace& w) {
         const std::string dir = w.fashion_mnist();
         w.write("fm/train-labels-idx1-ubyte", idx(0x801, {9}, 9, 3));
         return "--data-dir " + dir + " --steps 1";
       }},
      {"IDX label out of range", 3, {"train-labels-idx1-ubyte", "label 10 at index 0 is out of range [0, 10)"},
       [](Workspace& w) {
         const std::string dir = w.fashion_mnist();
         w.write("fm/train-labels-idx1-ubyte", idx(0x801, {10}, 10, 10));
         return "--data-dir " + dir + " --steps 1";
       }},
      {"missing CSV file", 3, {"cannot open", "missing.csv"},
       [](Workspace& w) { return "--dataset csv:" + w.path("missing.csv") + " --layers 2,2 --steps 1"; }},
      {"empty CSV file", 3, {"d.csv' has no samples (the file is empty)"},
       [](Workspace& w) { return csv(w, "") + " --layers 2,2 --steps 1"; }},
      {"ragged CSV", 3, {"d.csv' line 3: expected 3 fields (as on line 1), found 4"},
       [](Workspace& w) { return csv(w, "1,2,0\n3,4,1\n5,6,7,1\n") + " --layers 2,2 --steps 1"; }},
      {"non-numeric CSV value", 3, {"d.csv' line 2, field 2: not a finite number: 'abc'"},
       [](Workspace& w) { return csv(w, "1,2,0\n3,abc,1\n") + " --layers 2,2 --steps 1"; }},
      {"CSV label not an integer", 3, {"d.csv' line 2: label '1.5' is not an integer"},
       [](Workspace& w) { return csv(w, "1,2,0\n3,4,1.5\n") + " --layers 2,2 --steps 1"; }},
      {"negative CSV label", 3, {"d.csv' line 2: label '-1' is negative"},
       [](Workspace& w) { return csv(w, "1,2,0\n3,4,-1\n") + " --layers 2,2 --steps 1"; }},
      // ------------------------------------------------------- checkpoints
      {"no checkpoint to resume from", 3, {"no checkpoint to resume from", "empty-ck"},
       [](Workspace& w) {
         fs::create_directories(w.path("empty-ck"));
         return std::string(Workspace::kCheckpointArgs) + "--steps 30 --checkpoint-dir " + w.path("empty-ck") + " --resume";
       }},
      {"checkpoint of another model", 2, {"ckpt-000000020.strata' was written with layers = [12,32,4]", "layers = [12,64,4]"},
       [](Workspace& w) {
         return "--dataset synthetic --layers 12,64,4 --samples 300 --batch-size 16 --optimizer adam "
                "--no-eval -q --steps 30 --checkpoint-dir " + w.checkpoints() + " --resume";
       }},
      {"checkpoint with another optimizer", 2, {"was written with optimizer = \"adam\"", "optimizer = \"sgd\""},
       [](Workspace& w) {
         return "--dataset synthetic --layers 12,32,4 --samples 300 --batch-size 16 --optimizer sgd "
                "--no-eval -q --steps 30 --checkpoint-dir " + w.checkpoints() + " --resume";
       }},
      {"checkpoint beyond the end of the run", 2, {"ckpt-000000020.strata' is at step 20 but this run ends at step 10"},
       [](Workspace& w) {
         return std::string(Workspace::kCheckpointArgs) + "--steps 10 --checkpoint-dir " + w.checkpoints() + " --resume";
       }},
      {"flipped bit in a checkpoint", 3, {"ckpt-000000020.strata", "section 'params' fails its checksum"},
       [](Workspace& w) {
         const std::string dir = w.checkpoints(), last = w.checkpoint(20);
         std::string b = file_bytes(last);
         b[b.find("params") + 6 + 8 + 4 + 40] ^= 0x10;  // in the parameters (after size and CRC)
         w.damage(last, b);
         return std::string(Workspace::kCheckpointArgs) + "--steps 30 --checkpoint-dir " + dir + " --resume";
       }},
      {"truncated checkpoint", 3, {"ckpt-000000020.strata': truncated"},
       [](Workspace& w) {
         const std::string dir = w.checkpoints(), last = w.checkpoint(20);
         w.damage(last, file_bytes(last).substr(0, file_bytes(last).size() / 2));
         return std::string(Workspace::kCheckpointArgs) + "--steps 30 --checkpoint-dir " + dir + " --resume";
       }},
      {"not a checkpoint file", 3, {"ckpt-000000020.strata': not a Strata checkpoint (bad magic)"},
       [](Workspace& w) {
         const std::string dir = w.checkpoints(), last = w.checkpoint(20);
         w.damage(last, "{\"this\": \"is json\"}\n");
         return std::string(Workspace::kCheckpointArgs) + "--steps 30 --resume-from " + last;
       }},
      {"`latest` names a missing file", 3, {"ckpt-000000099.strata': cannot open"},
       [](Workspace& w) {
         const std::string dir = w.checkpoints();
         w.damage(dir + "/latest", "ckpt-000000099.strata\n");
         return std::string(Workspace::kCheckpointArgs) + "--steps 30 --checkpoint-dir " + dir + " --resume";
       }},
      {"full disk while checkpointing", 4,
       {"checkpoint: write failed (injected)", "ckpt-000000025.strata.tmp", "No space left on device"},
       [](Workspace& w) {
         // Resumes at step 20; the first file write (the checkpoint of step 25) fails.
         return std::string(Workspace::kCheckpointArgs) + "--steps 30 --checkpoint-every 5 "
                "--keep-checkpoints 1 --checkpoint-dir " + w.checkpoints() + " --resume";
       },
       "STRATA_FAIL_CHECKPOINT_WRITE=1"},
      // ------------------------------------------- sharded checkpoints
      {"missing shard", 3, {"ckpt-000000020.strata': shard file '", "ckpt-000000020.shards/rank-00001-of-00002-", "' is missing"},
       [](Workspace& w) {
         const std::string dir = w.checkpoints(Workspace::kShardedArgs);
         w.damage(w.shard(20, 1), "", true);
         return std::string(Workspace::kCheckpointArgs) + "--steps 30 --checkpoint-dir " + dir + " --resume";
       }},
      {"truncated shard", 3, {"shard file '", "ckpt-000000020.shards/rank-00000-of-00002-", "bytes but the manifest records"},
       [](Workspace& w) {
         const std::string dir = w.checkpoints(Workspace::kShardedArgs), shard = w.shard(20, 0);
         w.damage(shard, file_bytes(shard).substr(0, file_bytes(shard).size() / 2));
         return std::string(Workspace::kCheckpointArgs) + Workspace::kShardedArgs + "--steps 30 --checkpoint-dir " + dir + " --resume";
       }},
      {"flipped bit in a shard", 3, {"ckpt-000000020.shards/rank-00001-of-00002-", "fails the manifest's checksum"},
       [](Workspace& w) {
         const std::string dir = w.checkpoints(Workspace::kShardedArgs), shard = w.shard(20, 1);
         std::string b = file_bytes(shard);
         b[b.size() - 100] ^= 0x04;  // in the optimizer state
         w.damage(shard, b);
         return std::string(Workspace::kCheckpointArgs) + "--steps 30 --checkpoint-dir " + dir + " --resume";
       }},
      {"shard of another checkpoint", 3, {"ckpt-000000020.shards/rank-00000-of-00002-", "fails the manifest's checksum"},
       [](Workspace& w) {
         const std::string dir = w.checkpoints(Workspace::kShardedArgs);
         w.damage(w.shard(20, 0), file_bytes(w.shard(15, 0)));
         return std::string(Workspace::kCheckpointArgs) + "--steps 30 --checkpoint-dir " + dir + " --resume";
       }},
      {"sharded checkpoint of another model", 2, {"ckpt-000000020.strata' was written with layers = [12,32,4]", "layers = [12,64,4]"},
       [](Workspace& w) {
         return "--dataset synthetic --layers 12,64,4 --samples 300 --batch-size 16 --optimizer adam "
                "--no-eval -q --steps 30 --strategy pipeline --ranks 2 --threads 1 --checkpoint-dir " +
                w.checkpoints(Workspace::kShardedArgs) + " --resume";
       }},
      {"a shard given as the checkpoint", 3, {"rank-00000-of-00002-", "one rank's shard of a sharded checkpoint", "its manifest ckpt-000000020.strata"},
       [](Workspace& w) {
         w.checkpoints(Workspace::kShardedArgs);
         return std::string(Workspace::kCheckpointArgs) + "--steps 30 --resume-from " + w.shard(20, 0);
       }},
      {"full disk while writing a shard", 4,
       {"checkpoint: write failed (injected)", "ckpt-000000025.shards/rank-0000", ".strata.tmp", "No space left on device"},
       [](Workspace& w) {
         return std::string(Workspace::kCheckpointArgs) + Workspace::kShardedArgs + "--steps 30 --checkpoint-every 5 "
                "--keep-checkpoints 1 --checkpoint-dir " + w.checkpoints(Workspace::kShardedArgs) + " --resume";
       },
       "STRATA_FAIL_CHECKPOINT_WRITE=1"},
      // Found before any training: no "done" line, no metrics.
      {"unwritable checkpoint directory", 4, {"checkpoint: cannot create directory", "d.csv/ck"},
       [](Workspace& w) {
         const std::string file = w.write("d.csv", "1,2,0\n3,4,1\n");
         return std::string(Workspace::kCheckpointArgs) + "--steps 2 --metrics " + w.path("m.jsonl") +
                " --checkpoint-dir " + file + "/ck";
       },
       {},
       "m.jsonl"},
  };
  return entries;
}

class BadInput : public ::testing::TestWithParam<Entry> {};

TEST_P(BadInput, ExitCodeAndMessage) {
  const Entry& e = GetParam();
  Workspace w(e.name);
  const std::string command = (e.env.empty() ? "" : e.env + " ") + bin("strata-train") + " " + e.prepare(w);
  const auto r = test::run_command(command);
  EXPECT_EQ(r.exit_code, e.exit_code) << command << "\n" << r.output;
  const char* kinds[] = {"", "", "configuration error", "data error", "runtime error"};
  EXPECT_NE(r.output.find(std::string("strata-train: ") + kinds[e.exit_code]), std::string::npos)
      << r.output;
  const auto at = r.output.find("strata-train: ");
  if (at != std::string::npos)  // the message, for the log (docs/errors.md quotes it)
    std::cout << "  " << r.output.substr(at, r.output.find('\n', at) - at) << "\n";
  for (const std::string& piece : e.message)
    EXPECT_NE(r.output.find(piece), std::string::npos)
        << "the message lacks '" << piece << "':\n" << r.output;
  if (!e.never_written.empty())
    EXPECT_FALSE(fs::exists(w.path(e.never_written))) << "the run went on to write " << e.never_written;
  w.expect_checkpoints_untouched();
}

std::string entry_name(const ::testing::TestParamInfo<Entry>& info) {
  std::string n;
  for (char ch : info.param.name)
    n += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(Catalogue, BadInput, ::testing::ValuesIn(catalogue()), entry_name);

TEST(BadInputDocs, DocsListEveryEntryWithItsExitCode) {
  const std::string docs = std::string(STRATA_SOURCE_DIR) + "/docs/errors.md";
  std::ifstream in(docs);
  ASSERT_TRUE(in.good()) << docs;
  std::map<std::string, std::string> rows;  // first column -> second column
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("| ", 0) != 0) continue;
    const auto a = line.find(" | ", 2);
    if (a == std::string::npos) continue;
    const auto b = line.find(" |", a + 3);
    if (b == std::string::npos) continue;
    rows[line.substr(2, a - 2)] = line.substr(a + 3, b - a - 3);
  }
  for (const Entry& e : catalogue()) {
    ASSERT_TRUE(rows.count(e.name)) << "docs/errors.md has no row '| " << e.name << " | ...'";
    EXPECT_EQ(rows[e.name], std::to_string(e.exit_code)) << e.name;
  }
}

}  // namespace
}  // namespace strata
