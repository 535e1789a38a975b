//! Where a registered tool or reward is defined, for messages that point at it (two
//! definitions with one name name both places).

use std::fmt;

/// Where a tool or reward is defined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin {
    /// `module_path!()` of the definition.
    pub module_path: &'static str,
    /// `file!()` of the definition.
    pub file: &'static str,
    /// `line!()` of the definition.
    pub line: u32,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Line 0: not a definition in a source file (a tool an MCP server offers).
        if self.line == 0 {
            write!(f, "{} ({})", self.module_path, self.file)
        } else {
            write!(f, "{} ({}:{})", self.module_path, self.file, self.line)
        }
    }
}
