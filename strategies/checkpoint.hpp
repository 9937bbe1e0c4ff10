// Checkpoints: everything a run needs to continue exactly where it stopped.
//
// Container format (little-endian), version 1:
//   "STRATACK" | u32 version | u32 section count |
//   sections: u32 name length | name | u64 payload bytes | u32 CRC-32 of payload | payload
// Three kinds of file use it, told apart by their sections:
//   whole checkpoint, dir/ckpt-<step>.strata: "config" (JSON: what must match
//     to resume), "state" (JSON: step, epoch, position in the epoch, optimizer
//     steps, dropout counters, loss scaler), "params", "opt0", "opt1"
//     (float32 arrays: parameters and optimizer state of the whole model in
//     single-rank layout);
//   shard, one per rank of a sharded checkpoint,
//     dir/ckpt-<step>.shards/rank-<r>-of-<n>-<crc>.strata: "shard" (u64 step,
//     u32 rank, u32 ranks, u64 values: the length of the whole model's
//     vectors), "layout" (text naming the writer's mesh), "ranges" (u64
//     offset, u64 length pairs: the pieces of the single-rank vectors this
//     rank holds), "params", "opt0", "opt1" (the values of those ranges, in
//     order; opt0/opt1 empty when the optimizer keeps none). <crc> is the
//     CRC-32 of the whole file (8 hex digits): a shard rewritten with other
//     contents gets another name, so it never replaces a file that an
//     existing manifest lists;
//   manifest of a sharded checkpoint, dir/ckpt-<step>.strata: "config",
//     "state", "layout", "shards" (u64 step, u64 values, u32 count; per
//     shard, in rank order: u32 name length, name relative to dir, u64 file
//     bytes, u32 CRC-32 of the whole file).
//
// Writing is atomic: a temporary file is written, flushed and fsync'ed, renamed
// into place, and the directory is fsync'ed; then the `latest` pointer is
// replaced the same way, and only after that are older checkpoints removed
// (a manifest before its shards). A sharded checkpoint's manifest is written
// after every shard file is complete. A crash at any moment leaves the
// previous checkpoint and a `latest` that names a complete one.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace strata {
namespace comm {
class Communicator;
}

namespace checkpoint {

struct State {
  std::string config;  // JSON; compared on resume
  std::string state;   // JSON
  std::vector<float> params, opt0, opt1;
};

// dir/ckpt-<step>.strata: the checkpoint (whole file or manifest) of a step.
std::string file_name(std::uint64_t step);

// Writes `dir`/ckpt-<step>.strata atomically, points `latest` at it and keeps
// the newest `keep` checkpoints up to this one (keep >= 1; checkpoints of
// later steps, left by a run that this one resumed before them, are removed);
// temporary files and shards that a killed writer left behind are removed.
// Throws runtime errors naming the file on any failure (a full disk
// included); earlier checkpoints are kept.
std::string save(const std::string& dir, std::uint64_t step, const State& s, int keep);

// One rank's part of a sharded checkpoint: pieces of the whole model's
// single-rank vectors (params, opt0, opt1 share one layout).
struct Range {
  std::uint64_t offset = 0, length = 0;
};
struct Shard {
  std::vector<Range> ranges;
  std::vector<float> params, opt0, opt1;  // the ranges' values in order; opt empty: none kept
};

// A sharded checkpoint, collective over `world`: every rank writes its shard
// file atomically, then world rank 0 writes the manifest (with s.config and
// s.state; s's arrays are not used), points `latest` at it and applies `keep`
// as save() does. `values`: the length of the whole model's vectors; the
// ranks' ranges must cover [0, values) exactly once. `layout` describes the
// mesh (stored in the manifest and every shard, compared on load). Returns
// the manifest's path. A rank that fails throws a runtime error naming its
// file (the others then fail in the collective); no manifest is written.
std::string save_sharded(comm::Communicator& world, const std::string& dir, std::uint64_t step,
                         const State& s, const std::string& layout, std::uint64_t values,
                         const Shard& mine, int keep);

// Creates `dir` if needed and checks that files can be created in it (a probe
// file is written and removed). Throws runtime errors naming the directory.
void prepare_dir(const std::string& dir);

// Reads and verifies a checkpoint: magic, version, every section's size and
// CRC, each required section present once (unknown ones are skipped). For a
// manifest, every shard file it lists is read and checked against the
// manifest (present, size, CRC of the whole file, step, rank, layout) and the
// shards' ranges must cover the model exactly once; the whole model is
// assembled in single-rank layout. Throws data errors naming the file (the
// shard file where one is at fault) and the problem.
State load(const std::string& path);

// Reads a file that a manifest lists (its name relative to the manifest's
// folder); throws data errors when it cannot.
using ReadShard = std::function<std::string(const std::string& name)>;

// The same checks and decoding for a checkpoint held in memory (`name` names
// it in messages); load() reads the file and calls this with a `read` that
// opens the shards next to it. A manifest without `read` is refused.
State parse(const void* data, std::size_t size, const std::string& name,
            const ReadShard& read = {});

// One shard file's contents, verified on its own (for tests and the fuzzer;
// load() checks them against the manifest too).
struct ShardHeader {
  std::uint64_t step = 0, values = 0;
  std::uint32_t rank = 0, ranks = 0;
  std::string layout;
};
Shard parse_shard(const void* data, std::size_t size, const std::string& name,
                  ShardHeader* header = nullptr);

// The file `latest` points to in `dir`; throws data errors when there is none.
std::string latest(const std::string& dir);

// The fault-injection seam of the writer, for tests of failure handling
// (nothing is installed by default, and the library reads no environment for
// it; strata-train installs what STRATA_FAIL_CHECKPOINT_WRITE and
// STRATA_CHECKPOINT_WRITE_DELAY_MS ask for, apps/train/fault.hpp):
//   fail_nth  the N-th file write from now fails as if the disk were full
//             (0: none; counted per process)
//   pause_ms  a pause in the middle of writing each checkpoint, shard and
//             manifest file, for tests that kill a writer (0: none)
struct WriteFaults {
  int fail_nth = 0;
  long pause_ms = 0;
};
void install_write_faults(const WriteFaults& faults);

}  // namespace checkpoint
}  // namespace strata
