//! `--pace` and `--latency`: when play's answers go out. Unpaced, play answers at once; paced,
//! each message of an exchange goes out as long after its request arrived as it came after the
//! request in the recording (the tape's `t_us`, microseconds since the recording started),
//! scaled; `--latency` adds a random delay to every answer on top. The waits are per exchange,
//! in its own task: a paced slow call never holds back a fast one.

use std::time::Duration;

/// `--pace recorded|N`: the factor applied to the recorded offsets (`recorded` is 1).
pub fn parse_pace(s: &str) -> Result<f64, String> {
    if s == "recorded" {
        return Ok(1.0);
    }
    let f: f64 = s.parse().map_err(|_| {
        format!("{s:?} is neither `recorded` nor a factor such as 0.5 or 2 (the recorded latencies times N)")
    })?;
    // Up to a thousand times the recorded latencies: past that an answer would wait hours.
    // Below a thousandth, a recorded second is under a millisecond: 0 in effect (and printed
    // in full, a number of hundreds of digits). The reason does not repeat what was given: the
    // argument parser's message shows it already, and it may be hundreds of digits long.
    if !(f == 0.0 || (f.is_finite() && (0.001..=1000.0).contains(&f))) {
        return Err(
            "not a usable factor: give one from 0.001 to 1000 (the recorded latencies times N), or 0 for no waiting".into(),
        );
    }
    Ok(f)
}

/// The longest `--latency` or `stall=DURATION` accepted: a day. Longer is no test of a client's
/// patience but a typo (and far enough out, past the clock's range); `stall` alone never answers.
pub const LONGEST_DELAY: Duration = Duration::from_secs(24 * 60 * 60);

/// A delay no longer than [`LONGEST_DELAY`], else why not, in words.
pub(crate) fn bounded_delay(d: Duration, what: &str) -> Result<Duration, String> {
    if d > LONGEST_DELAY {
        return Err(format!(
            "{what} is longer than a day, the longest delay play adds (a `stall` with no duration never answers)"
        ));
    }
    Ok(d)
}

/// `--latency MIN..MAX`: a delay drawn anew (seeded) for every answer, uniform in the range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Latency {
    /// The shortest delay added.
    pub min: Duration,
    /// The longest delay added.
    pub max: Duration,
}

impl std::str::FromStr for Latency {
    type Err = String;

    /// `20ms..200ms`, `1s..2s`; one duration (`50ms`) is a fixed delay.
    fn from_str(s: &str) -> Result<Latency, String> {
        let one = |d: &str| {
            let d = d.trim();
            humantime::parse_duration(d)
                .map_err(|e| format!("{d:?} in {s:?} is not a duration such as 20ms or 1.5s ({e})"))
                .and_then(|v| bounded_delay(v, &format!("{d:?} in {s:?}")))
        };
        let (min, max) = match s.split_once("..") {
            Some((a, b)) => (one(a)?, one(b)?),
            None => {
                let d = one(s)?;
                (d, d)
            }
        };
        if min > max {
            return Err(format!("{s}: the minimum is longer than the maximum"));
        }
        Ok(Latency { min, max })
    }
}

impl std::fmt::Display for Latency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}..{:?}", self.min, self.max)
    }
}

impl Latency {
    /// The delay for a draw `u` in `[0, 1)`.
    pub(crate) fn at(&self, u: f64) -> Duration {
        self.min + (self.max - self.min).mul_f64(u.clamp(0.0, 1.0))
    }
}

/// A recorded offset in microseconds, scaled by `pace`.
pub(crate) fn scaled(offset_us: u64, pace: f64) -> Duration {
    Duration::from_micros(offset_us).mul_f64(pace)
}

/// Waits until `at`, or until `stop` completes (the client went away): `false` then. Both are
/// cancel-safe (a sleep, and whatever `stop` is: a watch wait or a channel closing), so the
/// loser of the select is simply dropped.
pub(crate) async fn wait_until(
    at: tokio::time::Instant,
    stop: impl std::future::Future<Output = ()>,
) -> bool {
    tokio::select! {
        _ = tokio::time::sleep_until(at) => true,
        _ = stop => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_longer_than_a_day_is_refused() {
        assert!("24h".parse::<Latency>().is_ok());
        for bad in ["18446744073709551615s", "1ms..25h", "300000000000years"] {
            let e = bad.parse::<Latency>().unwrap_err();
            assert!(e.contains("longer than a day"), "{bad}: {e}");
        }
    }

    #[test]
    fn pace_is_recorded_or_a_factor() {
        assert_eq!(parse_pace("recorded"), Ok(1.0));
        assert_eq!(parse_pace("0.5"), Ok(0.5));
        assert_eq!(parse_pace("2"), Ok(2.0));
        assert_eq!(parse_pace("0"), Ok(0.0));
        assert_eq!(parse_pace("0.001"), Ok(0.001));
        for bad in [
            "", "fast", "-1", "NaN", "inf", "1001", "1e-300", "0.0009", "-0.0001",
        ] {
            assert!(parse_pace(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn latency_is_a_range_or_one_duration() {
        let l: Latency = "20ms..200ms".parse().unwrap();
        assert_eq!(
            (l.min, l.max),
            (Duration::from_millis(20), Duration::from_millis(200))
        );
        assert_eq!(l.at(0.0), Duration::from_millis(20));
        assert_eq!(l.at(0.5), Duration::from_millis(110));
        let fixed: Latency = "50ms".parse().unwrap();
        assert_eq!(
            (fixed.min, fixed.max),
            (Duration::from_millis(50), Duration::from_millis(50))
        );
        assert!("200ms..20ms"
            .parse::<Latency>()
            .unwrap_err()
            .contains("minimum is longer"));
        assert!("20..200"
            .parse::<Latency>()
            .unwrap_err()
            .contains("not a duration"));
        assert_eq!(l.to_string(), "20ms..200ms");
    }

    #[test]
    fn offsets_scale() {
        assert_eq!(scaled(300_000, 1.0), Duration::from_millis(300));
        assert_eq!(scaled(300_000, 0.5), Duration::from_millis(150));
        assert_eq!(scaled(300_000, 0.0), Duration::ZERO);
    }
}
