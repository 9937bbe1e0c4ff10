#include "data/text.hpp"

#include "backends/error.hpp"
#include "backends/random.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace strata::data {

std::string default_fortunes_dir() {
  const char* env = std::getenv("STRATA_FORTUNES_DIR");
  if (env != nullptr && *env != '\0') return env;
  return "/usr/share/games/fortunes";
}

namespace {
std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  STRATA_REQUIRE(in.good(), data, "cannot open the text file '", p.string(), "'");
  std::ostringstream s;
  s << in.rdbuf();
  STRATA_REQUIRE(!in.bad(), data, "cannot read the text file '", p.string(), "'");
  return s.str();
}
}  // namespace

std::string read_text(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  STRATA_REQUIRE(!ec && fs::exists(st), data, "text corpus '", path,
                 "' does not exist (give a text file or a directory of text files; Debian's "
                 "fortunes package installs ", default_fortunes_dir(), ")");
  if (!fs::is_directory(st)) {
    std::string text = read_file(path);
    STRATA_REQUIRE(!text.empty(), data, "text corpus '", path, "' is empty");
    return text;
  }
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(path, ec))
    if (!e.is_symlink() && e.is_regular_file()) files.push_back(e.path());
  STRATA_REQUIRE(!ec, data, "cannot list the text directory '", path, "': ", ec.message());
  std::sort(files.begin(), files.end());
  std::string all;
  for (const auto& f : files) {
    std::string text = read_file(f);
    if (text.find('\0') != std::string::npos) continue;  // binary (fortune's .dat indexes)
    all += text;
  }
  STRATA_REQUIRE(!all.empty(), data, "text directory '", path,
                 "' holds no text files (symbolic links and binary files are skipped)");
  return all;
}

std::vector<std::int32_t> byte_tokens(const std::string& text) {
  std::vector<std::int32_t> t(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) t[i] = static_cast<unsigned char>(text[i]);
  return t;
}

namespace {
// Windows of seq_len inputs and seq_len next-token labels from tokens [begin, end).
Dataset windows(const std::vector<std::int32_t>& tokens, std::size_t begin, std::size_t end,
                std::size_t seq_len, std::size_t vocab, const std::string& name) {
  Dataset d;
  d.name = name;
  d.features = seq_len;
  d.shape = {seq_len};
  d.classes = vocab;
  d.label_width = seq_len;
  const std::size_t n = end - begin < seq_len + 1 ? 0 : (end - begin - 1) / seq_len;
  d.x.resize(n * seq_len);
  d.labels.resize(n * seq_len);
  for (std::size_t k = 0; k < n; ++k)
    for (std::size_t t = 0; t < seq_len; ++t) {
      const std::size_t at = begin + k * seq_len + t;
      d.x[k * seq_len + t] = static_cast<float>(tokens[at]);
      d.labels[k * seq_len + t] = tokens[at + 1];
    }
  return d;
}
}  // namespace

Split text_windows(const std::vector<std::int32_t>& tokens, std::size_t seq_len,
                   std::size_t vocab, double test_fraction, const std::string& name) {
  STRATA_REQUIRE(seq_len > 0, config, "--seq-len must be positive");
  STRATA_REQUIRE(test_fraction >= 0 && test_fraction < 1, config, "test fraction ", test_fraction,
                 " is not in [0, 1)");
  for (std::size_t i = 0; i < tokens.size(); ++i)
    STRATA_REQUIRE(tokens[i] >= 0 && static_cast<std::size_t>(tokens[i]) < vocab, data, "'", name,
                   "': token ", i, " has id ", tokens[i], ", outside the vocabulary [0, ", vocab, ")");
  const std::size_t n = tokens.size();
  const std::size_t n_test =
      test_fraction > 0 ? static_cast<std::size_t>(std::llround(test_fraction * static_cast<double>(n)))
                        : 0;
  const std::size_t cut = n - std::min(n, n_test);
  Split s;
  s.train = windows(tokens, 0, cut, seq_len, vocab, name + " (train split)");
  s.test = windows(tokens, cut, n, seq_len, vocab, name + " (validation split)");
  STRATA_REQUIRE(s.train.size() > 0, data, "'", name, "': ", n, " tokens",
                 n_test > 0 ? " (" + std::to_string(cut) + " before the validation tail)" : "",
                 " are too few for one training window of --seq-len ", seq_len, " (", seq_len + 1,
                 " tokens: the inputs and the next token of the last)");
  STRATA_REQUIRE(n_test == 0 || s.test.size() > 0, data, "'", name, "': the validation tail of ",
                 n - cut, " tokens (--test-fraction ", test_fraction,
                 ") is too short for one window of --seq-len ", seq_len, " (", seq_len + 1,
                 " tokens)");
  return s;
}

Dataset make_synthetic_tokens(std::size_t samples, std::size_t seq_len, std::size_t vocab,
                              std::uint64_t seed) {
  STRATA_REQUIRE(samples > 0 && seq_len > 0 && vocab > 0, config,
                 "synthetic tokens: samples, sequence length and vocabulary must be positive");
  Dataset d;
  d.name = "synthetic tokens";
  d.features = seq_len;
  d.shape = {seq_len};
  d.classes = vocab;
  d.label_width = seq_len;
  d.x.resize(samples * seq_len);
  d.labels.resize(samples * seq_len);
  for (std::size_t i = 0; i < d.x.size(); ++i) {
    d.x[i] = static_cast<float>(random::below(seed, random::stream_synthetic, i, vocab));
    d.labels[i] = static_cast<std::int32_t>(random::below(seed, random::stream_synthetic + 1, i, vocab));
  }
  return d;
}

}  // namespace strata::data
