//! The cache's slots, growth and row moves, on small random buffers.

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

/// A one-layer aligned cache of random keys (the values the same) of `shape`
/// `[rows, heads, positions, d]`, and those keys.
fn one_layer(shape: [usize; 4]) -> (KvCache, Tensor<4>) {
    let mut cache = KvCache::new(1);
    let rows = Tensor::<4>::random(shape, Distribution::Normal(0.0, 1.0), &Device::flex());
    cache.append(0, rows.clone(), rows.clone());
    (cache, rows)
}

#[test]
fn a_cleared_slot_is_zero_and_the_others_keep_their_values() {
    let (mut cache, rows) = one_layer([3, 2, 5, 4]);
    let nan = Tensor::<4>::full([1, 2, 5, 4], f32::NAN, &Device::flex());
    let poisoned = KvCache {
        layers: vec![Some((nan.clone(), nan))],
        lens: vec![5],
        ..KvCache::default()
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

#[test]
fn kept_rows_move_down_in_place_and_added_rows_reuse_the_room_left() {
    let (mut cache, rows) = one_layer([4, 2, 5, 3]);
    let row = |c: &KvCache, r: usize| c.first().unwrap().clone().narrow(0, r, 1).narrow(2, 0, 5);
    let same = |a: Tensor<4>, b: Tensor<4>| (a - b).abs().max().into_scalar::<f32>() == 0.0;

    cache.keep_rows(&[1, 3]);
    assert_eq!(
        (cache.rows(), cache.held()),
        (2, 4),
        "moved within the buffers"
    );
    assert!(same(row(&cache, 0), rows.clone().narrow(0, 1, 1)));
    assert!(same(row(&cache, 1), rows.clone().narrow(0, 3, 1)));

    cache.add_rows(1);
    assert_eq!((cache.rows(), cache.held()), (3, 4), "a spare row reused");
    cache.add_rows(3);
    assert_eq!(cache.rows(), 6);
    assert!(cache.held() >= 6);
    assert!(
        same(row(&cache, 1), rows.clone().narrow(0, 3, 1)),
        "kept across growth"
    );

    // A ragged pass writes and reads the rows in use only.
    let step = Tensor::<4>::random(
        [6, 2, 1, 3],
        Distribution::Normal(0.0, 1.0),
        &Device::flex(),
    );
    cache.reserve(6);
    cache.write_at(vec![5; 6]);
    let (k, _, capacity) = cache.append(0, step.clone(), step.clone());
    assert_eq!(k.dims(), [6, 2, capacity, 3]);
    assert!(same(k.clone().narrow(2, 5, 1), step));
    assert!(same(
        k.narrow(0, 0, 1).narrow(2, 0, 5),
        rows.narrow(0, 1, 1)
    ));
    assert_eq!(cache.row(1, 0, 5).rows(), 1);
}
