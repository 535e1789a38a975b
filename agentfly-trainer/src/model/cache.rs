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

    /// Puts `n` zero positions in front of every row (the caller masks them): lets rows
    /// that were prefilled to a shorter length join a longer batch.
    pub fn left_pad(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        for (k, v) in self.layers.iter_mut().flatten() {
            let [batch, heads, _, dim] = k.dims();
            let zeros = Tensor::zeros([batch, heads, n, dim], &k.device());
            *k = Tensor::cat(vec![zeros.clone(), k.clone()], 2);
            *v = Tensor::cat(vec![zeros, v.clone()], 2);
        }
    }

    /// Appends the rows of `other`, which must cache as many positions.
    pub fn append_rows(&mut self, other: KvCache) {
        for (mine, theirs) in self.layers.iter_mut().zip(other.layers) {
            *mine = match (mine.take(), theirs) {
                (Some((k, v)), Some((ok, ov))) => {
                    Some((Tensor::cat(vec![k, ok], 0), Tensor::cat(vec![v, ov], 0)))
                }
                (mine, theirs) => mine.or(theirs),
            };
        }
    }

    /// Every layer's keys and values through `f`.
    fn map(&self, f: impl Fn(&Tensor<4>) -> Tensor<4>) -> KvCache {
        KvCache {
            layers: self
                .layers
                .iter()
                .map(|l| l.as_ref().map(|(k, v)| (f(k), f(v))))
                .collect(),
        }
    }

    /// The positions `start..start + len` of every row.
    pub fn positions(&self, start: usize, len: usize) -> KvCache {
        self.map(|t| t.clone().narrow(2, start, len))
    }

    /// Row `row` alone, positions `start..start + len`, copied out (a view would keep the
    /// whole batch's buffers alive).
    pub fn row(&self, row: usize, start: usize, len: usize) -> KvCache {
        self.map(|t| {
            let index = Tensor::<1, burn::tensor::Int>::from_data(
                burn::tensor::TensorData::new(vec![row as i64], [1]),
                &t.device(),
            );
            t.clone().select(0, index).narrow(2, start, len)
        })
    }
}
