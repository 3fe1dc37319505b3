// forward and backward: q, k, v, out, lse (+ dout, dq, dk, dv), dense or varlen.
#include "api/validate_parts.hpp"

namespace flashattn::api {
namespace {

const char* layout_of_q(bool varlen) {
  return varlen ? "[total_q, nheads, head_dim] (varlen)"
                : "[batch, seqlen_q, nheads, head_dim] (pass varlen.cu_seqlens_q for packed rank-3 "
                  "input)";
}
const char* layout_of_k(bool varlen) {
  return varlen ? "[total_k, nheads_k, head_dim] (varlen)"
                : "[batch, seqlen_k, nheads_k, head_dim]";
}

// q, k and v: present, sound and of q's dtype, with the layout's rank; read their sizes.
Status read_sizes(const Tensor& q, const Tensor& k, const Tensor& v, const VarlenLayout& varlen,
                  Sizes* s) {
  s->varlen = varlen.enabled();
  const int rank = s->varlen ? 3 : 4;
  FA_RETURN_IF_ERROR(expect_present(q, "q", layout_of_q(s->varlen)));
  FA_RETURN_IF_ERROR(expect_rank(q, "q", rank, layout_of_q(s->varlen)));
  FA_RETURN_IF_ERROR(check_storage(q, "q"));
  if (q.dtype != DType::kF8E4M3) FA_RETURN_IF_ERROR(expect_float_dtype(q, "q"));
  const struct {
    const Tensor& tensor;
    const char* name;
  } keys[] = {{k, "k"}, {v, "v"}};
  for (const auto& key : keys) {
    FA_RETURN_IF_ERROR(expect_present(key.tensor, key.name, layout_of_k(s->varlen)));
    FA_RETURN_IF_ERROR(expect_rank(key.tensor, key.name, rank, layout_of_k(s->varlen)));
    FA_RETURN_IF_ERROR(check_storage(key.tensor, key.name));
    FA_RETURN_IF_ERROR(expect_dtype(key.tensor, key.name, q.dtype));
  }
  if (s->varlen) {
    FA_RETURN_IF_ERROR(check_varlen_structure(varlen, &s->batch));
    s->seqlen_q = varlen.max_seqlen_q;
    s->seqlen_k = varlen.max_seqlen_k;
  } else {
    FA_RETURN_IF_ERROR(check_dense_has_no_varlen(varlen));
    s->batch = q.shape[0];
    s->seqlen_q = q.shape[1];
    s->seqlen_k = k.shape[1];
  }
  s->rows_q = q.shape[rank - 3];
  s->rows_k = k.shape[rank - 3];
  s->nheads = q.shape[rank - 2];
  s->nheads_k = k.shape[rank - 2];
  s->head_dim = q.shape[rank - 1];
  s->head_dim_v = v.shape[rank - 1];
  FA_RETURN_IF_ERROR(check_heads(s->nheads, s->nheads_k, "k"));
  FA_RETURN_IF_ERROR(check_head_dims(s->head_dim, s->head_dim_v, "v"));
  FA_RETURN_IF_ERROR(check_total_q(*s));
  FA_RETURN_IF_ERROR(expect_shape(q, "q", s->q()));
  FA_RETURN_IF_ERROR(expect_shape(k, "k", s->k()));
  return expect_shape(v, "v", s->v());
}

// Everything forward and backward share: sizes, out, lse, options.
Status check_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                       const Tensor& lse, bool lse_required, const VarlenLayout& varlen,
                       const AttentionOptions& options, Sizes* s) {
  FA_RETURN_IF_ERROR(read_sizes(q, k, v, varlen, s));
  DType out_dtype = q.dtype;
  if (q.dtype == DType::kF8E4M3) {
    FA_RETURN_IF_ERROR(expect_present(out, "out", "[..., nheads, head_dim_v] in bf16 or fp16"));
    FA_RETURN_IF_ERROR(expect_fp8_output_dtype(out, "out"));
    out_dtype = out.dtype;
  }
  FA_RETURN_IF_ERROR(expect_tensor(out, "out", out_dtype, s->out()));
  if (lse_required) {
    FA_RETURN_IF_ERROR(expect_tensor(lse, "lse", DType::kF32, s->lse()));
  } else {
    FA_RETURN_IF_ERROR(expect_optional_tensor(lse, "lse", DType::kF32, s->lse()));
  }
  return check_options(options, *s);
}

std::vector<NamedTensor> attention_tensors(const Tensor& q, const Tensor& k, const Tensor& v,
                                           const Tensor& out, const Tensor& lse,
                                           const VarlenLayout& varlen,
                                           const AttentionOptions& options) {
  return {{"q", &q},
          {"k", &k},
          {"v", &v},
          {"out", &out},
          {"lse", &lse},
          {"varlen.cu_seqlens_q", &varlen.cu_seqlens_q},
          {"varlen.cu_seqlens_k", &varlen.cu_seqlens_k},
          {"varlen.seqused_k", &varlen.seqused_k},
          {"options.alibi_slopes", &options.alibi_slopes}};
}

// After placement: contents of host tensors, then what the backend can run (an e4m3 forward
// reaches the CUDA plan, which runs it on Hopper and says why not elsewhere).
Status check_contents_and_support(const Tensor& q, const VarlenLayout& varlen, const Sizes& s,
                                  const Target& target) {
  if (s.varlen) FA_RETURN_IF_ERROR(check_varlen_contents(varlen, s));
  return check_backend_support(q.dtype, s, target, "v");
}

void fill_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                    const Tensor& lse, const VarlenLayout& varlen, const AttentionOptions& options,
                    const Sizes& s, core::AttentionParams* p) {
  fill_common(q, out, lse, s, p);
  p->k = operand_of(k);
  p->v = operand_of(v);
  if (s.varlen) {
    p->cu_seqlens_q = static_cast<const int32_t*>(varlen.cu_seqlens_q.data);
    p->cu_seqlens_k = static_cast<const int32_t*>(varlen.cu_seqlens_k.data);
    p->seqused_k = static_cast<const int32_t*>(varlen.seqused_k.data);
  }
  fill_options(options, s, p);
}

}  // namespace

