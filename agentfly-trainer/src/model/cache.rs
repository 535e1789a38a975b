//! The key/value cache of incremental decoding: per layer, the keys and values of every
//! position seen so far, `[rows, kv_heads, positions, head_dim]`.
//!
//! Each layer's buffers keep spare positions beyond what is cached: a pass writes its keys
//! and values in place (Burn's `slice_assign` on a uniquely held buffer) instead of
//! concatenating — and so copying — the whole cache, and attention reads the whole
//! buffer, its unused positions masked, so it needs no contiguous copy of a narrowed view.
//! The buffers grow (one copy) when full.
//!
//! A cache is used in one of two ways:
//! - **aligned** (prefill, and the contexts the prefix cache keeps): every row has cached
//!   the same count of positions ([`len`](KvCache::len)), shorter rows left-padded, and a
//!   pass appends after them;
//! - **ragged** (the decode batch, and the contexts prefilled together after their cached
//!   prefixes): each row is a slot holding its own sequence from position 0, and a pass
//!   writes each row's tokens from its own position on ([`write_at`](KvCache::write_at)).
//!   A sequence joins by copying its own cache into a free slot
//!   ([`write_row`](KvCache::write_row)) and leaves by freeing it, so neither copies the
//!   other rows; nor does a longer sequence joining move anyone.

use burn::backend::flex::{Flex, FlexTensor};
use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, Dispatch, backend_extension};
use burn::tensor::{Int, Tensor};

/// Positions of room a layer's buffers keep beyond what is cached, at least.
pub const SPARE: usize = 64;

/// Keys and values of all layers for a batch of sequences.
#[derive(Debug, Clone, Default)]
pub struct KvCache {
    /// Per layer: key and value buffers, `[rows, kv_heads, capacity, head_dim]`.
    layers: Vec<Option<(Tensor<4>, Tensor<4>)>>,
    /// Aligned: positions cached in every layer (the first layer's count while a pass is
    /// under way).
    lens: Vec<usize>,
    /// Ragged: where the next pass writes each row's first position.
    write_at: Option<Vec<usize>>,
}

/// Room for `needed` positions and some to spare: an eighth more, at least [`SPARE`] (the
/// ragged batch's attention reads the spare positions too).
fn room_for(needed: usize) -> usize {
    needed + (needed / 8).max(SPARE)
}

/// The first `len` positions of `t` `[rows, heads, _, dim]` in a new buffer of `capacity`
/// positions, the rest zero.
fn regrow(t: Tensor<4>, len: usize, capacity: usize) -> Tensor<4> {
    let [rows, heads, _, dim] = t.dims();
    let zeros = Tensor::zeros([rows, heads, capacity - len, dim], &t.device());
    Tensor::cat(vec![t.narrow(2, 0, len), zeros], 2)
}

/// `buffer` `[rows, heads, capacity, d]` with each row `r`'s `new` `[rows, heads, n, d]`
/// written at positions `at[r] .. at[r] + n`: in place where the buffer is held only here
/// (a decode step's cache), else into a copy. On the flex (CPU) device only.
fn write_rows(buffer: Tensor<4>, new: Tensor<4>, at: Vec<usize>) -> Tensor<4> {
    Tensor::from_dispatch(<Dispatch as RaggedWrite>::ragged_write(
        buffer.into_dispatch(),
        new.into_dispatch(),
        at,
    ))
}

/// The extension behind [`write_rows`].
#[backend_extension(Flex)]
trait RaggedWrite: Backend {
    /// See [`write_rows`].
    fn ragged_write(
        buffer: FloatTensor<Self>,
        new: FloatTensor<Self>,
        at: Vec<usize>,
    ) -> FloatTensor<Self>;
}

