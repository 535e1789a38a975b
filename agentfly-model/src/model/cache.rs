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
//!   other rows; nor does a longer sequence joining move anyone. The buffers keep spare
//!   rows too: a batch that is compacted ([`keep_rows`](KvCache::keep_rows), rows moved
//!   down in place) and grows again ([`add_rows`](KvCache::add_rows)) reuses them, and
//!   a pass reads only the rows in use (a view of the buffers' first rows).

use burn::backend::flex::{Flex, FlexTensor};
use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, Dispatch, backend_extension};
use burn::tensor::{Int, Tensor, TensorData};
use rayon::prelude::*;

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
    /// Ragged: the rows in use where the buffers hold more (spare rows at the end, what
    /// they hold unread); `None`: every row of the buffers.
    rows: Option<usize>,
    /// Ragged, a packed pass: how many positions of the pass's one row each row writes
    /// ([`write_packed`](KvCache::write_packed)).
    packed: Option<Vec<usize>>,
}

/// Room for `needed` positions and some to spare: an eighth more, at least [`SPARE`] (the
/// ragged batch's attention reads the spare positions too).
fn room_for(needed: usize) -> usize {
    needed + (needed / 8).max(SPARE)
}

/// Room for `needed` positions in a ragged batch whose buffers hold `held`: half again as
/// many at least, so that a batch whose contexts grow turn after turn copies its buffers
/// a few times rather than at every eighth.
fn room_to_grow(needed: usize, held: usize) -> usize {
    room_for(needed).max(held + held / 2)
}

/// The first `len` positions of `t` `[rows, heads, _, dim]` in a new buffer of `capacity`
/// positions, the rest zero.
fn regrow(t: Tensor<4>, len: usize, capacity: usize) -> Tensor<4> {
    if super::decode_attention::all_served(&[&t]) {
        // One new buffer, each element written once.
        return Tensor::from_dispatch(<Dispatch as RaggedWrite>::grow_positions(
            t.into_dispatch(),
            len,
            capacity,
        ));
    }
    let [rows, heads, _, dim] = t.dims();
    let zeros = Tensor::zeros([rows, heads, capacity - len, dim], &t.device());
    Tensor::cat(vec![t.narrow(2, 0, len), zeros], 2)
}

/// Runs `f` on every layer's buffers, the layers spread over rayon's threads: the cache's
/// copies are memory-bound (and a new buffer's first touch faults its pages in), so two
/// cores do them in about half the time, where one of them would otherwise wait.
fn each_layer(
    layers: &mut [Option<(Tensor<4>, Tensor<4>)>],
    f: impl Fn(Tensor<4>, Tensor<4>) -> (Tensor<4>, Tensor<4>) + Sync,
) {
    layers.par_iter_mut().for_each(|layer| {
        // Taken out, so the buffers can be written in place.
        if let Some((k, v)) = layer.take() {
            *layer = Some(f(k, v));
        }
    });
}

/// `buffer` `[rows, heads, capacity, d]` with each row `r`'s `new` `[at.len(), heads, n, d]`
/// written at positions `at[r] .. at[r] + n` (the buffer's rows past `at.len()` untouched):
/// in place where the buffer is held only here (a decode step's cache), else into a copy.
/// With `packed` lengths, `new` is one row `[1, heads, Σ packed, d]` holding row `r`'s
/// `packed[r]` positions after the rows' before it. On the flex (CPU) device only.
fn write_rows(
    buffer: Tensor<4>,
    new: Tensor<4>,
    at: Vec<usize>,
    packed: Option<Vec<usize>>,
) -> Tensor<4> {
    Tensor::from_dispatch(<Dispatch as RaggedWrite>::ragged_write(
        buffer.into_dispatch(),
        new.into_dispatch(),
        at,
        packed,
    ))
}

/// `buffer` `[rows, heads, capacity, d]` with its rows `kept` (ascending) moved to rows
/// `0..kept.len()`, the rows after them holding what they held: in place where the buffer is
/// held only here, else in a copy. On the flex (CPU) device only.
fn move_rows(buffer: Tensor<4>, kept: Vec<usize>) -> Tensor<4> {
    Tensor::from_dispatch(<Dispatch as RaggedWrite>::move_rows_down(
        buffer.into_dispatch(),
        kept,
    ))
}

