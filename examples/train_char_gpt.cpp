// train_char_gpt: nanoGPT's character-level Shakespeare (train.py with config/train_shakespeare_char.py,
// CPU settings) on models::GPT2LMHeadModel. The training logic is include/eigenformer/train/char_lm.hpp.
//
//   train_char_gpt                                   # tiny Shakespeare, 2000 iterations, then a sample
//   train_char_gpt --iters 200 --eval-interval 50 --eval-iters 20 --save out --log run.csv
//   train_char_gpt --resume out --iters 2000        # continue from out's step to 2000
//   train_char_gpt --iters 500 --plot run.svg        # the loss curves and the learning rate as a picture
//   train_char_gpt --plot run.svg --from-log run.csv  # the same picture from a --log file, without training
//
// Usage: train_char_gpt [--data FILE] [--n-layer N] [--n-head N] [--n-embd N] [--block-size N]
//          [--batch-size N] [--dropout P] [--lr F] [--min-lr F] [--warmup N] [--iters N] [--weight-decay F]
//          [--grad-clip F] [--seed S] [--eval-interval N] [--eval-iters N] [--sample N] [--temperature F]
//          [--top-k K] [--save DIR] [--resume DIR] [--log FILE.csv] [--plot FILE.svg] [--quiet]
//        train_char_gpt --plot FILE.svg --from-log FILE.csv
//   --data FILE     the corpus (default $EIGENFORMER_DATA_DIR/tinyshakespeare/input.txt, else
//                   ../shared/data/tinyshakespeare/input.txt); 90% train, 10% val
//   model/optimizer nanoGPT's CPU defaults: 4 layers, 4 heads, 128 channels, block 64, batch 12, dropout 0,
//                   AdamW lr 1e-3 (betas 0.9, 0.99; weight decay 0.1 on matrices only) with 100 warm-up
//                   steps and a cosine decay to --min-lr 1e-4 at --iters 2000, gradient clipping 1.0
//   --eval-interval N  print "step N: train loss X, val loss Y" every N steps (and at the end), each loss the
//                   mean of --eval-iters batches (default 200) in eval mode
//   --sample N      characters to sample at the end (default 300; 0: none), with --temperature (0.8) and
//                   --top-k (200), seeded by --seed, as nanoGPT's sample.py
//   --save DIR      write a checkpoint at every evaluation and at the end (model, optimizer, step)
//   --resume DIR    continue from a checkpoint: its model and training configuration (model and optimizer
//                   flags are ignored, the lr schedule is the checkpoint's; --iters sets where to stop, and
//                   the evaluation, sampling, --save and --log flags apply)
//   --log FILE.csv  one row per step (kind=train: step, lr, loss) and per evaluation (kind=eval)
//   --plot FILE.svg draws this run's curves, rewritten at every evaluation: the loss of every training batch
//                   with the evaluations' train and val losses, and the learning rate schedule
//   --from-log FILE.csv  draw --plot from a --log file instead (of a finished run, or one still going;
//                   an appended --resume log gives the whole history) and stop
//   --quiet         plain progress lines instead of the bar, even on a terminal
// The last lines are "val loss X.XXXX" and the sample. Progress goes to stderr: a bar when stderr is a
// terminal, else (or with --quiet) a line every eval interval / 10 steps. Exit status: 0, 2 for a bad flag, 1 for other errors.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <eigenformer/io/svg.hpp>
#include <eigenformer/train/char_lm.hpp>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>

namespace ef = eigenformer;
namespace train = eigenformer::train;
namespace svg = eigenformer::io::svg;

namespace {

struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Options {
  train::CharLMConfig config;
  std::string data, save, resume, log, plot, from_log;
  bool iters_set = false;
  std::int64_t eval_interval = 250, eval_iters = 200, sample = 300, top_k = 200;
  double temperature = 0.8;
  bool quiet = false;
};

long long integer(const std::string& flag, const std::string& s, long long min) {
  std::size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || s.empty()) throw usage_error(flag + " expects an integer, got \"" + s + "\"");
  if (v < min) throw usage_error(flag + " must be >= " + std::to_string(min) + ", got " + s);
  return v;
}

