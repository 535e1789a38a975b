//! The estimators on small batches worked by hand.

use super::*;
use crate::rollout::Trajectory;

fn item<'a>(group: &'a str, reward: f32, mask: &'a [u8]) -> Scored<'a> {
    Scored {
        group,
        reward,
        mask,
    }
}

fn close(a: &[f32], b: &[f32]) {
    assert_eq!(a.len(), b.len(), "{a:?} vs {b:?}");
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() < 1e-5, "{a:?} vs {b:?}");
    }
}

#[test]
fn grpo_normalises_within_each_group() {
    let m = [0, 1, 1, 0, 1];
    let items = [
        item("a", 1.0, &m),
        item("a", 0.0, &m),
        item("b", 2.0, &m),
        item("a", 0.0, &m),
        item("b", 4.0, &m),
    ];
    // Group a: mean 1/3, sample std sqrt(1/3) = 0.57735.
    // (1 - 1/3) / 0.57735 = 1.1547; (0 - 1/3) / 0.57735 = -0.57735.
    // Group b: mean 3, sample std sqrt(2) = 1.41421: ±0.70711.
    close(
        &grpo(&items, true),
        &[
            1.154_700_5,
            -0.577_350_3,
            -std::f32::consts::FRAC_1_SQRT_2,
            -0.577_350_3,
            std::f32::consts::FRAC_1_SQRT_2,
        ],
    );
    close(
        &grpo(&items, false),
        &[2.0 / 3.0, -1.0 / 3.0, -1.0, -1.0 / 3.0, 1.0],
    );
    let all = Estimator::default().compute(&items, None, None).unwrap();
    close(
        &all.advantages[0],
        &[0.0, 1.154_700_5, 1.154_700_5, 0.0, 1.154_700_5],
    );
    // Equal rewards: zero advantage, no division by zero.
    let flat = [item("c", 1.0, &m), item("c", 1.0, &m)];
    close(&grpo(&flat, true), &[0.0, 0.0]);
}

#[test]
fn a_group_shrunk_to_one_member_teaches_nothing() {
    let m = [0, 1, 1];
    let items = [
        item("a", 1.0, &m),
        item("a", 0.0, &m),
        item("lone", 1.0, &m),
    ];
    for normalize_std in [true, false] {
        assert_eq!(grpo(&items, normalize_std)[2], 0.0);
    }
    assert_eq!(rloo(&items)[2], 0.0);
    let all = Estimator::default().compute(&items, None, None).unwrap();
    assert_eq!(all.advantages[2], [0.0, 0.0, 0.0]);
}

#[test]
fn rloo_subtracts_the_mean_of_the_others() {
    let m = [1];
    let items = [
        item("a", 1.0, &m),
        item("a", 0.0, &m),
        item("a", 0.0, &m),
        item("z", 5.0, &m),
    ];
    // 1 - (0+0)/2 = 1; 0 - (1+0)/2 = -0.5; a lone item has no baseline: 0.
    close(&rloo(&items), &[1.0, -0.5, -0.5, 0.0]);
}

#[test]
fn reinforce_pp_discounts_over_sampled_tokens_only_and_whitens() {
    // Tokens: prompt, s, s, obs, obs, s.  Reward 1 at the last sampled token.
    let m = [0, 1, 1, 0, 0, 1];
    let items = [item("a", 1.0, &m)];
    let kl = vec![vec![9.0, 0.1, 0.2, 9.0, 9.0, 0.3]];
    let raw = {
        // r = -0.5*kl, +1 at the end; γ = 0.5 over sampled tokens (obs skipped):
        // G5 = 1 - 0.15 = 0.85; G2 = -0.1 + 0.5*0.85 = 0.325; G1 = -0.05 + 0.5*0.325 = 0.1125
        let g = [0.1125f32, 0.325, 0.85];
        let mean = g.iter().sum::<f32>() / 3.0;
        let std = (g.iter().map(|x| (x - mean).powi(2)).sum::<f32>() / 3.0).sqrt();
        g.map(|x| (x - mean) / (std + STD_EPS))
    };
    let out = reinforce_pp(&items, &kl, 0.5, 0.5);
    close(&out[0], &[0.0, raw[0], raw[1], 0.0, 0.0, raw[2]]);
    let est = Estimator::ReinforcePlusPlus {
        gamma: 0.5,
        kl_coef: 0.5,
    };
    assert!(
        est.compute(&items, None, None).is_err(),
        "KL estimates are required"
    );
    assert_eq!(
        est.compute(&items, Some(&kl), None).unwrap().advantages,
        out
    );
}