/// The extension behind [`write_rows`] and [`move_rows`].
#[backend_extension(Flex)]
trait RaggedWrite: Backend {
    /// See [`write_rows`].
    fn ragged_write(
        buffer: FloatTensor<Self>,
        new: FloatTensor<Self>,
        at: Vec<usize>,
        packed: Option<Vec<usize>>,
    ) -> FloatTensor<Self>;

    /// See [`move_rows`].
    fn move_rows_down(buffer: FloatTensor<Self>, kept: Vec<usize>) -> FloatTensor<Self>;

    /// See [`regrow`].
    fn grow_positions(buffer: FloatTensor<Self>, len: usize, capacity: usize) -> FloatTensor<Self>;
}

impl RaggedWrite for Flex {
    fn ragged_write(
        buffer: FlexTensor,
        new: FlexTensor,
        at: Vec<usize>,
        packed: Option<Vec<usize>>,
    ) -> FlexTensor {
        let mut buffer = super::vector::contiguous(buffer);
        let new = super::vector::contiguous(new);
        let dims = buffer.layout().shape().to_vec();
        let [held, heads, capacity, d] = dims[..] else {
            panic!("a [rows, heads, capacity, d] buffer, got {dims:?}")
        };
        let (rows, n) = (at.len(), new.layout().shape()[2]);
        assert!(rows <= held, "{rows} rows written into a buffer of {held}");
        // Per row written: its row of `new`, its first position there, and how many.
        let spans: Vec<(usize, usize, usize)> = match &packed {
            None => (0..rows).map(|r| (r, 0, n)).collect(),
            Some(lens) => {
                assert_eq!(lens.len(), rows, "a length for every row written");
                assert_eq!(
                    lens.iter().sum::<usize>(),
                    n,
                    "the packed rows fill the pass"
                );
                let mut first = 0;
                lens.iter()
                    .map(|&len| {
                        first += len;
                        (0, first - len, len)
                    })
                    .collect()
            }
        };
        assert_eq!(
            new.layout().shape().to_vec(),
            [if packed.is_some() { 1 } else { rows }, heads, n, d],
            "new keys or values for every row written of {dims:?}"
        );
        assert!(
            at.iter().zip(&spans).all(|(&p, s)| p + s.2 <= capacity),
            "room for every row's pass"
        );
        let from = new.storage::<f32>();
        let to = buffer.storage_mut::<f32>();
        for (r, (&p, &(row, first, len))) in at.iter().zip(&spans).enumerate() {
            for h in 0..heads {
                let src = ((row * heads + h) * n + first) * d;
                let dst = ((r * heads + h) * capacity + p) * d;
                to[dst..dst + len * d].copy_from_slice(&from[src..src + len * d]);
            }
        }
        buffer
    }

    fn move_rows_down(buffer: FlexTensor, kept: Vec<usize>) -> FlexTensor {
        let mut buffer = super::vector::contiguous(buffer);
        let shape = buffer.layout().shape().to_vec();
        let held = shape[0];
        assert!(
            kept.windows(2).all(|w| w[0] < w[1]) && kept.last().is_none_or(|&r| r < held),
            "rows {kept:?} ascending, of {held}"
        );
        let row = shape[1..].iter().product::<usize>();
        let data = buffer.storage_mut::<f32>();
        // Ascending, so row `from` ≥ `to` has not been written over yet.
        for (to, &from) in kept.iter().enumerate() {
            if from != to {
                data.copy_within(from * row..(from + 1) * row, to * row);
            }
        }
        buffer
    }

    fn grow_positions(buffer: FlexTensor, len: usize, capacity: usize) -> FlexTensor {
        let buffer = super::vector::contiguous(buffer);
        let dims = buffer.layout().shape().to_vec();
        let [rows, heads, held, d] = dims[..] else {
            panic!("a [rows, heads, positions, d] buffer, got {dims:?}")
        };
        assert!(
            len <= held && len <= capacity,
            "{len} of {held} positions into {capacity}"
        );
        let from = buffer.storage::<f32>();
        let mut out = Vec::with_capacity(rows * heads * capacity * d);
        for line in from.chunks_exact(held * d) {
            out.extend_from_slice(&line[..len * d]);
            out.resize(out.len() + (capacity - len) * d, 0.0);
        }
        FlexTensor::from_data(TensorData::new(out, [rows, heads, capacity, d]))
    }
}

