//! Conversions between the engine's time (nanoseconds since the Unix epoch) and API timestamps.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_openapi::jiff::Timestamp;

use tailor_engine::units::Nanos;

/// API `Time` (second precision on the wire) for engine nanoseconds; `None` if out of range.
pub fn to_time(t: Nanos) -> Option<Time> {
    Timestamp::from_nanosecond(t as i128).ok().map(Time)
}

/// Like [`to_time`], truncated to whole seconds so it survives a round trip through the API unchanged.
pub fn to_time_secs(t: Nanos) -> Option<Time> {
    to_time(t.div_euclid(1_000_000_000) * 1_000_000_000)
}

/// API `MicroTime` for engine nanoseconds.
pub fn to_micro_time(t: Nanos) -> Option<MicroTime> {
    Timestamp::from_nanosecond(t as i128).ok().map(MicroTime)
}

/// Engine nanoseconds of an API `Time`; `None` if it does not fit.
pub fn from_time(t: &Time) -> Option<Nanos> {
    from_timestamp(t.0)
}

/// Engine nanoseconds of a jiff timestamp; `None` if it does not fit.
pub fn from_timestamp(t: Timestamp) -> Option<Nanos> {
    i64::try_from(t.as_nanosecond()).ok()
}

/// Engine nanoseconds of an RFC 3339 string.
pub fn parse_rfc3339(s: &str) -> Option<Nanos> {
    s.parse::<Timestamp>().ok().and_then(from_timestamp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_whole_seconds() {
        let t = 1_700_000_000_123_456_789;
        let secs = to_time_secs(t).unwrap();
        assert_eq!(from_time(&secs), Some(1_700_000_000_000_000_000));
        assert_eq!(
            parse_rfc3339("2023-11-14T22:13:20Z"),
            Some(1_700_000_000_000_000_000)
        );
        assert_eq!(from_time(&to_time(t).unwrap()), Some(t));
    }
}
