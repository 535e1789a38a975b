//! The key/value cache of incremental decoding: per layer, the keys and values of every
//! position seen so far, `[batch, kv_heads, positions, head_dim]`.
//!
//! Each layer's buffers keep [`SPARE`] positions of room beyond what is cached: a decode step
//! writes its keys and values in place (Burn's `slice_assign` on a uniquely held buffer)
//! instead of concatenating — and so copying — the whole cache, and attention reads the whole
//! buffer, its unused positions masked, so it needs no contiguous copy of a narrowed view.
//! The buffers grow by [`SPARE`] positions when full.

use burn::tensor::{Int, Tensor};

/// Positions of room a layer's buffers keep beyond what is cached.
pub const SPARE: usize = 64;

/// Keys and values of all layers for a batch of sequences.
#[derive(Debug, Clone, Default)]
pub struct KvCache {
    /// Per layer: key and value buffers, `[batch, kv_heads, capacity, head_dim]`.
    layers: Vec<Option<(Tensor<4>, Tensor<4>)>>,
    /// Positions cached in every layer (the first layer's count while a pass is under way).
    lens: Vec<usize>,
}

/// `t` `[batch, heads, len, dim]` followed by `extra` zero positions.
fn with_room(t: Tensor<4>, extra: usize) -> Tensor<4> {
    let [batch, heads, _, dim] = t.dims();
    let zeros = Tensor::zeros([batch, heads, extra, dim], &t.device());
    Tensor::cat(vec![t, zeros], 2)
}

impl KvCache {
    /// An empty cache for `layers` layers.
    pub fn new(layers: usize) -> Self {
        Self {
            layers: vec![None; layers],
            lens: vec![0; layers],
        }
    }

    /// Positions cached so far.
    pub fn len(&self) -> usize {
        self.lens.first().copied().unwrap_or(0)
    }

    /// Nothing cached yet?
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends this step's keys and values of `layer`; returns the layer's whole buffers
    /// (positions past the returned count are unused and must be masked) and the count of
    /// valid positions.
    pub(crate) fn append(
        &mut self,
        layer: usize,
        k: Tensor<4>,
        v: Tensor<4>,
    ) -> (Tensor<4>, Tensor<4>, usize) {
        let [batch, heads, n, dim] = k.dims();
        let len = self.lens[layer];
        let (k, v) = match self.layers[layer].take() {
            Some((pk, pv)) if len + n <= pk.dims()[2] => {
                let at = [0..batch, 0..heads, len..len + n, 0..dim];
                (pk.slice_assign(at.clone(), k), pv.slice_assign(at, v))
            }
            Some((pk, pv)) => {
                let grow = |p: Tensor<4>, new: Tensor<4>| {
                    with_room(Tensor::cat(vec![p.narrow(2, 0, len), new], 2), SPARE)
                };
                (grow(pk, k), grow(pv, v))
            }
            None => (with_room(k, SPARE), with_room(v, SPARE)),
        };
        self.lens[layer] = len + n;
        self.layers[layer] = Some((k.clone(), v.clone()));
        (k, v, len + n)
    }

    /// Every layer's buffers through `f` (which sees only the valid positions); the
    /// results become the new buffers, without spare room.
    fn map_valid(&mut self, f: impl Fn(Tensor<4>) -> Tensor<4>) {
        for (layer, len) in self.layers.iter_mut().zip(self.lens.iter_mut()) {
            if let Some((k, v)) = layer.take() {
                let (k, v) = (f(k.narrow(2, 0, *len)), f(v.narrow(2, 0, *len)));
                *len = k.dims()[2];
                *layer = Some((k, v));
            }
        }
    }

    /// Keeps the batch rows in `rows`, in that order: a row left out is dropped (its
    /// sequence finished), a row named twice is copied (prompts shared by several sequences).
    pub fn select_rows(&mut self, rows: Tensor<1, Int>) {
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
        self.map_valid(|t| {
            let [batch, heads, _, dim] = t.dims();
            let zeros = Tensor::zeros([batch, heads, n, dim], &t.device());
            Tensor::cat(vec![zeros, t], 2)
        });
    }

    /// Appends the rows of `other`, which must cache as many positions.
    pub fn append_rows(&mut self, mut other: KvCache) {
        self.map_valid(|t| t);
        other.map_valid(|t| t);
        if self.lens.is_empty() {
            self.lens = other.lens.clone();
        }
        for (mine, theirs) in self.layers.iter_mut().zip(other.layers) {
            *mine = match (mine.take(), theirs) {
                (Some((k, v)), Some((ok, ov))) => {
                    Some((Tensor::cat(vec![k, ok], 0), Tensor::cat(vec![v, ov], 0)))
                }
                (mine, theirs) => mine.or(theirs),
            };
        }
    }

    /// A cache of the positions `start..start + len` of every row, rows picked by `rows`
    /// (all of them when `None`), copied out of the buffers.
    fn copy(&self, rows: Option<usize>, start: usize, len: usize) -> KvCache {
        let mut out = self.clone();
        out.map_valid(|t| {
            let t = match rows {
                Some(row) => {
                    let index = Tensor::<1, Int>::from_data(
                        burn::tensor::TensorData::new(vec![row as i64], [1]),
                        &t.device(),
                    );
                    t.select(0, index)
                }
                None => t,
            };
            t.narrow(2, start, len)
        });
        out
    }

    /// The positions `start..start + len` of every row.
    pub fn positions(&self, start: usize, len: usize) -> KvCache {
        self.copy(None, start, len)
    }

    /// Row `row` alone, positions `start..start + len`, copied out (a view would keep the
    /// whole batch's buffers alive).
    pub fn row(&self, row: usize, start: usize, len: usize) -> KvCache {
        self.copy(Some(row), start, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::{Device, Distribution};

    #[test]
    fn appends_in_place_grow_past_the_spare_room_and_keep_every_position() {
        let device = Device::flex();
        let mut cache = KvCache::new(1);
        let normal = Distribution::Normal(0.0, 1.0);
        let first = Tensor::<4>::random([2, 3, 5, 4], normal, &device);
        let mut all = vec![first.clone()];
        cache.append(0, first.clone(), first);
        // Enough single steps to outgrow the first buffer twice.
        for _ in 0..2 * SPARE + 3 {
            let step = Tensor::<4>::random([2, 3, 1, 4], normal, &device);
            all.push(step.clone());
            let (k, _, valid) = cache.append(0, step.clone(), step);
            assert!(k.dims()[2] >= valid);
        }
        let want = Tensor::cat(all, 2);
        assert_eq!(cache.len(), 5 + 2 * SPARE + 3);
        let got = cache.positions(0, cache.len());
        let (k, _) = got.layers[0].clone().unwrap();
        assert_eq!(k.dims(), want.dims());
        let diff = (k - want).abs().max().into_scalar::<f32>();
        assert_eq!(diff, 0.0);
    }
}