impl RaggedWrite for Flex {
    fn ragged_write(buffer: FlexTensor, new: FlexTensor, at: Vec<usize>) -> FlexTensor {
        let mut buffer = super::vector::contiguous(buffer);
        let new = super::vector::contiguous(new);
        let dims = buffer.layout().shape().to_vec();
        let [rows, heads, capacity, d] = dims[..] else {
            panic!("a [rows, heads, capacity, d] buffer, got {dims:?}")
        };
        let n = new.layout().shape()[2];
        assert_eq!(
            new.layout().shape().to_vec(),
            [rows, heads, n, d],
            "new keys or values for every row of {dims:?}"
        );
        assert_eq!(at.len(), rows, "a position for every row");
        assert!(
            at.iter().all(|&p| p + n <= capacity),
            "room for every row's pass"
        );
        let from = new.storage::<f32>();
        let to = buffer.storage_mut::<f32>();
        for (r, &p) in at.iter().enumerate() {
            for h in 0..heads {
                let src = (r * heads + h) * n * d;
                let dst = ((r * heads + h) * capacity + p) * d;
                to[dst..dst + n * d].copy_from_slice(&from[src..src + n * d]);
            }
        }
        buffer
    }
}

impl KvCache {
    /// An empty cache for `layers` layers.
    pub fn new(layers: usize) -> Self {
        Self {
            layers: vec![None; layers],
            lens: vec![0; layers],
            write_at: None,
        }
    }

    /// Aligned: positions cached so far.
    pub fn len(&self) -> usize {
        self.lens.first().copied().unwrap_or(0)
    }

    /// Nothing cached yet?
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Positions the buffers hold, used or not.
    pub fn capacity(&self) -> usize {
        self.first().map_or(0, |k| k.dims()[2])
    }

    /// The device of the buffers (none before the first pass).
    pub fn device(&self) -> Option<burn::tensor::Device> {
        self.first().map(Tensor::device)
    }

    fn first(&self) -> Option<&Tensor<4>> {
        self.layers.iter().flatten().map(|(k, _)| k).next()
    }

    /// Ragged: the next pass writes row `r`'s positions from `positions[r]` on (all of
    /// them below the [`capacity`](Self::capacity); see [`reserve`](Self::reserve)), and
    /// attention reads every position of the buffers, the caller masking those each row
    /// must not see.
    pub fn write_at(&mut self, positions: Vec<usize>) {
        self.write_at = Some(positions);
    }

    /// Ragged: a cache whose row `i` holds the first `len` positions of the `i`-th
    /// (aligned, one-row) cache of `rows`, with room for at least `positions` positions
    /// (the rest zero). Each row is copied once.
    pub fn stack_rows(rows: impl IntoIterator<Item = (KvCache, usize)>, positions: usize) -> Self {
        let rows: Vec<(KvCache, usize)> = rows.into_iter().collect();
        let layers = rows.first().map_or(0, |(c, _)| c.layers.len());
        let capacity = room_for(positions);
        let mut stacked = Self::new(layers);
        for layer in 0..layers {
            let mut buffers: Option<(Tensor<4>, Tensor<4>)> = None;
            for (r, (row, len)) in rows.iter().enumerate() {
                let (k, v) = row.layers[layer]
                    .as_ref()
                    .expect("a cached prefix has every layer");
                let [_, heads, _, dim] = k.dims();
                // Two buffers, each written in place (one zero tensor shared by both would
                // be copied at the first write).
                let (sk, sv) = buffers.take().unwrap_or_else(|| {
                    let zeros = || Tensor::zeros([rows.len(), heads, capacity, dim], &k.device());
                    (zeros(), zeros())
                });
                let to = [r..r + 1, 0..heads, 0..*len, 0..dim];
                buffers = Some((
                    sk.slice_assign(to.clone(), k.clone().narrow(2, 0, *len)),
                    sv.slice_assign(to, v.clone().narrow(2, 0, *len)),
                ));
            }
            stacked.layers[layer] = buffers;
        }
        stacked
    }

