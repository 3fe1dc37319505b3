/* The C ABI from a C translation unit: a small forward on the CPU checked against a naive
 * loop, and the error path. Prints "N passed, M failed"; exits nonzero on any failure. */
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

#include "flashattn/flashattn.h"

enum { B = 2, SQ = 3, SK = 5, H = 4, HK = 2, D = 8 };

static int passed = 0, failed = 0;

static void expect(int condition, const char* what) {
  if (condition) {
    ++passed;
  } else {
    ++failed;
    printf("FAILED: %s (last error: %s)\n", what, fa_last_error_message());
  }
}

static float q[B][SQ][H][D], k[B][SK][HK][D], v[B][SK][HK][D];
static float out[B][SQ][H][D], lse[B][H][SQ];

static void fill_inputs(void) {
  unsigned state = 12345u;
  float* arrays[3] = {&q[0][0][0][0], &k[0][0][0][0], &v[0][0][0][0]};
  const int sizes[3] = {B * SQ * H * D, B * SK * HK * D, B * SK * HK * D};
  for (int a = 0; a < 3; ++a) {
    for (int i = 0; i < sizes[a]; ++i) {
      state = state * 1664525u + 1013904223u;
      arrays[a][i] = (float)((state >> 8) & 0xFFFF) / 32768.0f - 1.0f;
    }
  }
}

static void make_args(fa_forward_args* args, int64_t nheads_k) {
  const int64_t q_shape[4] = {B, SQ, H, D}, kv_shape[4] = {B, SK, nheads_k, D};
  const int64_t lse_shape[3] = {B, H, SQ};
  fa_forward_args_init(args);
  args->q = fa_make_tensor(q, FA_F32, 4, q_shape);
  args->k = fa_make_tensor(k, FA_F32, 4, kv_shape);
  args->v = fa_make_tensor(v, FA_F32, 4, kv_shape);
  args->out = fa_make_tensor(out, FA_F32, 4, q_shape);
  args->lse = fa_make_tensor(lse, FA_F32, 3, lse_shape);
}

/* Largest |out - naive| and |lse - naive| over the whole problem (non-causal, GQA). */
static double naive_error(void) {
  double worst = 0.0;
  const double scale = 1.0 / sqrt((double)D);
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < H; ++h) {
      const int hk = h / (H / HK);
      for (int i = 0; i < SQ; ++i) {
        double s[SK], m = -INFINITY, sum = 0.0;
        for (int j = 0; j < SK; ++j) {
          s[j] = 0.0;
          for (int d = 0; d < D; ++d) s[j] += (double)q[b][i][h][d] * k[b][j][hk][d];
          s[j] *= scale;
          if (s[j] > m) m = s[j];
        }
        for (int j = 0; j < SK; ++j) sum += exp(s[j] - m);
        worst = fmax(worst, fabs(lse[b][h][i] - (m + log(sum))));
        for (int d = 0; d < D; ++d) {
          double o = 0.0;
          for (int j = 0; j < SK; ++j) o += exp(s[j] - m) / sum * v[b][j][hk][d];
          worst = fmax(worst, fabs(out[b][i][h][d] - o));
        }
      }
    }
  }
  return worst;
}

static void test_forward_matches_naive(fa_backend backend, const char* name) {
  fa_forward_args args;
  fa_launch launch;
  char what[96];
  make_args(&args, HK);
  fa_launch_init(&launch);
  launch.backend = backend;
  memset(out, 0, sizeof out);
  snprintf(what, sizeof what, "fa_forward on %s returns FA_OK", name);
  expect(fa_forward(&args, &launch) == FA_OK, what);
  snprintf(what, sizeof what, "fa_forward on %s matches the naive loop", name);
  expect(naive_error() < 1e-4, what);
}

static void test_error_names_the_argument(void) {
  fa_forward_args args;
  make_args(&args, 3); /* 3 does not divide nheads = 4 */
  expect(fa_forward(&args, NULL) == FA_INVALID_ARGUMENT, "nheads_k = 3 is rejected");
  expect(strstr(fa_last_error_message(), "k: expected nheads_k dividing nheads=4, got 3") != NULL,
         "the message names k and the expected value");
  expect(fa_supported_forward(NULL, FA_BACKEND_CPU) == FA_INVALID_ARGUMENT &&
             strncmp(fa_last_error_message(), "args:", 5) == 0,
         "a NULL args pointer is rejected by name");
}

