//! The key/value cache of incremental decoding: per layer, the keys and values of every
//! position seen so far, `[batch, kv_heads, len, head_dim]`.

use burn::tensor::Tensor;

/// Keys and values of all layers for a batch of sequences.
#[derive(Debug, Clone, Default)]
pub struct KvCache {
    layers: Vec<Option<(Tensor<4>, Tensor<4>)>>,
}

impl KvCache {
    /// An empty cache for `layers` layers.
    pub fn new(layers: usize) -> Self {
        Self {
            layers: vec![None; layers],
        }
    }

    /// Positions cached so far.
    pub fn len(&self) -> usize {
        self.layers
            .first()
            .and_then(|l| l.as_ref())
            .map_or(0, |(k, _)| k.dims()[2])
    }

    /// Nothing cached yet?
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends this step's keys and values of `layer`; returns all of them.
    pub(crate) fn append(
        &mut self,
        layer: usize,
        k: Tensor<4>,
        v: Tensor<4>,
    ) -> (Tensor<4>, Tensor<4>) {
        let (k, v) = match self.layers[layer].take() {
            Some((pk, pv)) => (Tensor::cat(vec![pk, k], 2), Tensor::cat(vec![pv, v], 2)),
            None => (k, v),
        };
        self.layers[layer] = Some((k.clone(), v.clone()));
        (k, v)
    }

    /// Keeps the batch rows in `rows`, in that order: a row left out is dropped (its
    /// sequence finished), a row named twice is copied (prompts shared by several sequences).
    pub fn select_rows(&mut self, rows: burn::tensor::Tensor<1, burn::tensor::Int>) {
        for (k, v) in self.layers.iter_mut().flatten() {
            *k = k.clone().select(0, rows.clone());
            *v = v.clone().select(0, rows.clone());
        }
    }
}
