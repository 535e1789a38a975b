//! The report every job writes (`report/REPORT.md` and its PNG charts), built section by
//! section so that each job says what is its own (the title, the set-up paragraph, which
//! evaluations to compare) and shares the rest.
//!
//! | module | what lives there |
//! |---|---|
//! | [`held_out`] | evaluations of the test split: the table with 95% Wilson intervals, verdicts, the accuracy chart |
//! | [`paired`] | two evaluations of the same items compared item by item: gained, lost, exact McNemar p |
//! | [`training`] | RL curves (reward, validation accuracy, KL, entropy, tool use, kept groups) and the per-step table |
//! | [`trajectories`] | sample trajectories as the model wrote them, before and after training |
//! | [`plots`] | the charts, drawn with plotters (bundled font, no system dependency) |
//! | [`document`] | [`Report`]: the Markdown document those sections go into, with the times and the files |

pub mod document;
pub mod held_out;
pub mod paired;
pub mod plots;
pub mod training;
pub mod trajectories;

pub use document::Report;
pub use held_out::{Comparison, Eval, clearly_better, table};
pub use paired::Paired;
pub use training::TrainingCurves;
pub use trajectories::SampleTrajectories;
