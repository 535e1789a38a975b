//! Text to expression tree: a lexer and a recursive-descent parser that remember where
//! each piece came from, so errors can point at it.

use super::CalcError;
use super::number::{Number, decimal_value};

/// Longest expression accepted.
pub(crate) const MAX_LEN: usize = 4_000;
/// Deepest nesting accepted (keeps the recursion far from the stack limit).
const MAX_DEPTH: usize = 200;

/// A range of characters, 0-based, end exclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub start: usize,
    pub end: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Expr {
    Num(Number, Span),
    Neg(Box<Expr>, Span),
    Bin(Op, Box<Expr>, Box<Expr>, Span),
}

impl Expr {
    pub(crate) fn span(&self) -> Span {
        match self {
            Expr::Num(_, s) | Expr::Neg(_, s) | Expr::Bin(_, _, _, s) => *s,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Num(Number),
    Op(Op),
    Minus,
    Plus,
    Open,
    Close,
}

fn describe(token: Option<&Token>) -> String {
    match token {
        None => "the end of the expression".to_string(),
        Some(Token::Num(n)) => format!("the number {n}"),
        Some(Token::Op(op)) => format!("`{}`", op_text(*op)),
        Some(Token::Minus) => "`-`".to_string(),
        Some(Token::Plus) => "`+`".to_string(),
        Some(Token::Open) => "`(`".to_string(),
        Some(Token::Close) => "`)`".to_string(),
    }
}

fn op_text(op: Op) -> &'static str {
    match op {
        Op::Add => "+",
        Op::Sub => "-",
        Op::Mul => "*",
        Op::Div => "/",
        Op::Pow => "^",
    }
}

fn syntax(position: usize, message: impl Into<String>) -> CalcError {
    CalcError::Syntax {
        position: position + 1,
        message: message.into(),
    }
}

fn lex(chars: &[char]) -> Result<Vec<(Token, Span)>, CalcError> {
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let start = i;
        let single = match c {
            c if c.is_whitespace() => {
                i += 1;
                continue;
            }
            '+' => Some(Token::Plus),
            '-' | '−' => Some(Token::Minus),
            '*' if chars.get(i + 1) == Some(&'*') => {
                i += 1;
                Some(Token::Op(Op::Pow))
            }
            '*' | '×' => Some(Token::Op(Op::Mul)),
            '/' | '÷' => Some(Token::Op(Op::Div)),
            '^' => Some(Token::Op(Op::Pow)),
            '(' => Some(Token::Open),
            ')' => Some(Token::Close),
            _ => None,
        };
        if let Some(token) = single {
            i += 1;
            tokens.push((token, Span { start, end: i }));
            continue;
        }
        if c.is_ascii_digit() || c == '.' {
            while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
                i += 1;
            }
            let mantissa: String = chars[start..i].iter().collect();
            let mut exponent = 0i64;
            if i < chars.len() && (chars[i] == 'e' || chars[i] == 'E') {
                let mut j = i + 1;
                if j < chars.len() && (chars[j] == '+' || chars[j] == '-') {
                    j += 1;
                }
                let digits_start = j;
                while j < chars.len() && chars[j].is_ascii_digit() {
                    j += 1;
                }
                if j == digits_start {
                    return Err(syntax(
                        i,
                        "an exponent (`e`) must be followed by digits, as in 1.5e3",
                    ));
                }
                let text: String = chars[i + 1..j].iter().collect();
                exponent = text.parse().unwrap_or(i64::MAX);
                i = j;
            }
            if mantissa.matches('.').count() > 1 {
                return Err(syntax(
                    start,
                    format!("`{mantissa}` is not a number: it has more than one `.`"),
                ));
            }
            let value = decimal_value(&mantissa, exponent).ok_or_else(|| {
                if mantissa == "." {
                    syntax(start, "a lone `.` is not a number")
                } else {
                    CalcError::TooLarge {
                        expression: chars[start..i].iter().collect(),
                        position: start + 1,
                    }
                }
            })?;
            tokens.push((Token::Num(Number::Exact(value)), Span { start, end: i }));
            continue;
        }
        let hint = if c == ',' {
            " (write numbers without thousands separators, e.g. 1234)"
        } else if c.is_alphabetic() {
            " (only numbers and + - * / ^ ( ) are understood)"
        } else {
            ""
        };
        return Err(syntax(start, format!("unexpected character `{c}`{hint}")));
    }
    Ok(tokens)
}

