#include "fuzz_case.hpp"

#include <sstream>
#include <utility>

namespace fa_fuzz {
namespace {

// The integer fields of a Case by name: what to_line writes and from_line reads.
std::vector<std::pair<const char*, int*>> fields(Case& c) {
  return {{"entry", &c.entry},
          {"c_abi", &c.c_abi},
          {"dtype", &c.dtype},
          {"batch", &c.batch},
          {"seqlen_q", &c.seqlen_q},
          {"seqlen_k", &c.seqlen_k},
          {"nheads_k", &c.nheads_k},
          {"group", &c.group},
          {"head_dim", &c.head_dim},
          {"padded", &c.padded},
          {"varlen", &c.varlen},
          {"seqused", &c.seqused},
          {"causal", &c.causal},
          {"window_left", &c.window_left},
          {"window_right", &c.window_right},
          {"softcap", &c.softcap},
          {"alibi", &c.alibi},
          {"dropout", &c.dropout},
          {"seed_in_memory", &c.seed_in_memory},
          {"scale", &c.scale},
          {"lse", &c.lse},
          {"capacity", &c.capacity},
          {"page_size", &c.page_size},
          {"batch_idx", &c.batch_idx},
          {"leftpad", &c.leftpad},
          {"seqlen_new", &c.seqlen_new},
          {"rotary_dim", &c.rotary_dim},
          {"num_splits", &c.num_splits},
          {"poison", &c.poison}};
}

int pick(std::mt19937_64& rng, std::initializer_list<int> values) {
  std::uniform_int_distribution<size_t> index(0, values.size() - 1);
  return *(values.begin() + index(rng));
}

int uniform(std::mt19937_64& rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

bool chance(std::mt19937_64& rng, double p) { return std::bernoulli_distribution(p)(rng); }

// Values a mutation writes: the edges of each kind of field.
int64_t edge_value(std::mt19937_64& rng) {
  static const int64_t values[] = {0,
                                   1,
                                   -1,
                                   2,
                                   -2,
                                   3,
                                   7,
                                   16,
                                   255,
                                   256,
                                   257,
                                   1 << 16,
                                   INT32_MAX,
                                   INT32_MIN,
                                   int64_t{1} << 31,
                                   int64_t{1} << 32,
                                   int64_t{1} << 40,
                                   INT64_MAX,
                                   INT64_MIN,
                                   -(int64_t{1} << 31)};
  return values[std::uniform_int_distribution<size_t>(0, std::size(values) - 1)(rng)];
}

Mutation random_mutation(std::mt19937_64& rng) {
  Mutation m;
  m.kind = static_cast<MutationKind>(uniform(rng, 0, static_cast<int>(MutationKind::kCount) - 1));
  m.slot = uniform(rng, 0, kSlotCount - 1);
  m.dim = uniform(rng, 0, 4);
  switch (m.kind) {
    case MutationKind::kDtype:
      m.value = chance(rng, 0.5) ? uniform(rng, 0, 3) : edge_value(rng);
      break;
    case MutationKind::kRank:
      m.value = uniform(rng, -1, 5);
      break;
    case MutationKind::kDevice:
      m.value = chance(rng, 0.5) ? 1 : edge_value(rng);
      break;
    case MutationKind::kOption:
      m.dim = uniform(rng, 0, 10);
      m.value = edge_value(rng);
      break;
    case MutationKind::kContent:
      m.dim = uniform(rng, 0, 8);
      m.value = edge_value(rng);
      break;
    default:
      m.value = edge_value(rng);
      break;
  }
  return m;
}

}  // namespace

const char* slot_name(Slot slot, Entry entry) {
  const bool cache = entry == Entry::kKVCache;
  switch (slot) {
    case kQ:
      return "q";
    case kK:
      return cache ? "k_cache" : "k";
    case kV:
      return cache ? "v_cache" : "v";
    case kOut:
      return "out";
    case kLse:
      return "lse";
    case kDout:
      return "dout";
    case kDq:
      return "dq";
    case kDk:
      return "dk";
    case kDv:
      return "dv";
    case kCuQ:
      return "varlen.cu_seqlens_q";
    case kCuK:
      return "varlen.cu_seqlens_k";
    case kUsedK:
      return "varlen.seqused_k";
    case kAlibi:
      return "options.alibi_slopes";
    case kCacheSeqlens:
      return "cache_seqlens";
    case kKNew:
      return "k_new";
    case kVNew:
      return "v_new";
    case kBlockTable:
      return "block_table";
    case kBatchIdx:
      return "cache_batch_idx";
    case kLeftpad:
      return "cache_leftpad";
    case kRotaryCos:
      return "rotary_cos";
    case kRotarySin:
      return "rotary_sin";
    case kQDescale:
      return "descale.q";
    case kKDescale:
      return "descale.k";
    case kVDescale:
      return "descale.v";
    case kSlotCount:
      break;
  }
  return "?";
}

Case random_case(std::mt19937_64& rng) {
  Case c;
  c.entry = uniform(rng, 0, 2);
  c.c_abi = chance(rng, 0.3);
  c.dtype = chance(rng, 0.15) ? 3 : uniform(rng, 0, 2);  // 3: FP8 (fuzz_instance.cpp)
  c.batch = pick(rng, {0, 1, 1, 2, 2, 3});
  c.seqlen_q = pick(rng, {0, 1, 2, 5, 17, 33, 64, 97, 130});
  c.seqlen_k = pick(rng, {0, 1, 3, 16, 31, 64, 100, 200});
  c.nheads_k = pick(rng, {1, 1, 2, 3});
  c.group = pick(rng, {1, 1, 2, 4});
  c.head_dim = pick(rng, {1, 3, 8, 16, 24, 40, 64, 72, 128, 256});
  c.padded = chance(rng, 0.3);
  c.causal = chance(rng, 0.4);
  if (chance(rng, 0.3)) {
    c.window_left = pick(rng, {-1, 0, 1, 5, 40});
    c.window_right = c.causal ? pick(rng, {-1, 0}) : pick(rng, {-1, 0, 2, 30});
  }
  c.softcap = chance(rng, 0.2) ? pick(rng, {5, 30, 200}) : 0;
  c.alibi = chance(rng, 0.2);
  c.scale = chance(rng, 0.7) ? -1 : pick(rng, {0, 10, 50, 200});
  c.lse = chance(rng, 0.8);
  if (c.entry != static_cast<int>(Entry::kKVCache)) {
    c.varlen = chance(rng, 0.3);
    c.seqused = c.varlen && chance(rng, 0.3);
    c.dropout = chance(rng, 0.2) ? pick(rng, {10, 50}) : 0;
    c.seed_in_memory = c.dropout > 0 && chance(rng, 0.4);
  } else {
    c.seqlen_q = pick(rng, {0, 1, 1, 2, 4, 9, 40});
    c.capacity = pick(rng, {0, 16, 32, 48, 100, 256});
    c.page_size = chance(rng, 0.3) ? pick(rng, {16, 32}) : 0;
    c.batch_idx = c.page_size == 0 && chance(rng, 0.3);
    c.leftpad = chance(rng, 0.2);
    c.seqlen_new = chance(rng, 0.4) ? pick(rng, {1, 2, 5}) : 0;
    c.rotary_dim = chance(rng, 0.2) ? pick(rng, {2, 8, 16}) : 0;
    c.num_splits = pick(rng, {0, 0, 1, 2, 3, 7});
  }
  c.poison = chance(rng, 0.1) ? uniform(rng, 1, 4) : 0;
  c.seed = static_cast<uint32_t>(rng());
  if (chance(rng, 0.5)) {
    const int count = uniform(rng, 1, 3);
    for (int i = 0; i < count; ++i) c.mutations.push_back(random_mutation(rng));
  }
  return c;
}

std::string to_line(const Case& c) {
  Case copy = c;
  std::ostringstream line;
  for (const auto& [name, value] : fields(copy)) line << name << '=' << *value << ' ';
  line << "seed=" << c.seed;
  for (const Mutation& m : c.mutations) {
    line << " mutation=" << static_cast<int>(m.kind) << ':' << m.slot << ':' << m.dim << ':'
         << m.value;
  }
  return line.str();
}

bool from_line(const std::string& line, Case* c, std::string* error) {
  *c = Case{};
  std::istringstream words(line);
  std::string word;
  auto table = fields(*c);
  while (words >> word) {
    const size_t equals = word.find('=');
    if (equals == std::string::npos) {
      *error = "expected name=value, got " + word;
      return false;
    }
    const std::string name = word.substr(0, equals), value = word.substr(equals + 1);
    try {
      if (name == "seed") {
        c->seed = static_cast<uint32_t>(std::stoul(value));
      } else if (name == "mutation") {
        Mutation m;
        char colon = 0;
        int kind = 0;
        std::istringstream parts(value);
        if (!(parts >> kind >> colon >> m.slot >> colon >> m.dim >> colon >> m.value)) {
          *error = "expected mutation=kind:slot:dim:value, got " + word;
          return false;
        }
        m.kind = static_cast<MutationKind>(kind);
        c->mutations.push_back(m);
      } else {
        bool known = false;
        for (auto& [field, target] : table) {
          if (name == field) {
            *target = std::stoi(value);
            known = true;
          }
        }
        if (!known) {
          *error = "unknown field " + name;
          return false;
        }
      }
    } catch (const std::exception&) {
      *error = "not a number: " + word;
      return false;
    }
  }
  return true;
}

}  // namespace fa_fuzz
