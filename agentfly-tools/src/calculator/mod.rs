//! The `calculator` tool: exact arithmetic on rationals of any size, so a model that
//! cannot multiply three-digit numbers in its head gets the exact answer.
//!
//! Grammar (usual precedence; `^` binds tighter than unary minus and is right-associative,
//! so `-2^2 = -4` and `2^3^2 = 512`):
//!
//! ```text
//! expr    := term (("+" | "-") term)*
//! term    := unary (("*" | "/") unary)*
//! unary   := ("-" | "+") unary | power
//! power   := primary ("^" unary)?
//! primary := number | "(" expr ")"
//! ```
//!
//! `**`, `×`, `÷` and `−` are read as `^`, `*`, `/` and `-`. Numbers are decimals with an
//! optional exponent (`1.5e3`). Results are exact unless a fractional power forces a
//! float.

mod error;
mod eval;
mod number;
mod parse;

pub use error::CalcError;
pub use eval::evaluate;
pub use number::{Number, parse_decimal};

use agentfly_core::tool;

/// Evaluates an arithmetic expression exactly and returns the result. Supports + - * / ^
/// (power), parentheses, unary minus, decimals and integers of any size.
#[tool(max_output_chars = 2000)]
pub fn calculator(
    /// The expression to evaluate, e.g. "(12 + 7) * 3" or "2^10 / 4".
    expression: String,
) -> Result<String, CalcError> {
    evaluate(&expression).map(|n| n.to_string())
}
