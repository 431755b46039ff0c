//! Stable hashes and the weighted rendezvous draw.
//!
//! Placement must give the same answer on every mon, build and architecture, so nothing here uses
//! `std`'s randomly seeded hashers or the platform's `ln`, whose last bits may differ between
//! libm implementations. The hash is the SplitMix64 finalizer, and the logarithm is a short
//! series using only IEEE basic operations, which round identically everywhere.

/// Salts that keep the hashes for different decisions independent.
#[derive(Clone, Copy)]
pub(crate) enum Purpose {
    /// The rendezvous draw for a PG with no surviving member.
    Rendezvous = 1,
    /// The tie-break between equally good OSDs when filling an empty slot.
    Fill = 2,
    /// The choice of PG when a replica slot moves from one OSD to another.
    Move = 3,
    /// The choice of a new primary among equally good members, and of the PG whose primary
    /// role moves from one OSD to another.
    Primary = 4,
}

/// SplitMix64's output function: a bijection on `u64` with good avalanche.
fn mix(value: u64) -> u64 {
    let mut x = value.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A stable hash of one decision about OSD `osd_id` in PG `pg` of pool `pool_id`.
pub(crate) fn hash(purpose: Purpose, pool_id: u32, pg: usize, osd_id: u32) -> u64 {
    let pool_and_purpose = (u64::from(pool_id) << 8) | purpose as u64;
    mix(mix(mix(pool_and_purpose) ^ pg as u64) ^ u64::from(osd_id))
}

/// The weighted rendezvous key of an OSD for a PG: `-ln(u) / weight` with `u` uniform in (0, 1]
/// taken from `hash`. The OSD with the smallest key wins, and an OSD wins with probability
/// proportional to its weight (the keys are exponentially distributed with rate `weight`).
pub(crate) fn rendezvous_key(hash: u64, inverse_weight: f64) -> f64 {
    // The top 53 bits plus one, scaled, give a value in [2^-53, 1] that f64 represents exactly.
    let uniform = ((hash >> 11) + 1) as f64 * (1.0 / (1_u64 << 53) as f64);
    -ln(uniform) * inverse_weight
}

/// The natural logarithm of a normal, positive `x`, to about 1e-8 relative error, computed
/// identically on every IEEE 754 platform.
fn ln(x: f64) -> f64 {
    assert!(x.is_normal());
    assert!(x > 0.0);
    let bits = x.to_bits();
    let biased_exponent = (bits >> 52) & 0x7FF;
    // Replace the exponent by 0 (biased 1023): the mantissa as a value in [1, 2).
    let mantissa = f64::from_bits((bits & ((1_u64 << 52) - 1)) | (1023_u64 << 52));
    // ln(m) = 2 atanh(t) with t = (m - 1) / (m + 1) in [0, 1/3).
    let t = (mantissa - 1.0) / (mantissa + 1.0);
    let t2 = t * t;
    let series = t
        * (1.0
            + t2 * (1.0 / 3.0
                + t2 * (1.0 / 5.0
                    + t2 * (1.0 / 7.0 + t2 * (1.0 / 9.0 + t2 * (1.0 / 11.0 + t2 * (1.0 / 13.0 + t2 / 15.0)))))));
    (biased_exponent as f64 - 1023.0) * std::f64::consts::LN_2 + 2.0 * series
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ln_matches_std() {
        let mut x = 1.0_f64;
        while x > 1e-16 {
            let expected = x.ln();
            let actual = ln(x);
            assert!((actual - expected).abs() <= 1e-8 * expected.abs().max(1.0), "x={x} {actual} != {expected}");
            x *= 0.937;
        }
        assert_eq!(ln(1.0), 0.0);
    }

    #[test]
    fn hash_is_stable() {
        // Pinned values: a change here changes every pool's layout, which needs a migration plan.
        assert_eq!(hash(Purpose::Rendezvous, 0, 0, 0), 0xb18a_02f4_6d8d_86c3);
        assert_ne!(hash(Purpose::Rendezvous, 0, 0, 1), hash(Purpose::Rendezvous, 0, 1, 0));
        assert_ne!(hash(Purpose::Rendezvous, 1, 0, 0), hash(Purpose::Fill, 1, 0, 0));
    }
}
