//! agentfly-new-project's training binary: agentfly's pipeline (`agentfly run`'s options) with this
//! crate's tools and reward linked in beside the standard ones.
//!
//! `cargo run --release -- task.toml --preset smoke` (a few minutes on 2 cores), then
//! `cargo run --release -- task.toml` for the real run; the report is in
//! `target/runs/agentfly-new-project/report/REPORT.md`.

// Name every tool crate once, or the linker drops it and its tools are missing.
agentfly_core::link!(agentfly_tools, agentfly_new_project);

// Freed training memory is kept for the next step instead of going back to the OS.
#[global_allocator]
static ALLOC: agentfly_model::alloc::Allocator = agentfly_model::alloc::Allocator;

fn main() -> std::process::ExitCode {
    agentfly_jobs::job::from_file::main()
}
