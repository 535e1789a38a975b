//! Calculator numbers: exact rationals of any size, or a float once a fractional power
//! made exactness impossible.

use num_bigint::BigInt;
use num_rational::BigRational;
use num_traits::{One, Signed, ToPrimitive, Zero};
use std::fmt;

/// Powers whose result would need more bits than this are refused as too large.
const MAX_RESULT_BITS: u64 = 200_000;
/// Decimal exponents (`1e400`) beyond this are refused.
const MAX_DECIMAL_EXPONENT: i64 = 10_000;
/// Fractional digits shown for a non-terminating exact result.
const SHOWN_FRACTION_DIGITS: usize = 12;

/// A calculator value.
#[derive(Debug, Clone, PartialEq)]
pub enum Number {
    /// Exact.
    Exact(BigRational),
    /// A float, after a fractional power.
    Float(f64),
}

/// Why an operation failed; the evaluator adds the place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ArithError {
    DivisionByZero,
    TooLarge,
    NotReal,
}

impl Number {
    /// An exact integer.
    pub fn int(n: i64) -> Self {
        Number::Exact(BigRational::from_integer(n.into()))
    }

    fn as_f64(&self) -> f64 {
        match self {
            Number::Exact(r) => r.to_f64().unwrap_or(f64::NAN),
            Number::Float(f) => *f,
        }
    }

    fn float(value: f64) -> Result<Number, ArithError> {
        if value.is_finite() {
            Ok(Number::Float(value))
        } else {
            Err(ArithError::TooLarge)
        }
    }

    fn is_zero(&self) -> bool {
        match self {
            Number::Exact(r) => r.is_zero(),
            Number::Float(f) => *f == 0.0,
        }
    }

    pub(crate) fn neg(self) -> Number {
        match self {
            Number::Exact(r) => Number::Exact(-r),
            Number::Float(f) => Number::Float(-f),
        }
    }

    pub(crate) fn add(self, rhs: Number) -> Result<Number, ArithError> {
        match (self, rhs) {
            (Number::Exact(a), Number::Exact(b)) => Ok(Number::Exact(a + b)),
            (a, b) => Number::float(a.as_f64() + b.as_f64()),
        }
    }

    pub(crate) fn sub(self, rhs: Number) -> Result<Number, ArithError> {
        self.add(rhs.neg())
    }

    pub(crate) fn mul(self, rhs: Number) -> Result<Number, ArithError> {
        match (self, rhs) {
            (Number::Exact(a), Number::Exact(b)) => Ok(Number::Exact(a * b)),
            (a, b) => Number::float(a.as_f64() * b.as_f64()),
        }
    }

    pub(crate) fn div(self, rhs: Number) -> Result<Number, ArithError> {
        if rhs.is_zero() {
            return Err(ArithError::DivisionByZero);
        }
        match (self, rhs) {
            (Number::Exact(a), Number::Exact(b)) => Ok(Number::Exact(a / b)),
            (a, b) => Number::float(a.as_f64() / b.as_f64()),
        }
    }

    pub(crate) fn pow(self, exponent: Number) -> Result<Number, ArithError> {
        if let (Number::Exact(base), Number::Exact(exp)) = (&self, &exponent)
            && exp.is_integer()
        {
            return exact_pow(base, exp.numer());
        }
        let (base, exp) = (self.as_f64(), exponent.as_f64());
        if base < 0.0 {
            return Err(ArithError::NotReal);
        }
        if base == 0.0 && exp < 0.0 {
            return Err(ArithError::DivisionByZero);
        }
        Number::float(base.powf(exp))
    }
}

fn exact_pow(base: &BigRational, exp: &BigInt) -> Result<Number, ArithError> {
    if base.is_zero() {
        return if exp.is_negative() {
            Err(ArithError::DivisionByZero)
        } else if exp.is_zero() {
            Ok(Number::int(1))
        } else {
            Ok(Number::int(0))
        };
    }
    let magnitude = base.numer().abs().max(base.denom().abs());
    if magnitude.is_one() {
        // ±1 to any power: only the sign can change.
        let odd = (exp % 2u32) != BigInt::zero();
        let value = if base.is_negative() && odd { -1 } else { 1 };
        return Ok(Number::int(value));
    }
    let exp_abs = exp.abs().to_u64().ok_or(ArithError::TooLarge)?;
    if magnitude.bits().saturating_mul(exp_abs) > MAX_RESULT_BITS {
        return Err(ArithError::TooLarge);
    }
    let exp_abs = u32::try_from(exp_abs).map_err(|_| ArithError::TooLarge)?;
    let raised = BigRational::new(base.numer().pow(exp_abs), base.denom().pow(exp_abs));
    Ok(Number::Exact(if exp.is_negative() {
        raised.recip()
    } else {
        raised
    }))
}

