//! The texts a JSON number is scanned as. Card numbers are bare digits, and a number written
//! with a fraction or an exponent (`4111111111111111.0`, `4.111111111111111e15`) still shows
//! its digits to a reader, while the detectors take `4111111111111111.0` for a version number.

use std::borrow::Cow;
use std::fmt::Write;

use crate::error::Result;

/// Longest integer part checked as digits: longer than any personal number.
const MAX_INTEGER_DIGITS: usize = 40;

/// Room for the texts of the common numbers, kept on the stack.
const INLINE: usize = 48;

/// A short text written on the stack.
pub(crate) struct StackText {
    bytes: [u8; INLINE],
    len: usize,
}

impl StackText {
    pub(crate) fn new() -> StackText {
        StackText {
            bytes: [0; INLINE],
            len: 0,
        }
    }

    pub(crate) fn as_str(&self) -> &str {
        self.bytes
            .get(..self.len)
            .and_then(|b| std::str::from_utf8(b).ok())
            .unwrap_or_default()
    }
}

impl Write for StackText {
    fn write_str(&mut self, text: &str) -> std::fmt::Result {
        let end = self.len + text.len();
        let slot = self.bytes.get_mut(self.len..end).ok_or(std::fmt::Error)?;
        slot.copy_from_slice(text.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// The parts of a number with a fraction or an exponent: `-?int(.frac)?(e[+-]?exp)?`.
struct Parts<'a> {
    int: &'a str,
    frac: &'a str,
    exp: i64,
}

impl<'a> Parts<'a> {
    /// `None` for a plain integer (its literal is all there is to check) and for a text that
    /// is not a number.
    fn of(literal: &'a str) -> Option<Parts<'a>> {
        let unsigned = literal.strip_prefix('-').unwrap_or(literal);
        let (mantissa, exp) = match unsigned.find(['e', 'E']) {
            Some(at) => {
                let exp = &unsigned[at + 1..];
                let digits = exp.trim_start_matches(['+', '-']);
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                // An exponent beyond i64 is far beyond any number's digits either way.
                let far = if exp.starts_with('-') {
                    -(1 << 40)
                } else {
                    1 << 40
                };
                (&unsigned[..at], exp.parse::<i64>().unwrap_or(far))
            }
            None => (unsigned, 0),
        };
        let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        let shaped = !int.is_empty() && digits(int) && digits(frac);
        let plain = !mantissa.contains('.') && unsigned.len() == mantissa.len();
        (shaped && !plain).then_some(Parts { int, frac, exp })
    }

    /// The `i`th digit of `int` followed by `frac`, `0` past their end.
    fn digit(&self, i: usize) -> u8 {
        let int = self.int.as_bytes();
        let frac = self.frac.as_bytes();
        int.get(i)
            .or_else(|| frac.get(i.wrapping_sub(int.len())))
            .copied()
            .unwrap_or(b'0')
    }

    /// The digits of the value's integer part without leading zeros, when it has any and at
    /// most [`MAX_INTEGER_DIGITS`].
    fn integer(&self, out: &mut StackText) -> Option<()> {
        let point = i64::try_from(self.int.len()).ok()?.checked_add(self.exp)?;
        let point = usize::try_from(point).ok().filter(|p| *p > 0)?;
        let written = self.int.len() + self.frac.len();
        let first = (0..point.min(written)).find(|i| self.digit(*i) != b'0')?;
        if point - first > MAX_INTEGER_DIGITS {
            return None;
        }
        for i in first..point {
            out.write_char(char::from(self.digit(i))).ok()?;
        }
        Some(())
    }

    /// The significant digits: `int` and `frac` without leading and trailing zeros.
    fn significand(&self) -> Cow<'a, str> {
        let int = self.int.trim_start_matches('0');
        let frac = self.frac.trim_end_matches('0');
        if frac.is_empty() {
            return Cow::Borrowed(int.trim_end_matches('0'));
        }
        if int.is_empty() {
            return Cow::Borrowed(frac.trim_start_matches('0'));
        }
        Cow::Owned(format!("{int}{frac}"))
    }
}

/// Calls `check` with each text that `literal` is scanned as, until one returns `Some`: the
/// literal itself; then, for a literal with a fraction or an exponent, the digits of its
/// integer part (`4111111111111111.0` and `4.111111111111111e15` give `4111111111111111`)
/// and its significant digits (`4.111111111111111e3` gives `4111111111111111`).
pub(crate) fn each_form<T>(
    literal: &str,
    mut check: impl FnMut(&str) -> Result<Option<T>>,
) -> Result<Option<T>> {
    if let Some(found) = check(literal)? {
        return Ok(Some(found));
    }
    let Some(parts) = Parts::of(literal) else {
        return Ok(None);
    };
    let mut integer = StackText::new();
    let integer = parts.integer(&mut integer).map(|()| integer);
    let integer = integer.as_ref().map(StackText::as_str);
    if let Some(integer) = integer
        && integer != literal
        && let Some(found) = check(integer)?
    {
        return Ok(Some(found));
    }
    let significand = parts.significand();
    if significand.is_empty() || Some(significand.as_ref()) == integer || significand == literal {
        return Ok(None);
    }
    check(&significand)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forms(literal: &str) -> Vec<String> {
        let mut seen = Vec::new();
        let none: Result<Option<()>> = each_form(literal, |form| {
            seen.push(form.to_owned());
            Ok(None)
        });
        assert!(matches!(none, Ok(None)));
        seen
    }

    #[test]
    fn a_plain_integer_is_its_own_only_form() {
        assert_eq!(forms("4111111111111111"), ["4111111111111111"]);
        assert_eq!(forms("-12"), ["-12"]);
    }

    #[test]
    fn fractions_and_exponents_are_also_read_as_digits() {
        assert_eq!(
            forms("4111111111111111.0"),
            ["4111111111111111.0", "4111111111111111"]
        );
        assert_eq!(
            forms("4.111111111111111e15"),
            ["4.111111111111111e15", "4111111111111111"]
        );
        assert_eq!(
            forms("41111111111111110E-1"),
            ["41111111111111110E-1", "4111111111111111"]
        );
        assert_eq!(
            forms("4.111111111111111e3"),
            ["4.111111111111111e3", "4111", "4111111111111111"]
        );
        assert_eq!(forms("-0.00411e+2"), ["-0.00411e+2", "411"]);
        assert_eq!(forms("0.2"), ["0.2", "2"]);
        assert_eq!(forms("1e3"), ["1e3", "1000", "1"]);
        assert_eq!(
            forms("4111111111111111e30"),
            ["4111111111111111e30", "4111111111111111"]
        );
        assert_eq!(
            forms("1e99999999999999999999"),
            ["1e99999999999999999999", "1"]
        );
        assert_eq!(forms("0.0e99999999999"), ["0.0e99999999999"]);
        assert_eq!(forms("0.0"), ["0.0"]);
    }

    #[test]
    fn the_first_form_with_a_finding_ends_the_search() {
        let mut seen = 0;
        let found = each_form("4111111111111111.0", |form| {
            seen += 1;
            Ok((form.len() == 16).then_some(form.to_owned()))
        });
        assert_eq!(found.unwrap().as_deref(), Some("4111111111111111"));
        assert_eq!(seen, 2);
    }
}
