//! Where the reference fixtures are: `$AGENTFLY_FIXTURES`, else `../shared/fixtures` beside
//! the repository (as on developer machines and in CI). Missing fixtures fail the test.

use std::path::PathBuf;

pub fn fixtures() -> PathBuf {
    let dir = std::env::var_os("AGENTFLY_FIXTURES").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures"),
        PathBuf::from,
    );
    assert!(
        dir.join("README.md").exists(),
        "fixtures not found at {} (set AGENTFLY_FIXTURES)",
        dir.display()
    );
    dir
}
