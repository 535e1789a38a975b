//! Evaluating an expression tree, naming the sub-expression an error comes from.

use super::CalcError;
use super::number::{ArithError, Number};
use super::parse::{Expr, Op, Span, parse};

/// Parses and evaluates `text`.
pub fn evaluate(text: &str) -> Result<Number, CalcError> {
    let chars: Vec<char> = text.chars().collect();
    let expr = parse(text)?;
    eval(&expr, &chars)
}

fn eval(expr: &Expr, chars: &[char]) -> Result<Number, CalcError> {
    match expr {
        Expr::Num(n, _) => Ok(n.clone()),
        Expr::Neg(inner, _) => Ok(eval(inner, chars)?.neg()),
        Expr::Bin(op, lhs, rhs, span) => {
            let a = eval(lhs, chars)?;
            let b = eval(rhs, chars)?;
            let result = match op {
                Op::Add => a.add(b),
                Op::Sub => a.sub(b),
                Op::Mul => a.mul(b),
                Op::Div => a.div(b),
                Op::Pow => a.pow(b),
            };
            result.map_err(|e| {
                let text = |s: Span| chars[s.start..s.end].iter().collect::<String>();
                match e {
                    ArithError::DivisionByZero if *op == Op::Div => CalcError::DivisionByZero {
                        divisor: text(rhs.span()),
                        position: rhs.span().start + 1,
                    },
                    ArithError::DivisionByZero => CalcError::DivisionByZero {
                        divisor: text(*span),
                        position: span.start + 1,
                    },
                    ArithError::TooLarge => CalcError::TooLarge {
                        expression: text(*span),
                        position: span.start + 1,
                    },
                    ArithError::NotReal => CalcError::NotReal {
                        expression: text(*span),
                        position: span.start + 1,
                    },
                }
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> String {
        evaluate(text)
            .unwrap_or_else(|e| panic!("{text}: {e}"))
            .to_string()
    }

    fn err(text: &str) -> String {
        evaluate(text).unwrap_err().to_string()
    }

    #[test]
    fn precedence_and_associativity() {
        assert_eq!(ok("1 + 2 * 3"), "7");
        assert_eq!(ok("(1 + 2) * 3"), "9");
        assert_eq!(ok("-2^2"), "-4");
        assert_eq!(ok("(-2)^2"), "4");
        assert_eq!(ok("2^3^2"), "512");
        assert_eq!(ok("2^-1"), "0.5");
        assert_eq!(ok("10 - 4 - 3"), "3");
        assert_eq!(ok("100 / 10 / 5"), "2");
        assert_eq!(ok("--3"), "3");
        assert_eq!(ok("2**10"), "1024");
        assert_eq!(ok("6 × 7 ÷ 2 − 1"), "20");
    }

    #[test]
    fn exact_decimals_and_big_integers() {
        assert_eq!(ok("0.1 + 0.2"), "0.3");
        assert_eq!(
            ok("123456789012345678901234567890 * 10"),
            "1234567890123456789012345678900"
        );
        assert_eq!(ok("2^100"), "1267650600228229401496703205376");
        assert_eq!(ok("1/3"), "0.333333333333");
        assert_eq!(ok("12.5 * 4"), "50");
        assert_eq!(ok("2^0.5"), "1.4142135623730951");
    }

    #[test]
    fn errors_say_what_and_where() {
        assert_eq!(
            err("5/(3-3)"),
            "division by zero: `(3-3)` (at position 3) is 0"
        );
        assert_eq!(err("0^-1"), "division by zero: `0^-1` (at position 1) is 0");
        assert_eq!(
            err("1 +"),
            "syntax error at position 4: expected a number or `(`, found the end of the expression"
        );
        assert_eq!(
            err("(1 + 2"),
            "syntax error at position 7: expected `)` to close the `(` at position 1, found the end of the expression"
        );
        assert_eq!(
            err("1 + 2)"),
            "syntax error at position 6: `)` has no matching `(`"
        );
        assert_eq!(
            err("2 3"),
            "syntax error at position 3: expected an operator before the number 3"
        );
        assert_eq!(
            err("2 $ 3"),
            "syntax error at position 3: unexpected character `$`"
        );
        assert_eq!(
            err("1,000 + 1"),
            "syntax error at position 2: unexpected character `,` (write numbers without thousands separators, e.g. 1234)"
        );
        assert_eq!(
            err("x + 1"),
            "syntax error at position 1: unexpected character `x` (only numbers and + - * / ^ ( ) are understood)"
        );
        assert_eq!(
            err("1.2.3"),
            "syntax error at position 1: `1.2.3` is not a number: it has more than one `.`"
        );
        assert_eq!(
            err("   "),
            "the expression is empty; write one such as \"(12 + 7) * 3\""
        );
        assert_eq!(
            err("9^9^9"),
            "the result of `9^9^9` (at position 1) is too large to compute"
        );
        assert_eq!(
            err("(-8)^(1/3)"),
            "`(-8)^(1/3)` (at position 1) is not a real number: a negative base with a fractional exponent"
        );
        assert!(err(&"(".repeat(300)).contains("nesting deeper than 200 levels"));
    }
}