/// Parses a plain decimal (`-12`, `3.25`, `.5`, `1e-3`, `1,234`) exactly. Returns `None`
/// for anything else.
pub fn parse_decimal(text: &str) -> Option<BigRational> {
    let text = text.trim();
    let (negative, unsigned) = match text.strip_prefix(['-', '−']) {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let unsigned = unsigned.replace(',', "");
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(i) => (&unsigned[..i], unsigned[i + 1..].parse::<i64>().ok()?),
        None => (unsigned.as_str(), 0),
    };
    let value = decimal_value(mantissa, exponent)?;
    Some(if negative { -value } else { value })
}

/// `mantissa` (digits with at most one `.`) times `10^exponent`, exactly.
pub(crate) fn decimal_value(mantissa: &str, exponent: i64) -> Option<BigRational> {
    if exponent.abs() > MAX_DECIMAL_EXPONENT {
        return None;
    }
    let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all_digits = |s: &str| s.chars().all(|c| c.is_ascii_digit());
    if (int_part.is_empty() && frac_part.is_empty())
        || !all_digits(int_part)
        || !all_digits(frac_part)
    {
        return None;
    }
    let digits: BigInt = format!("{int_part}{frac_part}").parse().ok()?;
    let scale = exponent - frac_part.len() as i64;
    let ten = BigInt::from(10u32);
    let power = ten.pow(scale.unsigned_abs() as u32);
    Some(if scale >= 0 {
        BigRational::from_integer(digits * power)
    } else {
        BigRational::new(digits, power)
    })
}

impl fmt::Display for Number {
    /// Integers in full; other exact values as decimals (exact when they terminate within
    /// 12 digits, else rounded to 12); floats in the shortest form that reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Number::Exact(r) if r.is_integer() => write!(f, "{}", r.numer()),
            Number::Exact(r) => match rounded_decimal(r, SHOWN_FRACTION_DIGITS) {
                Some(text) => f.write_str(&text),
                None => write_float(f, r.to_f64().unwrap_or(0.0)),
            },
            Number::Float(x) => write_float(f, *x),
        }
    }
}

/// `r` rounded half away from zero to `digits` fractional digits, trailing zeros removed;
/// `None` when that rounds a non-zero value to zero.
fn rounded_decimal(r: &BigRational, digits: usize) -> Option<String> {
    let scale = BigInt::from(10u32).pow(digits as u32);
    let scaled = (r.abs() * BigRational::from_integer(scale.clone()))
        .round()
        .to_integer();
    if scaled.is_zero() {
        return None;
    }
    let int_part = &scaled / &scale;
    let frac_part = &scaled % &scale;
    let mut frac = format!("{:0>width$}", frac_part.to_string(), width = digits);
    while frac.ends_with('0') {
        frac.pop();
    }
    let sign = if r.is_negative() { "-" } else { "" };
    Some(if frac.is_empty() {
        format!("{sign}{int_part}")
    } else {
        format!("{sign}{int_part}.{frac}")
    })
}

fn write_float(f: &mut fmt::Formatter<'_>, x: f64) -> fmt::Result {
    let abs = x.abs();
    if abs != 0.0 && !(1e-6..1e16).contains(&abs) {
        write!(f, "{x:e}")
    } else {
        write!(f, "{x}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exact(text: &str) -> Number {
        Number::Exact(parse_decimal(text).unwrap())
    }

    #[test]
    fn decimals_parse_exactly() {
        assert_eq!(exact("0.1").add(exact("0.2")).unwrap(), exact("0.3"));
        assert_eq!(exact("1.5e3"), Number::int(1500));
        assert_eq!(exact(".5").to_string(), "0.5");
        assert_eq!(exact("1,234").to_string(), "1234");
        assert_eq!(parse_decimal("12a"), None);
        assert_eq!(parse_decimal("."), None);
        assert_eq!(parse_decimal("1e99999"), None);
    }

    #[test]
    fn display_rounds_only_non_terminating_values() {
        assert_eq!(
            exact("1").div(exact("3")).unwrap().to_string(),
            "0.333333333333"
        );
        assert_eq!(
            exact("2").div(exact("3")).unwrap().to_string(),
            "0.666666666667"
        );
        assert_eq!(exact("-7").div(exact("4")).unwrap().to_string(), "-1.75");
        assert_eq!(exact("1e-20").to_string(), "1e-20");
        assert_eq!(Number::Float(2f64.sqrt()).to_string(), "1.4142135623730951");
    }

    #[test]
    fn powers() {
        assert_eq!(exact("2").pow(exact("-2")).unwrap().to_string(), "0.25");
        assert_eq!(exact("-1").pow(exact("1000001")).unwrap(), Number::int(-1));
        assert_eq!(exact("0").pow(exact("0")).unwrap(), Number::int(1));
        assert_eq!(exact("0").pow(exact("-1")), Err(ArithError::DivisionByZero));
        assert_eq!(exact("10").pow(exact("1000000")), Err(ArithError::TooLarge));
        assert_eq!(exact("-8").pow(exact("0.5")), Err(ArithError::NotReal));
        assert_eq!(exact("4").pow(exact("0.5")).unwrap(), Number::Float(2.0));
    }
}
