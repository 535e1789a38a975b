//! Datasets: the samples chains start from.

mod sample;

pub use sample::Sample;
