#include "layers/window2d.hpp"

#include "backends/error.hpp"
#include "layers/model_spec.hpp"

namespace strata {

Window2d Window2d::from_args(LayerArgs& args, std::array<std::size_t, 2> default_stride) {
  Window2d w;
  const auto k = args.pair("kernel", {0, 0}, 1);
  STRATA_REQUIRE(k[0] > 0, config, args.where(), ": layer type '", args.type(),
                 "' needs the key 'kernel' (an integer or [height, width])");
  if (default_stride[0] == 0) default_stride = k;
  const auto s = args.pair("stride", default_stride, 1);
  const auto p = args.pair("padding", {0, 0}, 0);
  const auto d = args.pair("dilation", {1, 1}, 1);
  w.kh = k[0], w.kw = k[1], w.sh = s[0], w.sw = s[1], w.ph = p[0], w.pw = p[1], w.dh = d[0],
  w.dw = d[1];
  return w;
}

namespace {
std::size_t out_size(std::size_t in, std::size_t k, std::size_t s, std::size_t p, std::size_t d) {
  const std::size_t span = d * (k - 1) + 1;  // input rows one output reads
  if (in + 2 * p < span) return 0;
  return (in + 2 * p - span) / s + 1;
}

std::string dims(std::size_t a, std::size_t b, const char* sep) {
  return a == b ? std::to_string(a) : std::to_string(a) + sep + std::to_string(b);
}
}  // namespace

std::size_t Window2d::out_h(std::size_t h) const { return out_size(h, kh, sh, ph, dh); }
std::size_t Window2d::out_w(std::size_t w) const { return out_size(w, kw, sw, pw, dw); }

std::string Window2d::str() const {
  std::string s = "kernel " + std::to_string(kh) + "x" + std::to_string(kw);
  if (sh != 1 || sw != 1) s += ", stride " + dims(sh, sw, "x");
  if (ph != 0 || pw != 0) s += ", padding " + dims(ph, pw, "x");
  if (dh != 1 || dw != 1) s += ", dilation " + dims(dh, dw, "x");
  return s;
}

void Window2d::check_input(const std::string& layer, const Shape& in) const {
  STRATA_REQUIRE(in.rank() == 3, config, layer, " expects images of shape {channels, height, width}",
                 " but gets shape ", in.str());
  STRATA_REQUIRE(out_h(in[1]) > 0 && out_w(in[2]) > 0, config, layer, ": the output for input ",
                 in.str(), " would be empty (", str(), " needs at least ", dh * (kh - 1) + 1, "x",
                 dw * (kw - 1) + 1, " input pixels after padding)");
}

}  // namespace strata