static void test_defaults_and_queries(void) {
  fa_forward_args args;
  size_t bytes = 99;
  fa_forward_args_init(&args);
  expect(args.options.window_left == -1 && args.options.window_right == -1 && args.lse.rank == 0 &&
             isnan(args.options.softmax_scale),
         "fa_forward_args_init sets the defaults");
  make_args(&args, HK);
  expect(fa_workspace_size_forward(&args, FA_BACKEND_CPU, &bytes) == FA_OK && bytes == 0,
         "the CPU backend needs no workspace");
  expect(fa_supported_forward(&args, FA_BACKEND_AUTO) == FA_OK,
         "host tensors are supported on auto");
  expect(fa_version() != NULL && fa_version()[0] != '\0', "fa_version is set");
}

static int allocator_calls;

static void* counting_allocator(size_t bytes, void* context) {
  (void)bytes;
  ++*(int*)context;
  return NULL;
}

/* fa_launch.allocate_workspace is asked only when a call needs workspace: never by the CPU
 * backend, never for a rejected call. */
static void test_workspace_allocator(void) {
  fa_forward_args args;
  fa_launch launch;
  fa_launch_init(&launch);
  expect(launch.allocate_workspace == NULL && launch.allocator_context == NULL,
         "fa_launch_init leaves no allocator");
  expect(launch.devices_trusted == 0, "fa_launch_init leaves the devices to be checked");
  launch.backend = FA_BACKEND_CPU;
  launch.allocate_workspace = counting_allocator;
  launch.allocator_context = &allocator_calls;
  make_args(&args, HK);
  expect(fa_forward(&args, &launch) == FA_OK && allocator_calls == 0,
         "a CPU forward runs without asking the allocator");
  make_args(&args, 3);
  expect(fa_forward(&args, &launch) == FA_INVALID_ARGUMENT && allocator_calls == 0,
         "a rejected call does not ask the allocator");
}

/* softmax_scale 0 is a scale of 0 (every score 0: out is the mean of v), not the default. */
static void test_zero_scale_is_literal(void) {
  fa_forward_args args;
  double worst = 0.0;
  make_args(&args, HK);
  args.options.softmax_scale = 0.0f;
  expect(fa_forward(&args, NULL) == FA_OK, "softmax_scale = 0 runs");
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < H; ++h) {
      for (int i = 0; i < SQ; ++i) {
        for (int d = 0; d < D; ++d) {
          double mean = 0.0;
          for (int j = 0; j < SK; ++j) mean += v[b][j][h / (H / HK)][d] / SK;
          worst = fmax(worst, fabs(out[b][i][h][d] - mean));
        }
      }
    }
  }
  expect(worst < 1e-5, "softmax_scale = 0 averages v uniformly");
}

/* Dropout's (seed, offset) read through dropout_seed_offset give what the same values in
 * options.dropout_seed / dropout_offset give; the fields are then ignored. */
static void test_dropout_seed_offset(void) {
  static float by_values[B][SQ][H][D];
  const uint64_t pair[2] = {0x0123456789ABCDEFull, 12};
  fa_forward_args args;
  int same = 1, moved = 0;
  make_args(&args, HK);
  args.options.dropout_p = 0.3f;
  args.options.dropout_seed = pair[0];
  args.options.dropout_offset = pair[1];
  expect(fa_forward(&args, NULL) == FA_OK, "dropout by values runs");
  memcpy(by_values, out, sizeof out);
  args.options.dropout_seed = 5;
  args.options.dropout_offset = 16;
  args.dropout_seed_offset = pair;
  expect(fa_forward(&args, NULL) == FA_OK, "dropout through dropout_seed_offset runs");
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < SQ; ++i)
      for (int h = 0; h < H; ++h)
        for (int d = 0; d < D; ++d) same &= out[b][i][h][d] == by_values[b][i][h][d];
  expect(same, "dropout_seed_offset gives the values' mask");
  args.dropout_seed_offset = NULL;
  expect(fa_forward(&args, NULL) == FA_OK, "dropout by the other values runs");
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < SQ; ++i)
      for (int h = 0; h < H; ++h)
        for (int d = 0; d < D; ++d) moved |= out[b][i][h][d] != by_values[b][i][h][d];
  expect(moved, "other values give another mask");
}

/* A value outside an enum's list is rejected by name (and, under UBSan, is never loaded
 * through the enum type). */
static void test_out_of_range_enums(void) {
  fa_forward_args args;
  fa_launch launch;
  int32_t bad = 7;
  make_args(&args, HK);
  memcpy(&args.k.dtype, &bad, sizeof bad);
  expect(fa_forward(&args, NULL) == FA_INVALID_ARGUMENT &&
             strncmp(fa_last_error_message(), "k: expected dtype fp32", 22) == 0,
         "an unknown dtype value is rejected by name");
  make_args(&args, HK);
  memcpy(&args.v.device_type, &bad, sizeof bad);
  expect(fa_forward(&args, NULL) == FA_INVALID_ARGUMENT &&
             strncmp(fa_last_error_message(), "v:", 2) == 0,
         "an unknown device type is rejected by name");
  make_args(&args, HK);
  fa_launch_init(&launch);
  memcpy(&launch.backend, &bad, sizeof bad);
  expect(fa_forward(&args, &launch) == FA_INVALID_ARGUMENT &&
             strncmp(fa_last_error_message(), "launch.backend:", 15) == 0,
         "an unknown backend is rejected by name");
}

