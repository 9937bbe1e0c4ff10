// Byte-pair encoding: a tokenizer learned from a corpus (Sennrich et al. 2016,
// GPT-2's scheme without the regex pre-split), kept as a small text file.
//
// Ids 0..255 are the bytes; id 256 + k is merge k, the pair (a, b) of ids
// learned k-th. Training repeats: count every adjacent pair of the current
// tokens, merge the most frequent (ties: the smallest pair (a, b)) into a new
// id everywhere, until the vocabulary has the size asked for or no pair occurs
// twice. Encoding applies the merges in the order learned, so it reproduces
// training's tokens on the training text; decoding expands ids to bytes.
//
// The file (strata-tokenize train writes it):
//   strata-bpe 1
//   vocab 512
//   101 32        <- merge 0: ids 101 and 32 become 256
//   ...
// Readers check every line (a data error names the file and the line).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace strata::data {

struct Bpe {
  std::vector<std::pair<std::int32_t, std::int32_t>> merges;
  std::size_t vocab() const { return 256 + merges.size(); }
};

// Learns merges from `text` until the vocabulary has `vocab` ids (>= 256;
// fewer when no pair occurs twice). progress(k, total): after each merge (may be empty).
Bpe train_bpe(const std::string& text, std::size_t vocab,
              void (*progress)(std::size_t, std::size_t) = nullptr);
std::vector<std::int32_t> encode(const Bpe& bpe, const std::string& text);
std::string decode(const Bpe& bpe, const std::vector<std::int32_t>& ids);

void write_bpe(const Bpe& bpe, const std::string& path);  // data error when it cannot write
Bpe read_bpe(const std::string& path);                    // data error naming file and line

}  // namespace strata::data