impl KvCache {
    /// An empty cache for `layers` layers.
    pub fn new(layers: usize) -> Self {
        Self {
            layers: vec![None; layers],
            lens: vec![0; layers],
            write_at: None,
            rows: None,
            packed: None,
        }
    }

    /// The rows (sequences, or slots of a ragged batch) the cache holds.
    pub fn rows(&self) -> usize {
        self.rows.unwrap_or_else(|| self.held())
    }

    /// The rows the buffers hold, spare ones included.
    fn held(&self) -> usize {
        self.first().map_or(0, |k| k.dims()[0])
    }

    /// `t` `[held, ..]` narrowed to the rows in use: a view, its rows contiguous.
    fn in_use(&self, t: Tensor<4>) -> Tensor<4> {
        match self.rows {
            Some(rows) if rows < t.dims()[0] => t.narrow(0, 0, rows),
            _ => t,
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
        self.packed = None;
    }

    /// Ragged, a packed pass ([`write_at`](Self::write_at) for a pass whose one row holds
    /// every row's new tokens one after the other, without padding): row `r` gets the
    /// pass's next `lens[r]` positions, written from `positions[r]` on. On the flex (CPU)
    /// device only.
    pub fn write_packed(&mut self, positions: Vec<usize>, lens: Vec<usize>) {
        assert_eq!(positions.len(), lens.len(), "a length for every row");
        self.write_at = Some(positions);
        self.packed = Some(lens);
    }

    /// The lengths of the packed pass under way ([`write_packed`](Self::write_packed)).
    pub fn packed(&self) -> Option<&[usize]> {
        self.packed.as_deref()
    }

    /// Ragged: a cache whose row `i` holds the first `len` positions of the `i`-th
    /// (aligned, one-row) cache of `rows`, with room for at least `positions` positions
    /// (the rest zero). Each row is copied once.
    pub fn stack_rows(rows: impl IntoIterator<Item = (KvCache, usize)>, positions: usize) -> Self {
        let rows: Vec<(KvCache, usize)> = rows.into_iter().collect();
        let layers = rows.first().map_or(0, |(c, _)| c.layers.len());
        let capacity = room_for(positions);
        let mut stacked = Self::new(layers);
        // The layers spread over rayon's threads, as in `each_layer`.
        stacked.layers = (0..layers)
            .into_par_iter()
            .map(|layer| {
                let mut buffers: Option<(Tensor<4>, Tensor<4>)> = None;
                for (r, (row, len)) in rows.iter().enumerate() {
                    let (k, v) = row.layers[layer]
                        .as_ref()
                        .expect("a cached prefix has every layer");
                    let [_, heads, _, dim] = k.dims();
                    // Two buffers, each written in place (one zero tensor shared by both
                    // would be copied at the first write).
                    let (sk, sv) = buffers.take().unwrap_or_else(|| {
                        let zeros =
                            || Tensor::zeros([rows.len(), heads, capacity, dim], &k.device());
                        (zeros(), zeros())
                    });
                    let to = [r..r + 1, 0..heads, 0..*len, 0..dim];
                    buffers = Some((
                        sk.slice_assign(to.clone(), k.clone().narrow(2, 0, *len)),
                        sv.slice_assign(to, v.clone().narrow(2, 0, *len)),
                    ));
                }
                buffers
            })
            .collect();
        stacked
    }

    /// Ragged: grows every layer's buffers to hold at least `positions` positions (half
    /// again as many as they held, at least, so growing contexts copy them a few times).
    pub fn reserve(&mut self, positions: usize) {
        if positions <= self.capacity() {
            return;
        }
        let capacity = room_to_grow(positions, self.capacity());
        each_layer(&mut self.layers, |k, v| {
            let len = k.dims()[2];
            (regrow(k, len, capacity), regrow(v, len, capacity))
        });
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
            let served = super::decode_attention::all_served(&[&pk, &pv, &k, &v]);
            assert_eq!(
                at.len(),
                self.rows.unwrap_or(pk.dims()[0]),
                "a position a row"
            );
            if self.packed.is_none() {
                assert_eq!(batch, at.len(), "a row of the pass a row of the cache");
                assert!(
                    at.iter().all(|&p| p + n <= capacity),
                    "room for every row's pass"
                );
            }
            if served {
                // One operation a buffer, where a `slice_assign` a row took 2 × rows
                // operations a layer (1 920 a decode step at batch 32).
                pk = write_rows(pk, k, at.clone(), self.packed.clone());
                pv = write_rows(pv, v, at.clone(), self.packed.clone());
            } else {
                assert!(
                    self.packed.is_none(),
                    "a packed pass runs on the flex (CPU) device"
                );
                for (r, &p) in at.iter().enumerate() {
                    let to = [r..r + 1, 0..heads, p..p + n, 0..dim];
                    pk = pk.slice_assign(to.clone(), k.clone().narrow(0, r, 1));
                    pv = pv.slice_assign(to, v.clone().narrow(0, r, 1));
                }
            }
            self.layers[layer] = Some((pk.clone(), pv.clone()));
            if layer + 1 == self.layers.len() {
                self.write_at = None;
                self.packed = None;
            }
            return (self.in_use(pk), self.in_use(pv), capacity);
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
        self.rows = None;
    }

    /// Ragged: keeps the rows `kept` (ascending), moved to the front in that order; the
    /// others are dropped. On the CPU the rows move down within the buffers, which keep
    /// the room of the dropped rows for [`add_rows`](Self::add_rows); elsewhere the kept
    /// rows are copied into new buffers.
    pub fn keep_rows(&mut self, kept: &[usize]) {
        let Some(device) = self.device() else {
            return;
        };
        if !super::decode_attention::serves(&device) {
            let index = kept.iter().map(|&r| r as i64).collect::<Vec<_>>();
            let index = Tensor::from_data(TensorData::new(index, [kept.len()]), &device);
            return self.select_rows(index);
        }
        each_layer(&mut self.layers, |k, v| {
            (move_rows(k, kept.to_vec()), move_rows(v, kept.to_vec()))
        });
        self.rows = Some(kept.len());
    }

    /// Adds `n` rows (free slots) after those in use: rows the buffers hold spare where
    /// they have them (what those hold is never read before a sequence is written there),
    /// else half again as many zeroed rows as the buffers held, at least `n`, in one copy.
    pub fn add_rows(&mut self, n: usize) {
        let (rows, held) = (self.rows(), self.held());
        if rows + n > held {
            let grow = (rows + n).max(held + held / 2) - held;
            each_layer(&mut self.layers, |k, v| {
                let [_, heads, capacity, dim] = k.dims();
                let zeros = Tensor::zeros([grow, heads, capacity, dim], &k.device());
                (
                    Tensor::cat(vec![k, zeros.clone()], 0),
                    Tensor::cat(vec![v, zeros], 0),
                )
            });
        }
        self.rows = Some(rows + n);
    }

    /// Ragged: puts positions `start..start + len` of `from`'s row `row` into slot `slot`
    /// at positions `0..len`, growing the buffers if they are too short. Only that row is
    /// copied. Positions past `len` keep what the slot held before (the caller masks them).
    pub fn write_row(&mut self, slot: usize, from: &KvCache, row: usize, start: usize, len: usize) {
        self.reserve(len + 1);
        assert_eq!(
            self.layers.len(),
            from.layers.len(),
            "caches of the same layers"
        );
        let part = |t: &Tensor<4>| t.clone().narrow(0, row, 1).narrow(2, start, len);
        self.layers
            .par_iter_mut()
            .zip(&from.layers)
            .for_each(|(mine, theirs)| {
                // Taken out, so the buffers are written in place.
                let (Some((k, v)), Some((ok, ov))) = (mine.take(), theirs) else {
                    panic!("write_row needs two caches of the same layers");
                };
                let [_, heads, _, dim] = k.dims();
                let to = [slot..slot + 1, 0..heads, 0..len, 0..dim];
                *mine = Some((
                    k.slice_assign(to.clone(), part(ok)),
                    v.slice_assign(to, part(ov)),
                ));
            });
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
            let t = self.in_use(t.clone()).narrow(2, start, len);
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
            .par_iter()
            .map(|layer| layer.as_ref().map(|(k, v)| (part(k), part(v))))
            .collect();
        KvCache {
            layers,
            lens: vec![len; self.layers.len()],
            write_at: None,
            rows: None,
            packed: None,
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
mod tests;
