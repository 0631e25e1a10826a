//! Durations as users write them, one parser for the three places they are written, each
//! with its own [`Grammar`]: Gateway API fields (`1h30m`, `500ms`: GEP-2257), the
//! binary's flags (`250ms`, `1.5s`, or plain seconds) and ACME `renew-before` (`720h`,
//! `30d`).

use std::time::Duration;

/// What a place accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grammar {
    /// The units, each with its length in milliseconds.
    pub units: &'static [(&'static str, u64)],
    /// How many number-unit pairs may follow one another (`1h30m` is two).
    pub max_pairs: usize,
    /// How many digits a number may have; `None`: any.
    pub max_digits: Option<usize>,
    /// A number may have a fraction (`1.5s`).
    pub fractions: bool,
    /// A number alone is in this unit (milliseconds); `None`: a unit is required.
    pub bare: Option<u64>,
}

const SECOND: u64 = 1_000;
const MINUTE: u64 = 60 * SECOND;
const HOUR: u64 = 60 * MINUTE;
const DAY: u64 = 24 * HOUR;

/// Gateway API durations (GEP-2257): one to four pairs of up to five digits and `h`, `m`,
/// `s` or `ms`.
pub const GATEWAY_API: Grammar = Grammar {
    units: &[("ms", 1), ("h", HOUR), ("m", MINUTE), ("s", SECOND)],
    max_pairs: 4,
    max_digits: Some(5),
    fractions: false,
    bare: None,
};

/// The binary's flags: one number, fractions allowed, in `ms`, `s`, `m` or `h`, or plain
/// seconds.
pub const FLAGS: Grammar = Grammar {
    units: &[("ms", 1), ("h", HOUR), ("m", MINUTE), ("s", SECOND)],
    max_pairs: 1,
    max_digits: None,
    fractions: true,
    bare: Some(SECOND),
};

/// ACME `renew-before`: one whole number of `s`, `m`, `h` or `d`.
pub const ACME: Grammar = Grammar {
    units: &[("s", SECOND), ("m", MINUTE), ("h", HOUR), ("d", DAY)],
    max_pairs: 1,
    max_digits: None,
    fractions: false,
    bare: None,
};

/// `s` in `grammar`, or `None` when it does not follow it (or overflows).
pub fn parse(s: &str, grammar: &Grammar) -> Option<Duration> {
    let mut total: u64 = 0;
    let mut rest = s;
    let mut pairs = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let fraction = match rest.as_bytes().get(digits) {
            Some(b'.') if grammar.fractions => 1 + rest[digits + 1..].bytes().take_while(u8::is_ascii_digit).count(),
            _ => 0,
        };
        if digits + fraction <= usize::from(fraction > 0) || grammar.max_digits.is_some_and(|max| digits > max) {
            return None;
        }
        let (number, after) = rest.split_at(digits + fraction);
        let (unit, len) = match grammar.units.iter().find(|(name, _)| after.starts_with(name)) {
            Some(&(name, ms)) => (ms, name.len()),
            None if after.is_empty() && pairs == 0 => (grammar.bare?, 0),
            None => return None,
        };
        total = total.checked_add(milliseconds(number, unit)?)?;
        rest = &after[len..];
        pairs += 1;
    }
    (pairs > 0 && pairs <= grammar.max_pairs).then(|| Duration::from_millis(total))
}

/// `number` (digits, perhaps a `.` and more digits) times `unit` milliseconds, the
/// fraction's milliseconds rounded down.
fn milliseconds(number: &str, unit: u64) -> Option<u64> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let whole = if whole.is_empty() { 0 } else { whole.parse::<u64>().ok()? };
    let mut ms = whole.checked_mul(unit)?;
    let mut scale = unit;
    for digit in fraction.bytes().take(12) {
        scale /= 10;
        ms = ms.checked_add(u64::from(digit - b'0') * scale)?;
    }
    Some(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(s: &str, g: &Grammar) -> Option<u128> {
        parse(s, g).map(|d| d.as_millis())
    }

    #[test]
    fn gateway_api_durations_are_one_to_four_whole_pairs() {
        let g = &GATEWAY_API;
        for (s, want) in [
            ("500ms", 500),
            ("1s", 1_000),
            ("2m", 120_000),
            ("1h30m", 5_400_000),
            ("1h1m1s1ms", 3_661_001),
            ("0s", 0),
            ("99999ms", 99_999),
        ] {
            assert_eq!(ms(s, g), Some(want), "{s}");
        }
        for bad in ["", "1", "s", "1.5s", "1d", "100000ms", "1h1m1s1ms1ms", "-1s", "1 s", "1S", "1s "] {
            assert_eq!(ms(bad, g), None, "{bad:?}");
        }
    }

    #[test]
    fn flags_take_one_number_a_fraction_or_plain_seconds() {
        let g = &FLAGS;
        for (s, want) in [("250ms", 250), ("5s", 5_000), ("2m", 120_000), ("1h", 3_600_000), ("3", 3_000)] {
            assert_eq!(ms(s, g), Some(want), "{s}");
        }
        for bad in ["", "5 parsecs", "1m30s", "5w", "-1s", "1.5.s", ".", ".s", "s"] {
            assert_eq!(ms(bad, g), None, "{bad:?}");
        }
    }

    #[test]
    fn fractions_count_where_a_grammar_takes_them() {
        for (s, want) in [("1.5s", 1_500), ("0.25m", 15_000), ("2.", 2_000), (".5s", 500), ("1.0009s", 1_000)] {
            assert_eq!(ms(s, &FLAGS), Some(want), "{s}");
        }
        assert_eq!(ms("0.5ms", &FLAGS), Some(0), "below a millisecond");
        assert_eq!(ms("1.5s", &GATEWAY_API), None);
        assert_eq!(ms("1.5h", &ACME), None);
    }

    #[test]
    fn acme_renewals_are_whole_seconds_minutes_hours_or_days() {
        for (s, secs) in [("90s", 90), ("30m", 1800), ("2h", 7200), ("3d", 259_200)] {
            assert_eq!(parse(s, &ACME), Some(Duration::from_secs(secs)), "{s}");
        }
        for bad in ["", "h", "5", "5w", "-5s", "99999999999999999999d", "213503982335d", "1d1h"] {
            assert_eq!(parse(bad, &ACME), None, "{bad}");
        }
    }

    #[test]
    fn sums_that_overflow_are_refused() {
        let g = Grammar { max_pairs: 2, ..ACME };
        assert_eq!(parse("213503982334d1d", &g), None);
        assert_eq!(parse("1d1h", &g), Some(Duration::from_secs(90_000)));
    }
}
