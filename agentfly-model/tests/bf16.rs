//! bf16 products on Intel AMX (`Decoder::use_bf16_products`) on the random tiny Qwen2
//! (fixtures): logits within bf16's rounding of transformers' f32 ones, and every weight's
//! gradient (the backward pass's two bf16 products per projection) close to the f32 one.
//! Where the CPU or OS has no AMX the tests say so and skip; `AGENTFLY_REQUIRE_AMX=1` makes
//! that skip fail.

use agentfly_testdata::support as common;

use agentfly_model::Pretrained;
use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::{Device, Int, Tensor, TensorData};

fn load(device: &Device) -> Pretrained {
    Pretrained::load(common::fixtures().join("tiny-qwen2"), device).unwrap()
}

/// Whether the bf16 products can run here; a skip fails with `AGENTFLY_REQUIRE_AMX=1`.
fn amx_here() -> bool {
    if agentfly_model::model::amx::available() {
        return true;
    }
    assert!(
        std::env::var("AGENTFLY_REQUIRE_AMX").as_deref() != Ok("1"),
        "AGENTFLY_REQUIRE_AMX=1 but this CPU or OS has no AMX"
    );
    eprintln!("SKIPPED: this CPU or OS has no AMX, so the bf16 products cannot run");
    false
}

#[test]
fn bf16_logits_match_transformers_within_bf16_rounding() {
    if !amx_here() {
        return;
    }
    let mut model = load(&common::device());
    let (id_shape, ids, _, expected) =
        common::reference(common::fixtures().join("tiny-qwen2/reference.safetensors"));
    let f32_diff = common::max_abs_diff(
        &common::logits(&model, ids.clone(), [id_shape[0], id_shape[1]]),
        &expected,
    );
    assert!(model.decoder.use_bf16_products(true));
    // 2 × 16 tokens: every projection's product has 32 rows, enough for bf16.
    let got = common::logits(&model, ids.clone(), [id_shape[0], id_shape[1]]);
    let diff = common::max_abs_diff(&got, &expected);
    let scale = expected.iter().fold(0f32, |m, v| m.max(v.abs()));
    // bf16 keeps 8 bits of mantissa: ~0.4% per input, partly averaging out in the sums.
    assert!(
        diff < 1e-2 * scale && diff > 10.0 * f32_diff,
        "max |Δlogit| {diff} (f32: {f32_diff}, logits up to {scale})"
    );
    // Off again: f32 exactly as before.
    assert!(!model.decoder.use_bf16_products(false));
    let back = common::logits(&model, ids, [id_shape[0], id_shape[1]]);
    assert_eq!(common::max_abs_diff(&back, &expected), f32_diff);
}

#[test]
fn a_serving_copy_packed_in_bf16_keeps_bf16_accuracy_at_every_row_count() {
    if !amx_here() {
        return;
    }
    let device = common::device();
    let plain = load(&device);
    let mut packed = load(&device);
    assert!(packed.decoder.use_bf16_products(true));
    // The engine's copy: merged (which must keep the flag), then packed for serving.
    packed.decoder = packed.decoder.merged();
    packed.decoder.pack_for_decode();
    let projections = packed.decoder.blocks.iter().flat_map(|b| {
        [
            &b.attention.qkv,
            &b.attention.o,
            &b.mlp.gate_up,
            &b.mlp.down,
        ]
    });
    for p in projections {
        assert!(
            p.packed.as_ref().is_some_and(|w| w.is_bf16()),
            "{:?}",
            p.packed
        );
    }
    assert!(
        packed
            .decoder
            .packed_head
            .as_ref()
            .is_some_and(|w| w.is_bf16())
    );
    // One row (decode at batch 1), a few, a tile and more, up to prefill's many: every
    // product, the output projection's too, runs on the packed bf16 weights.
    for (batch, len) in [(1, 1), (1, 5), (2, 16), (3, 40)] {
        let ids: Vec<i64> = (0..batch * len)
            .map(|i| (i as i64 * 53 + 7) % 500)
            .collect();
        let want = common::logits(&plain, ids.clone(), [batch, len]);
        let got = common::logits(&packed, ids, [batch, len]);
        let diff = common::max_abs_diff(&got, &want);
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        eprintln!("{batch} × {len}: max |Δlogit| {diff}, logits up to {scale}");
        // bf16 keeps 8 bits of mantissa (~0.4% per input), in every product and the
        // output projection's: at one row the sums average little of it out.
        assert!(
            diff < 3e-2 * scale && diff > 1e-5 * scale,
            "{batch} × {len}: max |Δlogit| {diff} against f32 (logits up to {scale})"
        );
    }
}

/// Every float parameter's gradient, flattened, in visiting order.
struct Grads<'a> {
    grads: &'a GradientsParams,
    out: Vec<(String, Vec<f32>)>,
}

impl ModuleVisitor for Grads<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(g) = self.grads.get::<D>(param.id) {
            self.out.push((
                format!("{:?}", param.id),
                g.into_data().try_to_vec::<f32>().unwrap(),
            ));
        }
    }
}