double real(const std::string& flag, const std::string& s, double min, double max) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || s.empty() || !std::isfinite(v)) throw usage_error(flag + " expects a number, got \"" + s + "\"");
  if (v < min || v > max)
    throw usage_error(flag + " must be between " + std::to_string(min) + " and " + std::to_string(max) + ", got " + s);
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  auto& c = o.config;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i], value;
    bool has_value = false;
    if (const auto eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      has_value = true;
    }
    if (flag == "--quiet") {
      o.quiet = true;
      continue;
    }
    if (flag == "--help" || flag == "-h") throw usage_error("");
    auto next = [&]() -> std::string {
      if (has_value) return value;
      if (i + 1 >= argc) throw usage_error(flag + " needs a value");
      return argv[++i];
    };
    if (flag == "--data") o.data = next();
    else if (flag == "--save") o.save = next();
    else if (flag == "--resume") o.resume = next();
    else if (flag == "--log") o.log = next();
    else if (flag == "--plot") o.plot = next();
    else if (flag == "--from-log") o.from_log = next();
    else if (flag == "--n-layer") c.n_layer = integer(flag, next(), 1);
    else if (flag == "--n-head") c.n_head = integer(flag, next(), 1);
    else if (flag == "--n-embd") c.n_embd = integer(flag, next(), 1);
    else if (flag == "--block-size") c.block_size = integer(flag, next(), 1);
    else if (flag == "--batch-size") c.batch_size = integer(flag, next(), 1);
    else if (flag == "--dropout") c.dropout = real(flag, next(), 0.0, 0.999);
    else if (flag == "--lr") c.lr = real(flag, next(), 1e-12, 10.0);
    else if (flag == "--min-lr") c.min_lr = real(flag, next(), 0.0, 10.0);
    else if (flag == "--warmup") c.warmup = integer(flag, next(), 0);
    else if (flag == "--iters") c.iters = integer(flag, next(), 1), o.iters_set = true;
    else if (flag == "--weight-decay") c.weight_decay = real(flag, next(), 0.0, 1e6);
    else if (flag == "--grad-clip") c.grad_clip = real(flag, next(), 0.0, 1e12);
    else if (flag == "--seed") c.seed = static_cast<std::uint64_t>(integer(flag, next(), 0));
    else if (flag == "--eval-interval") o.eval_interval = integer(flag, next(), 1);
    else if (flag == "--eval-iters") o.eval_iters = integer(flag, next(), 1);
    else if (flag == "--sample") o.sample = integer(flag, next(), 0);
    else if (flag == "--temperature") o.temperature = real(flag, next(), 1e-6, 1e6);
    else if (flag == "--top-k") o.top_k = integer(flag, next(), 0);
    else throw usage_error("unknown flag " + flag + " (see --help)");
  }
  if (c.n_embd % c.n_head != 0)
    throw usage_error("--n-embd " + std::to_string(c.n_embd) + " must be divisible by --n-head " + std::to_string(c.n_head));
  if (c.min_lr > c.lr) throw usage_error("--min-lr must not exceed --lr");
  if (!o.from_log.empty() && o.plot.empty()) throw usage_error("--from-log FILE.csv draws --plot FILE.svg: add --plot");
  if (o.resume.empty() && c.iters <= c.warmup) throw usage_error("--iters must be greater than --warmup");
  return o;
}

