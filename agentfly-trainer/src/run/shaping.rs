//! Optional reward shaping (`agent.format_bonus`), kept apart from the task's reward.

use agentfly_core::rollout::Trajectory;

/// Adds `bonus` to the reward of a chain that called tools, every call well-formed and
/// successful; the task's reward stays in the `task_reward` metric. Shaping twice adds
/// nothing.
pub fn shape(t: &mut Trajectory, bonus: f32) {
    if bonus == 0.0 {
        return;
    }
    let Some(reward) = t.reward else { return };
    if t.reward_metrics.contains_key("task_reward") {
        return;
    }
    t.reward_metrics
        .insert("task_reward".into(), f64::from(reward));
    let clean = t.calls().next().is_some() && t.calls().all(|c| !c.is_error);
    if clean {
        t.reward = Some(reward + bonus);
    }
}

#[cfg(test)]
mod tests {
    use super::shape;
    use crate::run::eval::correct_of;
    use agentfly_core::rollout::{CallRecord, Trajectory, Turn};

    fn chain(reward: f32, calls: &[bool]) -> Trajectory {
        Trajectory {
            reward: Some(reward),
            turns: vec![Turn {
                calls: calls
                    .iter()
                    .map(|&is_error| CallRecord {
                        name: "calculator".into(),
                        is_error,
                        ..CallRecord::default()
                    })
                    .collect(),
                ..Turn::default()
            }],
            ..Trajectory::default()
        }
    }

    #[test]
    fn the_format_bonus_goes_to_clean_tool_use_and_accuracy_ignores_it() {
        // Clean calls: bonus; the task's reward is kept, and a wrong answer stays wrong.
        let mut t = chain(0.0, &[false, false]);
        shape(&mut t, 0.1);
        assert_eq!(t.reward, Some(0.1));
        assert_eq!(t.reward_metrics["task_reward"], 0.0);
        assert!(!correct_of(&t));
        // Shaping twice adds nothing.
        shape(&mut t, 0.1);
        assert_eq!(t.reward, Some(0.1));
        // A failed call, or no call: no bonus.
        for calls in [&[false, true][..], &[]] {
            let mut t = chain(1.0, calls);
            shape(&mut t, 0.1);
            assert_eq!(t.reward, Some(1.0), "{calls:?}");
            assert!(correct_of(&t));
        }
        // Off: untouched.
        let mut t = chain(1.0, &[false]);
        shape(&mut t, 0.0);
        assert_eq!((t.reward, t.reward_metrics.len()), (Some(1.0), 0));
    }
}