fn gradients(bf16: bool) -> Vec<(String, Vec<f32>)> {
    let device = agentfly_model::device::training(Device::flex(), true);
    let mut model = load(&device);
    assert_eq!(model.decoder.use_bf16_products(bf16), bf16);
    let ids: Vec<i64> = (0..64).map(|i| (i * 37 + 11) % 500).collect();
    let ids = Tensor::<2, Int>::from_data(TensorData::new(ids, [2, 32]), &device);
    let logits = model.decoder.forward(ids, &model.rope);
    let [b, t, v] = logits.dims();
    // A fixed random direction: the loss touches every logit.
    let weights: Vec<f32> = (0..b * t * v)
        .map(|i| ((i * 7919 % 1000) as f32 / 500.0) - 1.0)
        .collect();
    let weights = Tensor::<3>::from_data(TensorData::new(weights, [b, t, v]), &device);
    let loss = (logits * weights).sum();
    collect(loss, &model)
}

#[test]
fn bf16_gradients_stay_close_to_f32_ones() {
    if !amx_here() {
        return;
    }
    let (exact, bf16) = (gradients(false), gradients(true));
    assert_eq!(exact.len(), bf16.len());
    assert!(exact.len() > 10, "{} gradients", exact.len());
    let mut largest = 0f64;
    for ((name, e), (_, b)) in exact.iter().zip(&bf16) {
        let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
        let diff: Vec<f32> = e.iter().zip(b).map(|(x, y)| x - y).collect();
        let relative = norm(&diff) / norm(e).max(1e-12);
        assert!(relative < 2e-2, "{name}: |Δgrad| / |grad| = {relative:.4}");
        largest = largest.max(relative);
    }
    // bf16 really ran: the gradients moved by its rounding, not by f32's.
    assert!(largest > 1e-4, "largest |Δgrad| / |grad| = {largest}");
    eprintln!("largest |Δgrad| / |grad| = {largest:.4}");
}

/// Runs on any CPU: dithering touches no AMX instruction.
#[test]
fn dithering_moves_each_weight_within_half_a_bf16_step_and_keeps_it_trainable() {
    let device = agentfly_model::device::training(Device::flex(), true);
    let mut model = load(&device);
    let host = |p: &Param<Tensor<2>>| p.val().into_data().try_to_vec::<f32>().unwrap();
    let weights = |m: &Pretrained| -> Vec<f32> {
        m.decoder
            .blocks
            .iter()
            .flat_map(|b| {
                [
                    &b.attention.qkv,
                    &b.attention.o,
                    &b.mlp.gate_up,
                    &b.mlp.down,
                ]
            })
            .flat_map(|p| host(&p.weight))
            .collect()
    };
    let (before, trainable) = (weights(&model), gradients_of(&model).len());
    model.decoder.dither_for_bf16(7);
    let after = weights(&model);
    let mut moved = 0;
    for (b, a) in before.iter().zip(&after) {
        // A bf16 step is 2¹⁶ in the f32 bit pattern (of the same sign).
        let step = i64::from(a.to_bits()) - i64::from(b.to_bits());
        assert!(step.abs() <= 1 << 15, "{b} → {a}");
        moved += usize::from(a != b);
    }
    assert!(
        moved > before.len() * 9 / 10,
        "{moved} of {} moved",
        before.len()
    );
    // The dithered weights are new tensors: they must still be parameters that learn.
    assert_eq!(gradients_of(&model).len(), trainable);
    // Seeded: the same seed gives the same weights.
    let mut again = load(&device);
    again.decoder.dither_for_bf16(7);
    assert_eq!(weights(&again), after);
}

/// What dithering is for: rounded to bf16, a dithered value is right on average, wherever it
/// sat in its bf16 cell — on a tie, on a bf16 value, or anywhere — so a bf16 product follows
/// an update smaller than a bf16 step on average, over the weights it moves.
#[test]
fn a_dithered_value_rounds_to_itself_on_average() {
    use agentfly_model::model::amx::{from_bf16, to_bf16};
    use agentfly_model::model::bf16::{dither, uniform};
    let draws = 20_000;
    for v in [
        1.0f32,
        1.0 + 1.0 / 256.0,
        1.001,
        -0.037_5,
        0.012_345_6,
        3.0e-3 + 1.0e-6,
    ] {
        let spacing = f32::from_bits(v.to_bits() & 0x7f80_0000) / 128.0;
        let mean = (0..draws)
            .map(|i| f64::from(from_bf16(to_bf16(dither(v, uniform(11, i))))))
            .sum::<f64>()
            / draws as f64;
        let error = (mean - f64::from(v)).abs() / f64::from(spacing);
        assert!(
            error < 0.01,
            "{v}: the mean of its bf16 roundings is {mean} ({error:.4} of a step off)"
        );
    }
    // Without dithering, a tie (1 + 2⁻⁸, half way between 1 and 1 + 2⁻⁷) is half a step off.
    let tie = 1.0f32 + 1.0 / 256.0;
    assert_eq!(from_bf16(to_bf16(tie)), 1.0);
    assert_eq!(dither(0.0, 0.9), 0.0);
}

fn gradients_of(model: &Pretrained) -> Vec<(String, Vec<f32>)> {
    let device = model.decoder.embed.device();
    let ids = Tensor::<2, Int>::from_data(TensorData::new(vec![1i64, 5, 9, 13], [1, 4]), &device);
    let loss = model.decoder.forward(ids, &model.rope).sum();
    collect(loss, model)
}

/// The gradients of `loss` for `model`'s parameters.
fn collect(loss: Tensor<1>, model: &Pretrained) -> Vec<(String, Vec<f32>)> {
    let grads = GradientsParams::from_grads(loss.backward(), &model.decoder);
    let mut visitor = Grads {
        grads: &grads,
        out: Vec::new(),
    };
    model.decoder.visit(&mut visitor);
    visitor.out
}
