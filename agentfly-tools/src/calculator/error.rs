//! Calculator errors: each says what is wrong and where.

/// Why an expression could not be evaluated. Positions count characters from 1.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CalcError {
    /// The expression is empty.
    #[error("the expression is empty; write one such as \"(12 + 7) * 3\"")]
    Empty,
    /// The expression is longer than the calculator accepts.
    #[error("the expression is {len} characters long; at most {max} are accepted")]
    TooLong {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Bad syntax.
    #[error("syntax error at position {position}: {message}")]
    Syntax {
        /// Where, counting characters from 1.
        position: usize,
        /// What was wrong.
        message: String,
    },
    /// A division (or negative power) by zero.
    #[error("division by zero: `{divisor}` (at position {position}) is 0")]
    DivisionByZero {
        /// The text of the divisor.
        divisor: String,
        /// Where the divisor starts.
        position: usize,
    },
    /// A result too large to compute.
    #[error("the result of `{expression}` (at position {position}) is too large to compute")]
    TooLarge {
        /// The text of the operation.
        expression: String,
        /// Where it starts.
        position: usize,
    },
    /// A negative number raised to a fractional power.
    #[error(
        "`{expression}` (at position {position}) is not a real number: a negative base with a fractional exponent"
    )]
    NotReal {
        /// The text of the operation.
        expression: String,
        /// Where it starts.
        position: usize,
    },
}