Status validate_forward(const ForwardArgs& a, const Target& target, core::AttentionParams* params) {
  Sizes s;
  FA_RETURN_IF_ERROR(check_attention(a.q, a.k, a.v, a.out, a.lse, false, a.varlen, a.options, &s));
  const bool fp8 = a.q.dtype == DType::kF8E4M3;
  if (fp8 && a.options.dropout_p != 0.f) {
    return invalid("options.dropout_p", "0 with e4m3 inputs (FP8 attention is for inference)",
                   to_text(a.options.dropout_p));
  }
  FA_RETURN_IF_ERROR(check_descales(a.descale, fp8, fp8, s));
  std::vector<NamedTensor> tensors =
      attention_tensors(a.q, a.k, a.v, a.out, a.lse, a.varlen, a.options);
  tensors.insert(tensors.end(), {{"descale.q", &a.descale.q},
                                 {"descale.k", &a.descale.k},
                                 {"descale.v", &a.descale.v}});
  FA_RETURN_IF_ERROR(check_placement(tensors, target));
  FA_RETURN_IF_ERROR(check_pointer_placement("options.dropout_seed_offset",
                                             a.options.dropout_seed_offset, target));
  FA_RETURN_IF_ERROR(check_contents_and_support(a.q, a.varlen, s, target));
  *params = core::AttentionParams{};
  fill_attention(a.q, a.k, a.v, a.out, a.lse, a.varlen, a.options, s, params);
  fill_descales(a.descale, fp8, fp8, params);
  return Status::Ok();
}

Status validate_backward(const BackwardArgs& a, const Target& target,
                         core::BackwardParams* params) {
  if (a.q.dtype == DType::kF8E4M3) {
    return unsupported("q",
                       "e4m3 (FP8) attention has no backward: FP8 is for inference, as in "
                       "FlashAttention-3; train in bf16 or fp16");
  }
  Sizes s;
  FA_RETURN_IF_ERROR(check_attention(a.q, a.k, a.v, a.out, a.lse, true, a.varlen, a.options, &s));
  FA_RETURN_IF_ERROR(expect_tensor(a.dout, "dout", a.q.dtype, s.out()));
  FA_RETURN_IF_ERROR(expect_tensor(a.dq, "dq", a.q.dtype, s.q()));
  FA_RETURN_IF_ERROR(expect_tensor(a.dk, "dk", a.q.dtype, s.k()));
  FA_RETURN_IF_ERROR(expect_tensor(a.dv, "dv", a.q.dtype, s.v()));
  std::vector<NamedTensor> tensors =
      attention_tensors(a.q, a.k, a.v, a.out, a.lse, a.varlen, a.options);
  tensors.insert(tensors.end(), {{"dout", &a.dout}, {"dq", &a.dq}, {"dk", &a.dk}, {"dv", &a.dv}});
  FA_RETURN_IF_ERROR(check_placement(tensors, target));
  FA_RETURN_IF_ERROR(check_pointer_placement("options.dropout_seed_offset",
                                             a.options.dropout_seed_offset, target));
  FA_RETURN_IF_ERROR(check_contents_and_support(a.q, a.varlen, s, target));
  *params = core::BackwardParams{};
  fill_attention(a.q, a.k, a.v, a.out, a.lse, a.varlen, a.options, s, params);
  params->dout = operand_of(a.dout);
  params->dq = operand_of(a.dq);
  params->dk = operand_of(a.dk);
  params->dv = operand_of(a.dv);
  params->deterministic = a.deterministic;
  return Status::Ok();
}

}  // namespace flashattn::api