/* e4m3 by its definition (the bytes below avoid the NaN patterns). */
static double e4m3_value(uint8_t x) {
  const int exponent = (x >> 3) & 15, mantissa = x & 7;
  const double magnitude =
      exponent == 0 ? ldexp(mantissa / 8.0, -6) : ldexp(1.0 + mantissa / 8.0, exponent - 7);
  return (x & 0x80) ? -magnitude : magnitude;
}

/* An FP8 forward: e4m3 q, k, v with descales [batch, nheads_k], bf16 out, against the naive
 * loop on the dequantized values. */
static void test_fp8_forward(void) {
  static uint8_t q8[B][SQ][H][D], k8[B][SK][HK][D], v8[B][SK][HK][D];
  static uint16_t out16[B][SQ][H][D];
  float descale[3][B][HK];
  uint8_t* bytes[3] = {&q8[0][0][0][0], &k8[0][0][0][0], &v8[0][0][0][0]};
  float* dequantized[3] = {&q[0][0][0][0], &k[0][0][0][0], &v[0][0][0][0]};
  const int rows[3] = {SQ * H, SK * HK, SK * HK}, heads[3] = {H, HK, HK};
  unsigned state = 777u;
  for (int t = 0; t < 3; ++t) {
    for (int b = 0; b < B; ++b) {
      for (int g = 0; g < HK; ++g) descale[t][b][g] = 0.5f + 0.25f * (float)(b * HK + g + t);
    }
    for (int i = 0; i < B * rows[t] * D; ++i) {
      state = state * 1664525u + 1013904223u;
      /* exponent field 4..8 (values 2^-3..3.75), any mantissa, either sign */
      bytes[t][i] = (uint8_t)(((state >> 9) & 0x80) | ((4 + (state >> 12) % 5) << 3) | ((state >> 16) & 7));
      const int b = i / (rows[t] * D);
      const int head = (i / D) % heads[t];
      const int g = head / (heads[t] / HK);
      dequantized[t][i] = (float)(e4m3_value(bytes[t][i]) * descale[t][b][g]);
    }
  }
  const int64_t q_shape[4] = {B, SQ, H, D}, kv_shape[4] = {B, SK, HK, D};
  const int64_t lse_shape[3] = {B, H, SQ}, descale_shape[2] = {B, HK};
  fa_forward_args args;
  fa_forward_args_init(&args);
  args.q = fa_make_tensor(q8, FA_F8E4M3, 4, q_shape);
  args.k = fa_make_tensor(k8, FA_F8E4M3, 4, kv_shape);
  args.v = fa_make_tensor(v8, FA_F8E4M3, 4, kv_shape);
  args.out = fa_make_tensor(out16, FA_BF16, 4, q_shape);
  args.lse = fa_make_tensor(lse, FA_F32, 3, lse_shape);
  args.descale.q = fa_make_tensor(descale[0], FA_F32, 2, descale_shape);
  args.descale.k = fa_make_tensor(descale[1], FA_F32, 2, descale_shape);
  args.descale.v = fa_make_tensor(descale[2], FA_F32, 2, descale_shape);
  expect(fa_forward(&args, NULL) == FA_OK, "an e4m3 forward with descales runs");
  /* bf16 out as float: its bits are the top half of the float's. */
  for (int i = 0; i < B * SQ * H * D; ++i) {
    const uint32_t bits = (uint32_t)(&out16[0][0][0][0])[i] << 16;
    memcpy(&(&out[0][0][0][0])[i], &bits, sizeof bits);
  }
  expect(naive_error() < 2e-2, "the e4m3 forward matches the naive loop on x * descale");
  args.out = fa_make_tensor(out, FA_F32, 4, q_shape);
  expect(fa_forward(&args, NULL) == FA_INVALID_ARGUMENT &&
             strncmp(fa_last_error_message(), "out: expected dtype bf16 or fp16", 32) == 0,
         "an fp32 out for e4m3 inputs is rejected by name");
  fill_inputs(); /* the other tests' fp32 inputs */
}

int main(void) {
  fill_inputs();
  test_forward_matches_naive(FA_BACKEND_REFERENCE, "reference");
  test_forward_matches_naive(FA_BACKEND_CPU, "cpu");
  test_error_names_the_argument();
  test_defaults_and_queries();
  test_zero_scale_is_literal();
  test_workspace_allocator();
  test_out_of_range_enums();
  test_fp8_forward();
  test_dropout_seed_offset();
  printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
