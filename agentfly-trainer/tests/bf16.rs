//! bf16 products on Intel AMX (`Decoder::use_bf16_products`) on the random tiny Qwen2
//! (fixtures): logits within bf16's rounding of transformers' f32 ones, and every weight's
//! gradient (the backward pass's two bf16 products per projection) close to the f32 one.
//! Where the CPU or OS has no AMX the tests say so and skip; `AGENTFLY_REQUIRE_AMX=1` makes
//! that skip fail.

mod common;

use agentfly_trainer::Pretrained;
use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::{Device, Int, Tensor, TensorData};

fn load(device: &Device) -> Pretrained {
    Pretrained::load(common::fixtures().join("tiny-qwen2"), device).unwrap()
}

/// Whether the bf16 products can run here; a skip fails with `AGENTFLY_REQUIRE_AMX=1`.
fn amx_here() -> bool {
    if agentfly_trainer::model::amx::available() {
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
    let device = agentfly_trainer::device::training(Device::flex(), true);
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

/// Runs on any CPU: rounding touches no AMX instruction.
#[test]
fn rounding_to_bf16_puts_every_projection_weight_on_bf16_and_keeps_it_trainable() {
    use agentfly_trainer::model::amx::{from_bf16, to_bf16};
    let device = agentfly_trainer::device::training(Device::flex(), true);
    let mut model = load(&device);
    let host = |p: &Param<Tensor<2>>| p.val().into_data().try_to_vec::<f32>().unwrap();
    let before = host(&model.decoder.blocks[0].mlp.gate_up.weight);
    let trainable = gradients_of(&model).len();
    model.decoder.round_to_bf16();
    for block in &model.decoder.blocks {
        for p in [
            &block.attention.qkv,
            &block.attention.o,
            &block.mlp.gate_up,
            &block.mlp.down,
        ] {
            assert!(
                host(&p.weight).iter().all(|v| from_bf16(to_bf16(*v)) == *v),
                "a weight is not a bf16 value"
            );
        }
    }
    let after = host(&model.decoder.blocks[0].mlp.gate_up.weight);
    let moved = before.iter().zip(&after).filter(|(b, a)| b != a).count();
    assert!(
        moved > before.len() / 2,
        "{moved} of {} weights moved",
        before.len()
    );
    // Rounded weights are new tensors: they must still be parameters that learn.
    assert_eq!(gradients_of(&model).len(), trainable);
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