std::string default_data() {
  if (const char* dir = std::getenv("EIGENFORMER_DATA_DIR"); dir && *dir)
    return (std::filesystem::path(dir) / "tinyshakespeare" / "input.txt").string();
  return "../shared/data/tinyshakespeare/input.txt";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw std::runtime_error("cannot read the corpus " + path +
                             " (pass --data FILE, or set EIGENFORMER_DATA_DIR to a directory with tinyshakespeare/input.txt)");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string duration(double seconds) {
  const long s = static_cast<long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}

// Progress on stderr: a redrawn bar on a terminal, else an occasional plain line.
class Progress {
 public:
  Progress(std::int64_t total, std::int64_t every, bool quiet)
      : total_(total), every_(every > 10 ? every / 10 : 1), tty_(!quiet && isatty(STDERR_FILENO) == 1) {}

  void update(std::int64_t step, double loss, double its) {
    const double eta = its > 0 ? static_cast<double>(total_ - step) / its : 0;
    if (tty_) {
      constexpr int width = 30;
      const int filled = static_cast<int>(width * step / (total_ > 0 ? total_ : 1));
      std::fprintf(stderr, "\r[%s%s] %lld/%lld loss %.4f %.2f it/s ETA %s   ", std::string(filled, '#').c_str(),
                   std::string(width - filled, '.').c_str(), static_cast<long long>(step),
                   static_cast<long long>(total_), loss, its, duration(eta).c_str());
      dirty_ = true;
    } else if (step % every_ == 0 || step == total_) {
      std::fprintf(stderr, "progress %lld/%lld loss %.4f %.2f it/s ETA %s\n", static_cast<long long>(step),
                   static_cast<long long>(total_), loss, its, duration(eta).c_str());
    }
    std::fflush(stderr);
  }
  // Before a line on stdout: clears the bar so the two do not mix on a terminal.
  void clear() {
    if (dirty_) std::fprintf(stderr, "\r%*s\r", 100, "");
    dirty_ = false;
    std::fflush(stderr);
  }

 private:
  std::int64_t total_, every_;
  bool tty_, dirty_ = false;
};

// --plot: what the run has measured so far.
struct Curves {
  svg::Series batch{.name = "train batch", .color = "#a6c8e6"}, train{.name = "train (eval)"}, val{.name = "val (eval)"};
  svg::Series lr{.name = "learning rate"};

  void draw(const std::string& file) const {
    svg::Figure fig("train_char_gpt", 2);
    svg::LineChart loss{.title = "Loss", .x_label = "step", .y_label = "cross-entropy (nats per character)"};
    for (const auto* s : {&batch, &train, &val})
      if (!s->x.empty()) loss.series.push_back(*s);
    if (!loss.series.empty()) fig.add(loss);
    if (!lr.x.empty()) fig.add(svg::LineChart{.title = "Learning rate", .x_label = "step", .y_label = "lr", .series = {lr}});
    if (fig.size() > 0) fig.save(file);
  }
};

// --from-log: the curves of a --log file (kind,step,lr,loss,train_loss,val_loss).
int plot_from_log(const Options& o) {
  const auto log = svg::CsvLog::read(o.from_log);
  Curves c;
  c.batch.set_points(log.series("", "step", "loss", "kind", "train"));
  c.lr.set_points(log.series("", "step", "lr", "kind", "train"));
  c.train.set_points(log.series("", "step", "train_loss", "kind", "eval"));
  c.val.set_points(log.series("", "step", "val_loss", "kind", "eval"));
  if (c.batch.x.empty() && c.train.x.empty()) throw std::runtime_error(o.from_log + ": no training or evaluation rows to draw");
  c.draw(o.plot);
  std::fprintf(stderr, "train_char_gpt: drew %zu steps and %zu evaluations of %s in %s\n", c.batch.x.size(),
               c.train.x.size(), o.from_log.c_str(), o.plot.c_str());
  return 0;
}

int run(const Options& o) {
  if (!o.from_log.empty()) return plot_from_log(o);
  using clock = std::chrono::steady_clock;
  const std::string path = o.data.empty() ? default_data() : o.data;
  const std::string text = read_file(path);
  auto data = train::CharDataset::from_text(text);

  std::unique_ptr<train::CharLMTrainer<float>> trainer;
  if (!o.resume.empty()) {
    trainer = train::CharLMTrainer<float>::load(o.resume);
    const auto& chars = trainer->tokenizer().chars();
    if (chars != data.tokenizer.chars()) {
      // Re-encode with the checkpoint's vocabulary (throws if the corpus has characters it lacks).
      auto ids = trainer->tokenizer().encode(text);
      const auto n = static_cast<std::size_t>(static_cast<double>(ids.size()) * 0.9);
      data.train.assign(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n));
      data.val.assign(ids.begin() + static_cast<std::ptrdiff_t>(n), ids.end());
    }
    std::fprintf(stderr, "resumed from %s at step %lld\n", o.resume.c_str(), static_cast<long long>(trainer->step()));
  } else {
    trainer = std::make_unique<train::CharLMTrainer<float>>(o.config, data.tokenizer);
  }
  const auto& c = trainer->config();
  const std::int64_t iters = o.iters_set ? o.config.iters : c.iters;

  std::size_t n_params = 0;
  for (const auto& p : trainer->model().named_parameters()) n_params += static_cast<std::size_t>(p.data.numel());
  std::fprintf(stderr,
               "data %s: %zu characters, vocabulary %zu, train %zu, val %zu\n"
               "model: %lld layers, %lld heads, %lld channels, block %lld; %.2fM parameters; batch %lld, %lld iterations, %d threads\n",
               path.c_str(), text.size(), data.tokenizer.vocab_size(), data.train.size(), data.val.size(),
               static_cast<long long>(c.n_layer), static_cast<long long>(c.n_head), static_cast<long long>(c.n_embd),
               static_cast<long long>(c.block_size), static_cast<double>(n_params) / 1e6,
               static_cast<long long>(c.batch_size), static_cast<long long>(iters), ef::get_num_threads());

  std::ofstream log;
  if (!o.log.empty()) {
    const bool append = !o.resume.empty() && std::filesystem::exists(o.log);
    log.open(o.log, append ? std::ios::app : std::ios::trunc);
    if (!log) throw std::runtime_error("cannot write the log " + o.log);
    if (!append) log << "kind,step,lr,loss,train_loss,val_loss\n";
  }

  Progress progress(iters, o.eval_interval, o.quiet);
  Curves curves;
  double val = std::numeric_limits<double>::quiet_NaN();
  auto evaluate = [&] {
    const double tr = trainer->estimate_loss(data.train, o.eval_iters, 0);
    val = trainer->estimate_loss(data.val, o.eval_iters, 1);
    progress.clear();
    std::printf("step %lld: train loss %.4f, val loss %.4f\n", static_cast<long long>(trainer->step()), tr, val);
    std::fflush(stdout);
    if (log) log << "eval," << trainer->step() << ",,," << tr << "," << val << "\n" << std::flush;
    if (!o.plot.empty()) {
      if (std::isfinite(tr) && std::isfinite(val)) {
        curves.train.x.push_back(static_cast<double>(trainer->step())), curves.train.y.push_back(tr);
        curves.val.x.push_back(static_cast<double>(trainer->step())), curves.val.y.push_back(val);
      }
      curves.draw(o.plot);
    }
    if (!o.save.empty()) trainer->save(o.save);
  };

  // Training: nanoGPT evaluates at step 0 and every eval_interval steps, then once more at the end.
  const auto start = clock::now();
  const std::int64_t first = trainer->step();
  double train_seconds = 0, last_loss = 0;
  auto window = clock::now();
  std::int64_t window_steps = 0;
  double its = 0;
  while (trainer->step() < iters) {
    if (trainer->step() % o.eval_interval == 0) {
      evaluate();
      window = clock::now();
      window_steps = 0;
    }
    const auto t0 = clock::now();
    const auto r = trainer->train_step(data.train);
    const auto t1 = clock::now();
    train_seconds += std::chrono::duration<double>(t1 - t0).count();
    last_loss = r.loss;
    ++window_steps;
    its = static_cast<double>(window_steps) / std::chrono::duration<double>(t1 - window).count();
    if (log) log << "train," << trainer->step() - 1 << "," << r.lr << "," << r.loss << ",,\n";
    if (!o.plot.empty() && std::isfinite(r.loss)) {  // a diverged step leaves a gap rather than stopping the run
      const auto x = static_cast<double>(trainer->step() - 1);
      curves.batch.x.push_back(x), curves.batch.y.push_back(r.loss);
      curves.lr.x.push_back(x), curves.lr.y.push_back(r.lr);
    }
    progress.update(trainer->step(), last_loss, its);
  }
  const std::int64_t trained = trainer->step() - first;
  evaluate();
  progress.clear();
  const double wall = std::chrono::duration<double>(clock::now() - start).count();
  if (trained > 0)
    std::fprintf(stderr, "trained %lld steps in %.1f s (%.2f it/s over the training steps alone; %.1f s wall with evaluations)\n",
                 static_cast<long long>(trained), train_seconds, static_cast<double>(trained) / train_seconds, wall);
  std::printf("val loss %.4f\n", val);
  if (o.sample > 0) {
    std::printf("%s\n", trainer->sample("\n", o.sample, o.temperature, o.top_k, c.seed).c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    o = parse(argc, argv);
  } catch (const usage_error& e) {
    if (std::string(e.what()).empty()) {
      std::cout << "usage: train_char_gpt [--data FILE] [--n-layer N] [--n-head N] [--n-embd N] [--block-size N]\n"
                   "         [--batch-size N] [--dropout P] [--lr F] [--min-lr F] [--warmup N] [--iters N]\n"
                   "         [--weight-decay F] [--grad-clip F] [--seed S] [--eval-interval N] [--eval-iters N]\n"
                   "         [--sample N] [--temperature F] [--top-k K] [--save DIR] [--resume DIR] [--log FILE.csv]\n"
                   "         [--plot FILE.svg] [--quiet]\n"
                   "       train_char_gpt --plot FILE.svg --from-log FILE.csv\n";
      return 0;
    }
    std::cerr << "train_char_gpt: " << e.what() << "\n";
    return 2;
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::cerr << "train_char_gpt: " << e.what() << "\n";
    return 1;
  }
}