    /// Grows every layer's buffers to hold at least `positions` positions.
    pub fn reserve(&mut self, positions: usize) {
        if positions <= self.capacity() {
            return;
        }
        let capacity = room_for(positions);
        for (k, v) in self.layers.iter_mut().flatten() {
            let len = k.dims()[2];
            *k = regrow(k.clone(), len, capacity);
            *v = regrow(v.clone(), len, capacity);
        }
    }

    /// Appends this pass's keys and values of `layer`; returns the layer's whole buffers
    /// (positions past the returned count are unused and must be masked) and the count of
    /// valid positions (ragged: the capacity, the caller masking per row).
    pub(crate) fn append(
        &mut self,
        layer: usize,
        k: Tensor<4>,
        v: Tensor<4>,
    ) -> (Tensor<4>, Tensor<4>, usize) {
        let [batch, heads, n, dim] = k.dims();
        if let Some(at) = &self.write_at {
            let (mut pk, mut pv) = self.layers[layer]
                .take()
                .expect("a ragged pass writes into existing buffers");
            let capacity = pk.dims()[2];
            assert_eq!((batch, at.len()), (pk.dims()[0], batch));
            assert!(
                at.iter().all(|&p| p + n <= capacity),
                "room for every row's pass"
            );
            if super::decode_attention::all_served(&[&pk, &pv, &k, &v]) {
                // One operation a buffer, where a `slice_assign` a row took 2 × rows
                // operations a layer (1 920 a decode step at batch 32).
                pk = write_rows(pk, k, at.clone());
                pv = write_rows(pv, v, at.clone());
            } else {
                for (r, &p) in at.iter().enumerate() {
                    let to = [r..r + 1, 0..heads, p..p + n, 0..dim];
                    pk = pk.slice_assign(to.clone(), k.clone().narrow(0, r, 1));
                    pv = pv.slice_assign(to, v.clone().narrow(0, r, 1));
                }
            }
            self.layers[layer] = Some((pk.clone(), pv.clone()));
            if layer + 1 == self.layers.len() {
                self.write_at = None;
            }
            return (pk, pv, capacity);
        }
        let len = self.lens[layer];
        let (k, v) = match self.layers[layer].take() {
            Some((pk, pv)) if len + n <= pk.dims()[2] => {
                let at = [0..batch, 0..heads, len..len + n, 0..dim];
                (pk.slice_assign(at.clone(), k), pv.slice_assign(at, v))
            }
            Some((pk, pv)) => {
                let grow = |p: Tensor<4>, new: Tensor<4>| {
                    let p = regrow(p, len, room_for(len + n));
                    p.slice_assign([0..batch, 0..heads, len..len + n, 0..dim], new)
                };
                (grow(pk, k), grow(pv, v))
            }
            None => (regrow(k, n, room_for(n)), regrow(v, n, room_for(n))),
        };
        self.lens[layer] = len + n;
        self.layers[layer] = Some((k.clone(), v.clone()));
        (k, v, len + n)
    }

    /// Keeps the rows in `rows`, in that order: a row left out is dropped, a row named
    /// twice is copied (prompts shared by several sequences). Copies every kept row.
    pub fn select_rows(&mut self, rows: Tensor<1, Int>) {
        for (k, v) in self.layers.iter_mut().flatten() {
            *k = k.clone().select(0, rows.clone());
            *v = v.clone().select(0, rows.clone());
        }
    }

    /// Adds `n` zeroed rows (free slots) at the end: one copy of the cache.
    pub fn add_rows(&mut self, n: usize) {
        for (k, v) in self.layers.iter_mut().flatten() {
            let [_, heads, capacity, dim] = k.dims();
            let zeros = Tensor::zeros([n, heads, capacity, dim], &k.device());
            *k = Tensor::cat(vec![k.clone(), zeros.clone()], 0);
            *v = Tensor::cat(vec![v.clone(), zeros], 0);
        }
    }

