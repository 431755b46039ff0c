//! Latency figures shared by the benchmarks (`basalt engine bench`, `basalt bench`): the mean
//! and nearest-rank percentiles of latency samples in nanoseconds, the median of the floors'
//! windows, and rounding for output.

/// The smallest sample at or above `fraction` of the samples (nearest rank), or zero.
pub fn percentile_ns(samples: &mut [u64], fraction: f64) -> u64 {
    if samples.is_empty() {
        return 0;
    }
    let rank = ((samples.len() as f64 * fraction).ceil() as usize).clamp(1, samples.len());
    *samples.select_nth_unstable(rank - 1).1
}

/// The mean of nanosecond samples, in microseconds; zero without samples.
pub fn mean_us(samples_ns: &[u64]) -> f64 {
    if samples_ns.is_empty() {
        return 0.0;
    }
    samples_ns.iter().map(|&sample| sample as f64).sum::<f64>() / samples_ns.len() as f64 / 1000.0
}

/// The median of window figures (the mean of the middle two for an even count).
pub fn median(values: &mut [f64]) -> f64 {
    assert!(!values.is_empty(), "a median needs at least one window");
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    if values.len() % 2 == 1 {
        values[middle]
    } else {
        (values[middle - 1] + values[middle]) / 2.0
    }
}

pub fn round_to(value: f64, decimals: i32) -> f64 {
    let scale = 10f64.powi(decimals);
    (value * scale).round() / scale
}

#[cfg(test)]
mod tests {
    use super::{mean_us, percentile_ns, round_to};

    #[test]
    fn percentile_is_nearest_rank() {
        let mut samples: Vec<u64> = (1..=100).rev().collect();
        assert_eq!(percentile_ns(&mut samples, 0.99), 99);
        assert_eq!(percentile_ns(&mut samples, 0.5), 50);
        assert_eq!(percentile_ns(&mut [7], 0.99), 7);
        assert_eq!(percentile_ns(&mut [], 0.99), 0);
    }

    #[test]
    fn mean_is_in_microseconds_and_rounding_keeps_decimals() {
        assert_eq!(mean_us(&[1000, 3000]), 2.0);
        assert_eq!(mean_us(&[]), 0.0);
        assert_eq!(round_to(12.345, 1), 12.3);
    }
}