/// Parses `text` into an expression tree.
pub(crate) fn parse(text: &str) -> Result<Expr, CalcError> {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() > MAX_LEN {
        return Err(CalcError::TooLong {
            len: chars.len(),
            max: MAX_LEN,
        });
    }
    let tokens = lex(&chars)?;
    if tokens.is_empty() {
        return Err(CalcError::Empty);
    }
    let mut parser = Parser {
        tokens,
        pos: 0,
        depth: 0,
        len: chars.len(),
    };
    let expr = parser.expr()?;
    if let Some((token, span)) = parser.tokens.get(parser.pos) {
        let message = if *token == Token::Close {
            "`)` has no matching `(`".to_string()
        } else {
            format!("expected an operator before {}", describe(Some(token)))
        };
        return Err(syntax(span.start, message));
    }
    Ok(expr)
}

struct Parser {
    tokens: Vec<(Token, Span)>,
    pos: usize,
    depth: usize,
    len: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos).map(|(t, _)| t)
    }

    fn here(&self) -> usize {
        self.tokens.get(self.pos).map_or(self.len, |(_, s)| s.start)
    }

    fn enter(&mut self) -> Result<(), CalcError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(syntax(
                self.here(),
                format!("nesting deeper than {MAX_DEPTH} levels"),
            ));
        }
        Ok(())
    }

    fn expr(&mut self) -> Result<Expr, CalcError> {
        let mut lhs = self.term()?;
        loop {
            let op = match self.peek() {
                Some(Token::Plus) => Op::Add,
                Some(Token::Minus) => Op::Sub,
                _ => return Ok(lhs),
            };
            self.pos += 1;
            let rhs = self.term()?;
            lhs = binary(op, lhs, rhs);
        }
    }

    fn term(&mut self) -> Result<Expr, CalcError> {
        let mut lhs = self.unary()?;
        loop {
            let op = match self.peek() {
                Some(Token::Op(op @ (Op::Mul | Op::Div))) => *op,
                _ => return Ok(lhs),
            };
            self.pos += 1;
            let rhs = self.unary()?;
            lhs = binary(op, lhs, rhs);
        }
    }

    fn unary(&mut self) -> Result<Expr, CalcError> {
        self.enter()?;
        let result = match self.peek() {
            Some(Token::Minus) => {
                let start = self.here();
                self.pos += 1;
                let inner = self.unary()?;
                let span = Span {
                    start,
                    end: inner.span().end,
                };
                Ok(Expr::Neg(Box::new(inner), span))
            }
            Some(Token::Plus) => {
                self.pos += 1;
                self.unary()
            }
            _ => self.power(),
        };
        self.depth -= 1;
        result
    }

    fn power(&mut self) -> Result<Expr, CalcError> {
        let base = self.primary()?;
        if self.peek() == Some(&Token::Op(Op::Pow)) {
            self.pos += 1;
            let exponent = self.unary()?;
            return Ok(binary(Op::Pow, base, exponent));
        }
        Ok(base)
    }

    fn primary(&mut self) -> Result<Expr, CalcError> {
        let at = self.here();
        match self.tokens.get(self.pos).cloned() {
            Some((Token::Num(n), span)) => {
                self.pos += 1;
                Ok(Expr::Num(n, span))
            }
            Some((Token::Open, open)) => {
                self.pos += 1;
                let inner = self.expr()?;
                match self.tokens.get(self.pos) {
                    Some((Token::Close, close)) => {
                        let span = Span {
                            start: open.start,
                            end: close.end,
                        };
                        self.pos += 1;
                        Ok(reparen(inner, span))
                    }
                    other => Err(syntax(
                        self.here(),
                        format!(
                            "expected `)` to close the `(` at position {}, found {}",
                            open.start + 1,
                            describe(other.map(|(t, _)| t))
                        ),
                    )),
                }
            }
            other => Err(syntax(
                at,
                format!(
                    "expected a number or `(`, found {}",
                    describe(other.as_ref().map(|(t, _)| t))
                ),
            )),
        }
    }
}

fn binary(op: Op, lhs: Expr, rhs: Expr) -> Expr {
    let span = Span {
        start: lhs.span().start,
        end: rhs.span().end,
    };
    Expr::Bin(op, Box::new(lhs), Box::new(rhs), span)
}

/// The node with its span widened to include the parentheses around it.
fn reparen(expr: Expr, span: Span) -> Expr {
    match expr {
        Expr::Num(n, _) => Expr::Num(n, span),
        Expr::Neg(e, _) => Expr::Neg(e, span),
        Expr::Bin(op, a, b, _) => Expr::Bin(op, a, b, span),
    }
}
