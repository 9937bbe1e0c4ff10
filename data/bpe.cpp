#include "data/bpe.hpp"

#include "backends/error.hpp"

#include <fstream>
#include <sstream>
#include <unordered_map>

namespace strata::data {

namespace {
std::uint64_t key(std::int32_t a, std::int32_t b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
}

// Replaces every (a, b) in `t` by `id`, left to right.
void merge(std::vector<std::int32_t>& t, std::int32_t a, std::int32_t b, std::int32_t id) {
  std::size_t out = 0;
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (i + 1 < t.size() && t[i] == a && t[i + 1] == b) {
      t[out++] = id;
      ++i;
    } else {
      t[out++] = t[i];
    }
  }
  t.resize(out);
}

std::vector<std::int32_t> bytes_of(const std::string& text) {
  std::vector<std::int32_t> t(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) t[i] = static_cast<unsigned char>(text[i]);
  return t;
}
}  // namespace

Bpe train_bpe(const std::string& text, std::size_t vocab,
              void (*progress)(std::size_t, std::size_t)) {
  STRATA_REQUIRE(vocab >= 256, config, "BPE vocabulary ", vocab, " is below the 256 byte ids");
  STRATA_REQUIRE(vocab <= (std::size_t(1) << 24), config, "BPE vocabulary ", vocab,
                 " is above 2^24 ids (not exact as floats)");
  Bpe bpe;
  std::vector<std::int32_t> t = bytes_of(text);
  std::unordered_map<std::uint64_t, std::uint32_t> counts;
  while (bpe.vocab() < vocab) {
    counts.clear();
    for (std::size_t i = 0; i + 1 < t.size(); ++i) ++counts[key(t[i], t[i + 1])];
    std::uint64_t best = 0;
    std::uint32_t best_count = 0;
    for (const auto& [k, n] : counts)
      if (n > best_count || (n == best_count && k < best)) {
        best = k;
        best_count = n;
      }
    if (best_count < 2) break;  // nothing repeats: more ids would not shorten anything
    const auto a = static_cast<std::int32_t>(best >> 32), b = static_cast<std::int32_t>(best & 0xffffffffu);
    const auto id = static_cast<std::int32_t>(bpe.vocab());
    merge(t, a, b, id);
    bpe.merges.emplace_back(a, b);
    if (progress) progress(bpe.merges.size(), vocab - 256);
  }
  return bpe;
}

std::vector<std::int32_t> encode(const Bpe& bpe, const std::string& text) {
  std::vector<std::int32_t> t = bytes_of(text);
  for (std::size_t k = 0; k < bpe.merges.size(); ++k)
    merge(t, bpe.merges[k].first, bpe.merges[k].second, static_cast<std::int32_t>(256 + k));
  return t;
}

std::string decode(const Bpe& bpe, const std::vector<std::int32_t>& ids) {
  // Each id's bytes, built in merge order (a merge's parts are older ids).
  std::vector<std::string> bytes(bpe.vocab());
  for (int i = 0; i < 256; ++i) bytes[i] = std::string(1, static_cast<char>(i));
  for (std::size_t k = 0; k < bpe.merges.size(); ++k)
    bytes[256 + k] = bytes[bpe.merges[k].first] + bytes[bpe.merges[k].second];
  std::string out;
  for (const std::int32_t id : ids) {
    STRATA_REQUIRE(id >= 0 && static_cast<std::size_t>(id) < bpe.vocab(), data, "BPE decode: id ",
                   id, " is outside the vocabulary [0, ", bpe.vocab(), ")");
    out += bytes[id];
  }
  return out;
}

void write_bpe(const Bpe& bpe, const std::string& path) {
  std::ofstream out(path);
  STRATA_REQUIRE(out.good(), data, "cannot write the BPE file '", path, "'");
  out << "strata-bpe 1\nvocab " << bpe.vocab() << "\n";
  for (const auto& [a, b] : bpe.merges) out << a << ' ' << b << '\n';
  out.close();
  STRATA_REQUIRE(out.good(), data, "cannot write the BPE file '", path, "' (disk full?)");
}

Bpe read_bpe(const std::string& path) {
  std::ifstream in(path);
  STRATA_REQUIRE(in.good(), data, "cannot open the BPE file '", path, "'");
  std::string line;
  std::size_t n = 0;
  auto fail = [&](const std::string& what) {
    STRATA_THROW(data, "BPE file '", path, "', line ", n, ": ", what);
  };
  if (!std::getline(in, line) || (++n, line != "strata-bpe 1"))
    fail("expected 'strata-bpe 1' (a file strata-tokenize train wrote), got '" + line.substr(0, 40) + "'");
  std::size_t vocab = 0;
  {
    ++n;
    std::string word;
    if (!std::getline(in, line)) fail("expected 'vocab N'");
    std::istringstream s(line);
    if (!(s >> word >> vocab) || word != "vocab" || vocab < 256 || vocab > (std::size_t(1) << 24))
      fail("expected 'vocab N' with N in [256, 2^24], got '" + line.substr(0, 40) + "'");
  }
  Bpe bpe;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    std::istringstream s(line);
    long long a = -1, b = -1;
    std::string rest;
    if (!(s >> a >> b) || (s >> rest))
      fail("expected two ids 'a b', got '" + line.substr(0, 40) + "'");
    const auto next = static_cast<long long>(bpe.vocab());
    if (a < 0 || b < 0 || a >= next || b >= next)
      fail("merge " + std::to_string(bpe.merges.size()) + " uses id " + std::to_string(a < 0 || a >= next ? a : b) +
           ", but only ids below " + std::to_string(next) + " exist before it");
    bpe.merges.emplace_back(static_cast<std::int32_t>(a), static_cast<std::int32_t>(b));
  }
  if (bpe.vocab() != vocab)
    STRATA_THROW(data, "BPE file '", path, "' says vocab ", vocab, " but holds ", bpe.merges.size(),
                 " merges (vocab ", bpe.vocab(), "): truncated or edited?");
  return bpe;
}

}  // namespace strata::data