    /// Ragged: puts positions `start..start + len` of `from`'s row `row` into slot `slot`
    /// at positions `0..len`, growing the buffers if they are too short. Only that row is
    /// copied. Positions past `len` keep what the slot held before (the caller masks them).
    pub fn write_row(&mut self, slot: usize, from: &KvCache, row: usize, start: usize, len: usize) {
        self.reserve(len + 1);
        for (mine, theirs) in self.layers.iter_mut().zip(&from.layers) {
            let (Some((k, v)), Some((ok, ov))) = (mine.take(), theirs) else {
                panic!("write_row needs two caches of the same layers");
            };
            let [_, heads, _, dim] = k.dims();
            let to = [slot..slot + 1, 0..heads, 0..len, 0..dim];
            let part = |t: &Tensor<4>| t.clone().narrow(0, row, 1).narrow(2, start, len);
            *mine = Some((
                k.slice_assign(to.clone(), part(ok)),
                v.slice_assign(to, part(ov)),
            ));
        }
    }

    /// Zeroes slot `slot` in every layer: a sequence whose logits were not finite may have
    /// left NaNs there, which the next sequence in the slot would read through a masked
    /// position (a zero attention weight times NaN is NaN).
    pub fn clear_row(&mut self, slot: usize) {
        for layer in &mut self.layers {
            // Taken out, so the buffers are written in place.
            if let Some((k, v)) = layer.take() {
                let [_, heads, capacity, dim] = k.dims();
                let zeros = Tensor::<4>::zeros([1, heads, capacity, dim], &k.device());
                let to = [slot..slot + 1, 0..heads, 0..capacity, 0..dim];
                *layer = Some((
                    k.slice_assign(to.clone(), zeros.clone()),
                    v.slice_assign(to, zeros),
                ));
            }
        }
    }

    /// A cache of the positions `start..start + len` of every row, or of row `row` alone,
    /// without spare room. A row is copied out of the buffers (a view would keep the whole
    /// batch's buffers alive), and only the part asked for is read: Burn's `select` would
    /// first make a contiguous copy of all rows.
    fn copy(&self, row: Option<usize>, start: usize, len: usize) -> KvCache {
        let part = |t: &Tensor<4>| {
            let t = t.clone().narrow(2, start, len);
            match row {
                Some(row) => {
                    let [_, heads, _, dim] = t.dims();
                    let out = Tensor::zeros([1, heads, len, dim], &t.device());
                    out.slice_assign([0..1, 0..heads, 0..len, 0..dim], t.narrow(0, row, 1))
                }
                None => t,
            }
        };
        let layers = self
            .layers
            .iter()
            .map(|layer| layer.as_ref().map(|(k, v)| (part(k), part(v))))
            .collect();
        KvCache {
            layers,
            lens: vec![len; self.layers.len()],
            write_at: None,
        }
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

    #[test]
    fn a_cleared_slot_is_zero_and_the_others_keep_their_values() {
        let device = Device::flex();
        let mut cache = KvCache::new(1);
        let normal = Distribution::Normal(0.0, 1.0);
        let rows = Tensor::<4>::random([3, 2, 5, 4], normal, &device);
        cache.append(0, rows.clone(), rows.clone());
        let nan = Tensor::<4>::full([1, 2, 5, 4], f32::NAN, &device);
        let poisoned = KvCache {
            layers: vec![Some((nan.clone(), nan))],
            lens: vec![5],
            write_at: None,
        };
        cache.write_row(1, &poisoned, 0, 0, 5);
        cache.clear_row(1);
        let (k, _) = cache.layers[0].clone().unwrap();
        let slot = k.clone().narrow(0, 1, 1);
        assert_eq!(slot.abs().max().into_scalar::<f32>(), 0.0);
        for row in [0, 2] {
            let got = k.clone().narrow(0, row, 1).narrow(2, 0, 5);
            let want = rows.clone().narrow(0, row, 1);
            assert_eq!((got - want).abs().max().into_scalar::<f32>(), 0.0);
        }
    }
}
