//! llama.cpp's tensor names and layouts → Hugging Face's.

use crate::model::ModelConfig;

/// The Hugging Face name of a llama.cpp tensor name.
pub(super) fn hf_name(name: &str) -> Option<String> {
    let fixed = match name {
        "token_embd.weight" => Some("model.embed_tokens.weight"),
        "output_norm.weight" => Some("model.norm.weight"),
        "output.weight" => Some("lm_head.weight"),
        _ => None,
    };
    if let Some(f) = fixed {
        return Some(f.to_string());
    }
    let rest = name.strip_prefix("blk.")?;
    let (layer, part) = rest.split_once('.')?;
    let mapped = match part {
        "attn_norm.weight" => "input_layernorm.weight",
        "ffn_norm.weight" => "post_attention_layernorm.weight",
        "attn_q.weight" => "self_attn.q_proj.weight",
        "attn_k.weight" => "self_attn.k_proj.weight",
        "attn_v.weight" => "self_attn.v_proj.weight",
        "attn_output.weight" => "self_attn.o_proj.weight",
        "attn_q.bias" => "self_attn.q_proj.bias",
        "attn_k.bias" => "self_attn.k_proj.bias",
        "attn_v.bias" => "self_attn.v_proj.bias",
        "ffn_gate.weight" => "mlp.gate_proj.weight",
        "ffn_up.weight" => "mlp.up_proj.weight",
        "ffn_down.weight" => "mlp.down_proj.weight",
        _ => return None,
    };
    Some(format!("model.layers.{layer}.{mapped}"))
}

/// Moves the rows of each of `heads` heads between Hugging Face's rotate-half order
/// (`[2, half]`) and llama.cpp's interleaved rotary pairs (`[half, 2]`): to llama.cpp's
/// when `to_llama`, back otherwise (transformers' `reverse_permute_weights`).
fn reorder(data: &mut [f32], shape: &[usize], heads: usize, to_llama: bool) {
    let (rows, cols) = (shape[0], shape[1]);
    let half = rows / heads / 2;
    let src = data.to_vec();
    for h in 0..heads {
        for i in 0..half {
            for two in 0..2 {
                let hf = (h * 2 + two) * half + i;
                let llama = (h * half + i) * 2 + two;
                let (from, to) = if to_llama { (hf, llama) } else { (llama, hf) };
                data[to * cols..(to + 1) * cols]
                    .copy_from_slice(&src[from * cols..(from + 1) * cols]);
            }
        }
    }
}

/// The heads whose rows llama.cpp's llama architecture interleaves in Hugging Face tensor
/// `hf`: the query heads for `q_proj.weight`, the key/value heads for `k_proj.weight`;
/// `None` for every other tensor.
pub(super) fn permuted_heads(hf: &str, config: &ModelConfig) -> Option<usize> {
    if hf.ends_with("q_proj.weight") {
        Some(config.num_attention_heads)
    } else if hf.ends_with("k_proj.weight") {
        Some(config.kv_heads())
    } else {
        None
    }
}

/// Applies llama.cpp's q/k permutation (for writing a GGUF).
pub(super) fn permute(data: &mut [f32], shape: &[usize], heads: usize) {
    reorder(data, shape, heads, true);
}

/// Undoes llama.cpp's q/k permutation (for reading a GGUF).
pub(super) fn unpermute(data: &mut [f32], shape: &[usize], heads: usize) {
    reorder(data, shape, heads, false);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpermute_inverts_llama_cpp_permute() {
        // llama.cpp: w.reshape(heads, 2, half, cols).swapaxes(1, 2)
        let (heads, half, cols) = (2, 3, 2);
        let rows = heads * 2 * half;
        let hf: Vec<f32> = (0..rows * cols).map(|x| x as f32).collect();
        let mut permuted = vec![0.0; hf.len()];
        for h in 0..heads {
            for two in 0..2 {
                for i in 0..half {
                    let from = (h * 2 + two) * half + i;
                    let to = (h * half + i) * 2 + two;
                    permuted[to * cols..(to + 1) * cols]
                        .copy_from_slice(&hf[from * cols..(from + 1) * cols]);
                }
            }
        }
        let mut again = hf.clone();
        permute(&mut again, &[rows, cols], heads);
        assert_eq!(again, permuted);
        unpermute(&mut permuted, &[rows, cols], heads);
        assert_eq!(permuted, hf);
    }
}
