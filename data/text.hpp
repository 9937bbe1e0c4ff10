// Text corpora for language models: a file (or a directory of files) read as
// a sequence of tokens, cut into training samples of seq_len tokens.
//
// Tokens: bytes (vocabulary 256, no tokenizer file), or the ids of a trained
// BPE (data/bpe.hpp) when one is given.
//
// Samples: contiguous, non-overlapping windows. Window k holds the tokens
// [k T, k T + T) as its input (T token ids, as floats) and the tokens
// [k T + 1, k T + T + 1) as its T labels (the next token at each position;
// cross-entropy per position, layers/loss.hpp). The loader shuffles windows
// with the run's seed. Validation: the last `test_fraction` of the tokens
// (whole windows, cut before any window is formed, so that no training
// window overlaps it).
#pragma once

#include "data/dataset.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace strata::data {

// Debian's fortunes package (plain-text quotes), the offline corpus of the
// examples and tests; $STRATA_FORTUNES_DIR overrides it.
std::string default_fortunes_dir();

// The bytes of `path`: a file, or a directory whose regular files are read in
// name order and joined (symbolic links and files holding a NUL byte, such
// as fortune's .dat indexes, are skipped). A data error names the path when
// nothing can be read or no text is there.
std::string read_text(const std::string& path);

// The bytes of `text` as tokens 0..255.
std::vector<std::int32_t> byte_tokens(const std::string& text);

// Training and validation windows of seq_len tokens from `tokens` (ids in
// [0, vocab)), as described above. A data error names `name` when the
// corpus is too short for one training window (seq_len + 1 tokens) or, with
// test_fraction > 0, for one validation window.
Split text_windows(const std::vector<std::int32_t>& tokens, std::size_t seq_len,
                   std::size_t vocab, double test_fraction, const std::string& name);

// Seeded random token windows for timing and tests: `samples` windows of
// seq_len ids uniform in [0, vocab), each with seq_len labels uniform in
// [0, vocab) (no structure to learn). The same seed gives the same data.
Dataset make_synthetic_tokens(std::size_t samples, std::size_t seq_len, std::size_t vocab,
                              std::uint64_t seed);

}  // namespace strata::data
