//! Ready task generators: datasets with exact answers for the ready tools.

pub mod arithmetic;
pub mod wiki_qa;
