// Checkpoints: everything a run needs to continue exactly where it stopped.
//
// File format (little-endian), version 1:
//   "STRATACK" | u32 version | u32 section count |
//   sections: u32 name length | name | u64 payload bytes | u32 CRC-32 of payload | payload
// Sections: "config" (JSON: what must match to resume), "state" (JSON: step,
// epoch, position in the epoch, optimizer steps, dropout counters), "params",
// "opt0", "opt1" (float32 arrays: parameters and optimizer state).
//
// Writing is atomic: a temporary file is written, flushed and fsync'ed, renamed
// into place, and the directory is fsync'ed; then the `latest` pointer is
// replaced the same way, and only after that are checkpoints beyond the last
// `keep` removed. A crash at any moment leaves the previous checkpoint and a
// `latest` that names a complete file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata::checkpoint {

struct State {
  std::string config;  // JSON; compared on resume
  std::string state;   // JSON
  std::vector<float> params, opt0, opt1;
};

// Writes `dir`/ckpt-<step>.strata atomically, points `latest` at it and keeps
// the newest `keep` checkpoints (keep >= 1); temporary files that a killed
// writer left behind are removed. Throws runtime errors naming the file on any
// failure (a full disk included); earlier checkpoints are kept.
std::string save(const std::string& dir, std::uint64_t step, const State& s, int keep);

// Creates `dir` if needed and checks that files can be created in it (a probe
// file is written and removed). Throws runtime errors naming the directory.
void prepare_dir(const std::string& dir);

// Reads and verifies a checkpoint file: magic, version, every section's size
// and CRC, each of the five sections present once (unknown ones are skipped).
// Throws data errors naming the file and the problem.
State load(const std::string& path);

// The same checks and decoding for a checkpoint held in memory (`name` names
// it in messages); load() reads the file and calls this.
State parse(const void* data, std::size_t size, const std::string& name);

// The file `latest` points to in `dir`; throws data errors when there is none.
std::string latest(const std::string& dir);

// For tests of failure handling: the next N-th file write fails as if the
// disk were full (0: off). Also set by STRATA_FAIL_CHECKPOINT_WRITE.
// STRATA_CHECKPOINT_WRITE_DELAY_MS=N (read once) pauses N ms in the middle of
// writing each checkpoint file, for tests that kill a writer.
void inject_write_failure(int nth);

}  // namespace strata::checkpoint
