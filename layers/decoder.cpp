#include "layers/decoder.hpp"

#include "backends/error.hpp"

namespace strata {

template <class T>
Decoder<T>::Decoder(Sequential<T>& model, std::size_t max_positions)
    : model_(model), max_positions_(max_positions), token_("strata::Decoder::token", 1, 1) {
  const Shape& in = model.shape(0);
  STRATA_REQUIRE(in.rank() == 1, config, "Decoder: the model takes inputs of shape ", in.str(),
                 "; generation needs a language model that takes token ids, input = [T]");
  STRATA_REQUIRE(max_positions >= 1 && max_positions <= in[0], config, "Decoder: ", max_positions,
                 " positions, but the model was built for sequences of ", in[0]);
  const std::size_t positions = in[0], n = model.num_layers();
  std::size_t total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const Shape& out = model.shape(i + 1);
    STRATA_REQUIRE(out.rank() >= 1 && out[0] == positions, config, "Decoder: layer ", i, " (",
                   model.layer(i).name(), ") has output shape ", out.str(),
                   "; generation needs {", positions, ", ...} shapes (one row per position)");
    rows_.emplace_back("strata::Decoder::row", 1, out.numel() / positions);
    total += decode_size(model.layer(i), max_positions);
  }
  memory_ = VectorBuffer<T>("strata::Decoder::state", total);
  states_.assign(n, Saved<T>());
  for (std::size_t i = 0, at = 0; i < n; ++i) {
    const std::size_t k = decode_size(model.layer(i), max_positions);
    states_[i].scratch = Vector<T>(memory_.data() + at, k);
    at += k;
  }
}

template <class T>
void Decoder<T>::reset(Context& ctx) {
  Kokkos::deep_copy(ctx.exec, memory_, T(0));
  position_ = 0;
}

template <class T>
ConstMatrix<T> Decoder<T>::step(Context& ctx, int token) {
  STRATA_REQUIRE(position_ < max_positions_, config, "Decoder: all ", max_positions_,
                 " positions are used (reset() starts again)");
  Kokkos::deep_copy(ctx.exec, token_, static_cast<T>(token));
  ConstMatrix<T> in = token_;
  for (std::size_t i = 0; i < model_.num_layers(); ++i) {
    if (model_.fused(i)) continue;  // the layer before applied it (Sequential::fused)
    decode_layer(ctx, model_.layer(i), in, Matrix<T>(rows_[i]), position_, max_positions_, states_[i]);
    in = rows_[i];
  }
  ++position_;
  return in;
}

template class Decoder<float>;
template class Decoder<double>;

}  // namespace strata
