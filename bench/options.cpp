#include "options.hpp"

#include <cstdlib>
#include <cstring>
#include <string>

namespace fa_bench {

const char* usage() {
  return "usage: flashattn-bench [options]\n"
         "  --backend auto|cpu|cuda|reference  (auto: the GPU when present, else the CPU)\n"
         "  --batch N --heads N --heads-k N --seqlen-q N --seqlen-k N --hdim N\n"
         "  --dtype auto|fp16|bf16|fp32|e4m3   (auto: bf16 on the GPU, fp32 on the CPU; e4m3: FP8\n"
         "                                     q, k, v with a bf16 out, forward only)\n"
         "  --causal  --window L,R  --softcap X  --dropout P\n"
         "  --direction fwd|bwd\n"
         "  --check        compare with the reference on the same inputs\n"
         "  --json         print one JSON object\n"
         "  --warmup N --iters N\n"
         "  --host-time N  also the host time per call: validation and plan alone, and whole\n"
         "                 calls issued N at a time back to back (medians of 5 rounds)\n"
         "  --mode attention|decode            (decode: forward_kvcache, seqlen_q 1 by default)\n"
         "  --cache-len N --page-size P --num-splits N   (decode mode)\n"
         "  --cache-layout rows|heads  (decode: [.., keys, heads_k, d], default, or\n"
         "                              [.., heads_k, keys, d] as a strided view)\n"
         "  --page-order shuffled|sequential   (decode: the block table, default shuffled)\n"
         "  --cache-dtype same|e4m3    (decode: the cache in q's dtype, default, or FP8)\n";
}

namespace {

bool parse_int(const char* text, int* value) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < -1 || v > (1L << 30)) return false;
  *value = static_cast<int>(v);
  return true;
}

bool parse_backend(const std::string& text, flashattn::Backend* backend) {
  if (text == "auto") *backend = flashattn::Backend::kAuto;
  else if (text == "cpu") *backend = flashattn::Backend::kCpu;
  else if (text == "cuda") *backend = flashattn::Backend::kCuda;
  else if (text == "reference") *backend = flashattn::Backend::kReference;
  else return false;
  return true;
}

}  // namespace

bool parse_options(int argc, char** argv, Options* o, std::string* message) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&](const char** out) {
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    const char* v = nullptr;
    bool ok = true;
    if (flag == "--help" || flag == "-h") {
      *message = usage();
      return false;
    } else if (flag == "--causal") {
      o->causal = true;
    } else if (flag == "--check") {
      o->check = true;
    } else if (flag == "--json") {
      o->json = true;
    } else if (!value(&v)) {
      *message = "flashattn-bench: " + flag + " needs a value (or is unknown)\n" + usage();
      return false;
    } else if (flag == "--backend") {
      ok = parse_backend(v, &o->backend);
    } else if (flag == "--batch") {
      ok = parse_int(v, &o->batch);
    } else if (flag == "--heads") {
      ok = parse_int(v, &o->heads);
    } else if (flag == "--heads-k") {
      ok = parse_int(v, &o->heads_k);
    } else if (flag == "--seqlen-q") {
      ok = parse_int(v, &o->seqlen_q);
      o->seqlen_q_given = true;
    } else if (flag == "--mode") {
      const std::string m = v;
      ok = m == "attention" || m == "decode";
      o->mode = m == "decode" ? Mode::kDecode : Mode::kAttention;
    } else if (flag == "--cache-len") {
      ok = parse_int(v, &o->cache_len) && o->cache_len > 0;
    } else if (flag == "--page-size") {
      ok = parse_int(v, &o->page_size) && o->page_size >= 0;
    } else if (flag == "--cache-layout") {
      const std::string layout = v;
      ok = layout == "rows" || layout == "heads";
      o->heads_major = layout == "heads";
    } else if (flag == "--page-order") {
      const std::string order = v;
      ok = order == "shuffled" || order == "sequential";
      o->pages_in_order = order == "sequential";
    } else if (flag == "--cache-dtype") {
      const std::string type = v;
      ok = type == "same" || type == "e4m3";
      o->e4m3_cache = type == "e4m3";
    } else if (flag == "--num-splits") {
      ok = parse_int(v, &o->num_splits) && o->num_splits >= 0;
    } else if (flag == "--seqlen-k") {
      ok = parse_int(v, &o->seqlen_k);
    } else if (flag == "--hdim") {
      ok = parse_int(v, &o->hdim);
    } else if (flag == "--dtype") {
      o->dtype = v;
      ok = o->dtype == "auto" || o->dtype == "fp16" || o->dtype == "bf16" || o->dtype == "fp32" ||
           o->dtype == "e4m3";
    } else if (flag == "--window") {
      const char* comma = std::strchr(v, ',');
      ok = comma != nullptr && parse_int(std::string(v, comma).c_str(), &o->window_left) &&
           parse_int(comma + 1, &o->window_right);
    } else if (flag == "--softcap") {
      char* end = nullptr;
      o->softcap = std::strtof(v, &end);
      ok = end != v && *end == '\0';
    } else if (flag == "--dropout") {
      char* end = nullptr;
      o->dropout_p = std::strtof(v, &end);
      ok = end != v && *end == '\0' && o->dropout_p >= 0.f && o->dropout_p < 1.f;
    } else if (flag == "--direction") {
      const std::string d = v;
      ok = d == "fwd" || d == "bwd";
      o->direction = d == "bwd" ? Direction::kBackward : Direction::kForward;
    } else if (flag == "--warmup") {
      ok = parse_int(v, &o->warmup);
    } else if (flag == "--iters") {
      ok = parse_int(v, &o->iters) && o->iters > 0;
    } else if (flag == "--host-time") {
      ok = parse_int(v, &o->host_time_calls) && o->host_time_calls > 0;
    } else {
      *message = "flashattn-bench: unknown option " + flag + "\n" + usage();
      return false;
    }
    if (!ok) {
      *message = "flashattn-bench: bad value for " + flag + ": " + v + "\n";
      return false;
    }
  }
  if (o->dtype == "e4m3" && (o->mode == Mode::kDecode || o->direction == Direction::kBackward)) {
    *message = "flashattn-bench: --dtype e4m3 times the attention forward only (decode takes "
               "--cache-dtype e4m3)\n";
    return false;
  }
  if (o->mode == Mode::kDecode && !o->seqlen_q_given) o->seqlen_q = 1;
  if (o->heads_k == 0) o->heads_k = o->heads;
  if (o->seqlen_k == 0) o->seqlen_k = o->seqlen_q;
  return true;
}

}  // namespace fa_bench
