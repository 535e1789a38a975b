//! The PPO critic.
//!
//! Design: a linear value head on the policy's final (normed) hidden state, with the
//! trunk's gradient stopped — `V(s_t) = w · stop_grad(h_{t−1}) + b`, where `h_{t−1}` is the
//! hidden state that predicts token `t`. It costs no extra forward pass (the values come
//! out of the pass that computes the policy's log-probs) and no second model in memory,
//! which matters on CPUs; the value loss cannot disturb the policy's features. The price is
//! capacity: the critic is a linear probe of what the policy already represents, where
//! verl-style PPO trains a separate critic network. Values are fitted with the clipped
//! value loss of PPO, weighted like the policy loss, by an AdamW of its own.

use burn::module::{Module, Param};
use burn::tensor::{Device, Tensor, TensorData};

/// `V = hidden · weight + bias`.
#[derive(Module, Debug)]
pub struct ValueHead {
    /// `[hidden, 1]`.
    pub weight: Param<Tensor<2>>,
    /// `[1]`.
    pub bias: Param<Tensor<1>>,
}

impl ValueHead {
    /// A zero head (every value 0 until trained) for `hidden`-wide states.
    pub fn new(hidden: usize, device: &Device) -> Self {
        Self::from_values(vec![0.0; hidden], 0.0, device)
    }

    /// A head with these weights.
    pub fn from_values(weight: Vec<f32>, bias: f32, device: &Device) -> Self {
        let n = weight.len();
        Self {
            weight: Param::from_tensor(Tensor::from_data(TensorData::new(weight, [n, 1]), device)),
            bias: Param::from_tensor(Tensor::from_data(TensorData::new(vec![bias], [1]), device)),
        }
    }

    /// Values of `hidden` `[n, width]` → `[n]`; the trunk gets no gradient.
    pub fn forward(&self, hidden: Tensor<2>) -> Tensor<1> {
        let [n, _] = hidden.dims();
        hidden.detach().matmul(self.weight.val()).reshape([n]) + self.bias.val()
    }

    /// The weights, to save.
    pub fn values(&self) -> (Vec<f32>, f32) {
        let w = self
            .weight
            .val()
            .into_data()
            .try_to_vec::<f32>()
            .expect("f32");
        let b = self
            .bias
            .val()
            .into_data()
            .try_to_vec::<f32>()
            .expect("f32");
        (w, b[0])
    }
}

/// PPO's clipped value loss, `½ · max((V − R)², (V_old + clip(V − V_old, ±clip) − R)²)`,
/// weighted (`[n]` each).
pub fn value_loss(
    values: Tensor<1>,
    old_values: Tensor<1>,
    returns: Tensor<1>,
    weights: Tensor<1>,
    clip: f32,
) -> Tensor<1> {
    let unclipped = (values.clone() - returns.clone()).powi_scalar(2);
    let clipped = old_values.clone() + (values - old_values).clamp(-clip, clip);
    let clipped = (clipped - returns).powi_scalar(2);
    (unclipped.max_pair(clipped) * weights).sum() * 0.5
}