#[test]
fn gae_skips_observation_tokens() {
    let m = [0, 1, 0, 1, 1];
    let items = [item("a", 1.0, &m)];
    let values = vec![vec![7.0, 0.5, 7.0, 0.25, 0.75]];
    let (a, r) = gae(&items, &values, 0.9, 0.8);
    // Steps 1, 3, 4 (values 0.5, 0.25, 0.75); reward 1 at step 4.
    // δ4 = 1 - 0.75 = 0.25;  A4 = 0.25
    // δ3 = 0.9*0.75 - 0.25 = 0.425;  A3 = 0.425 + 0.72*0.25 = 0.605
    // δ1 = 0.9*0.25 - 0.5 = -0.275;  A1 = -0.275 + 0.72*0.605 = 0.1606
    close(&a[0], &[0.0, 0.1606, 0.0, 0.605, 0.25]);
    close(&r[0], &[0.0, 0.6606, 0.0, 0.855, 1.0]);
    // γ = λ = 1 and a zero critic: every step's advantage is the reward.
    let zeros = vec![vec![0.0; 5]];
    close(
        &gae(&items, &zeros, 1.0, 1.0).0[0],
        &[0.0, 1.0, 0.0, 1.0, 1.0],
    );
    let est = Estimator::Gae {
        gamma: 0.9,
        lambda: 0.8,
    };
    assert!(
        est.compute(&items, None, None)
            .unwrap_err()
            .0
            .contains("critic values")
    );
    let short = vec![vec![0.0; 2]];
    assert!(est.compute(&items, None, Some(&short)).is_err());
}

#[test]
fn estimators_read_from_config() {
    let e: Estimator = serde_json::from_str(r#"{"name": "grpo"}"#).unwrap();
    assert_eq!(
        e,
        Estimator::Grpo {
            normalize_std: true
        }
    );
    let e: Estimator = serde_json::from_str(r#"{"name": "gae", "lambda": 0.95}"#).unwrap();
    assert_eq!(
        e,
        Estimator::Gae {
            gamma: 1.0,
            lambda: 0.95
        }
    );
    assert!(serde_json::from_str::<Estimator>(r#"{"name": "ppo2"}"#).is_err());
    assert!(serde_json::from_str::<Estimator>(r#"{"name": "rloo", "x": 1}"#).is_err());
}

fn traj(group: &str, chain: usize, reward: f32) -> Trajectory {
    Trajectory {
        sample_id: group.into(),
        chain,
        reward: Some(reward),
        ..Trajectory::default()
    }
}

#[test]
fn dynamic_sampling_drops_uniform_groups_until_full() {
    let mut filter = GroupFilter::new(2);
    let round1 = vec![
        traj("a", 0, 1.0),
        traj("a", 1, 1.0),
        traj("b", 0, 0.0),
        traj("b", 1, 1.0),
    ];
    assert_eq!(filter.add(round1), 1);
    assert!(!filter.is_full());
    let round2 = vec![
        traj("c", 0, 0.0),
        traj("c", 1, 0.0),
        traj("d", 0, 0.5),
        traj("d", 1, 0.0),
        traj("e", 0, 1.0),
        traj("e", 1, 0.0),
    ];
    assert_eq!(filter.add(round2), 1);
    assert!(filter.is_full());
    assert_eq!(
        (
            filter.kept_groups(),
            filter.dropped_groups(),
            filter.rounds()
        ),
        (2, 2, 2)
    );
    let kept: Vec<_> = filter
        .into_trajectories()
        .iter()
        .map(|t| (t.sample_id.clone(), t.chain))
        .collect();
    assert_eq!(
        kept,
        [
            ("b".into(), 0),
            ("b".into(), 1),
            ("d".into(), 0),
            ("d".into(), 1)
        ]
    );
}
