// Trains a character-level GPT (kiln::models::GPT) on a UTF-8 text file and then writes
// new text in its style: every character is a token, training batches are random windows
// of the text, AdamW updates the weights, and an estimated validation loss (on the last
// 10% of the text) shows whether the model generalises or only memorises.
//
//   char_gpt --text FILE [--steps N] [--batch-size N] [--context N] [--layers N] [--width N]
//            [--heads N] [--threads N] [--seed N] [--eval-every N] [--prompt TEXT]
//            [--generate N] [--temperature T] [--top-k K]
//
//   char_gpt --text /usr/share/games/fortunes/fortunes            # Debian's "fortune" sayings
//   char_gpt --text book.txt --steps 3000 --layers 6 --width 192 --heads 6 --prompt "The "
//
// Sanity check: it exits with status 1 if a loss is NaN/inf or if the estimated training
// loss did not go down from its value before training; the smoke test relies on that.
#include <cmath>
#include <cstdio>
#include <string>
#include <kiln/kiln.h>

using kiln::Tensor;

// Mean loss over `iters` random (B, T) windows of `data`: an estimate of the loss on that
// split. A fixed Rng seed gives the same windows at every evaluation, so values compare.
static double estimate_loss(kiln::models::GPT& model, const kiln::data::TokenDataset& data, int64_t batch,
                            int64_t context, int iters) {
  kiln::NoGradGuard no_grad;  // no autograd graph: faster, less memory
  model.eval();
  kiln::data::Rng rng(12345);
  double sum = 0;
  for (int i = 0; i < iters; ++i) {
    kiln::data::Batch b = data.get_batch(batch, context, rng);
    Tensor logits = model(b.input);                                                 // (B, T, vocab)
    sum += kiln::cross_entropy(logits.reshape({-1, logits.size(-1)}), b.target.reshape({-1})).item();
  }
  model.train();
  return sum / iters;
}

static int run(int argc, char** argv) {
  std::string text_path, prompt;
  int64_t steps = 500, batch = 32, context = 64, layers = 4, width = 128, heads = 4, generate = 300, top_k = 20;
  int threads = 2, eval_every = 50;
  uint64_t seed = 0;
  double temperature = 0.8;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--text") text_path = next();
    else if (a == "--steps") steps = std::stoll(next());
    else if (a == "--batch-size") batch = std::stoll(next());
    else if (a == "--context") context = std::stoll(next());
    else if (a == "--layers") layers = std::stoll(next());
    else if (a == "--width") width = std::stoll(next());
    else if (a == "--heads") heads = std::stoll(next());
    else if (a == "--threads") threads = std::stoi(next());
    else if (a == "--seed") seed = std::stoull(next());
    else if (a == "--eval-every") eval_every = std::stoi(next());
    else if (a == "--prompt") prompt = next();
    else if (a == "--generate") generate = std::stoll(next());
    else if (a == "--temperature") temperature = std::stod(next());
    else if (a == "--top-k") top_k = std::stoll(next());
    else { std::fprintf(stderr, "unknown argument %s\n", a.c_str()); return 2; }
  }
  if (text_path.empty()) {
    std::fprintf(stderr, "usage: char_gpt --text FILE [options]   (try /usr/share/games/fortunes/fortunes)\n");
    return 2;
  }
  kiln::set_num_threads(threads);
  kiln::manual_seed(seed);  // initial weights and sampling
  kiln::data::Rng rng(seed);  // training windows

  // The text's distinct characters form the vocabulary; the last 10% is the validation split.
  kiln::data::CharText text(text_path, {.context = context, .val_fraction = 0.1});
  const int64_t vocab = text.vocab().size();
  std::printf("%s: %lld characters, vocabulary of %lld\n", text_path.c_str(), (long long)text.tokens().numel(),
              (long long)vocab);

  kiln::models::GPT model({.vocab = vocab, .context = context, .layers = layers, .heads = heads, .width = width});
  std::printf("GPT: %lld layers, width %lld, %lld heads, %lld parameters\n", (long long)layers, (long long)width,
              (long long)heads, (long long)model.num_parameters());
  kiln::optim::AdamW opt(model.parameters(), {.lr = 1e-3});

  const double initial_loss = estimate_loss(model, text.train(), batch, context, 4);
  double train_loss = initial_loss;
  std::printf("step %5d  train loss %.4f (estimated)\n", 0, initial_loss);
  for (int64_t step = 1; step <= steps; ++step) {
    kiln::data::Batch b = text.train().get_batch(batch, context, rng);  // input, target: (B, T) token ids
    opt.zero_grad();
    Tensor logits = model(b.input);                                        // (B, T, vocab)
    Tensor loss = kiln::cross_entropy(logits.reshape({-1, vocab}), b.target.reshape({-1}));
    loss.backward();
    opt.step();
    if (!std::isfinite(loss.item())) { std::fprintf(stderr, "loss is NaN/inf at step %lld\n", (long long)step); return 1; }
    if (step % eval_every == 0 || step == steps) {
      train_loss = estimate_loss(model, text.train(), batch, context, 4);
      std::printf("step %5lld  train loss %.4f  val loss %.4f (estimated)\n", (long long)step, train_loss,
                  estimate_loss(model, text.val(), batch, context, 4));
    }
  }

  // Sampling: start from the prompt (default: the text's first character) and append tokens.
  Tensor start = prompt.empty() ? text.tokens().narrow(0, 0, 1) : kiln::from_vector(text.vocab().encode(prompt));
  model.eval();
  Tensor out = model.generate(start.reshape({1, -1}), generate, temperature, top_k);  // (1, P + generate)
  std::printf("---- sample (temperature %.2f, top-k %lld) ----\n%s\n----\n", temperature, (long long)top_k,
              text.vocab().decode(out.reshape({-1})).c_str());

  if (steps > 0 && !(train_loss < initial_loss)) {
    std::fprintf(stderr, "sanity check failed: loss did not decrease (%.4f -> %.4f)\n", initial_loss, train_loss);
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // kiln::Error says what was wrong (file, shapes, ...)
    std::fprintf(stderr, "char_gpt: %s\n", e.what());
    return 1;
  }
}
