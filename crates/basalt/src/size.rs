//! Byte sizes on the command line and in output: plain bytes or a binary K/M/G/T suffix.
//!
//! `4096`, `4K`, `4k`, `128KiB`, `2G` and `1.5G` are accepted; suffixes are powers of 1024, as
//! in the rig scripts' `to_bytes`, so `--size 2G` means the same to `basalt` and to fio.

/// Parses a size for clap's `value_parser`. The error names the problem, clap adds the option.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let digits_end = trimmed.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(trimmed.len());
    let (number, suffix) = trimmed.split_at(digits_end);
    if number.is_empty() {
        return Err(format!("'{text}' is not a size (expected bytes or a number with K, M, G or T)"));
    }
    let shift = match suffix.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err(format!("'{text}' has an unknown unit '{suffix}' (use K, M, G or T)")),
    };
    let multiplier = 1u64 << shift;
    if let Ok(whole) = number.parse::<u64>() {
        return whole.checked_mul(multiplier).ok_or_else(|| format!("'{text}' does not fit in 64 bits"));
    }
    // A fraction is allowed with a unit ("1.5G"), and must come out as whole bytes.
    let value: f64 = number.parse().map_err(|_| format!("'{text}' is not a size"))?;
    let bytes = value * multiplier as f64;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 || bytes.fract() != 0.0 {
        return Err(format!("'{text}' is not a whole number of bytes"));
    }
    Ok(bytes as u64)
}

/// Formats a byte count for people: exact when it is a whole number of a binary unit
/// ("128 KiB"), otherwise with two decimals ("1.87 GiB").
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [(u32, &str); 4] = [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")];
    for (shift, unit) in UNITS {
        let unit_bytes = 1u64 << shift;
        if bytes >= unit_bytes {
            if bytes.is_multiple_of(unit_bytes) {
                return format!("{} {unit}", bytes >> shift);
            }
            return format!("{:.2} {unit}", bytes as f64 / unit_bytes as f64);
        }
    }
    format!("{bytes} B")
}

#[cfg(test)]
mod tests {
    use super::{format_bytes, parse_bytes};

    fn check(input: &str, expect: Result<u64, ()>) {
        assert_eq!(parse_bytes(input).map_err(|_| ()), expect, "input {input:?}");
    }

    #[test]
    fn parses_plain_bytes_and_binary_suffixes() {
        check("4096", Ok(4096));
        check("4K", Ok(4096));
        check("4k", Ok(4096));
        check("128KiB", Ok(128 << 10));
        check("256M", Ok(256 << 20));
        check("2G", Ok(2 << 30));
        check("1T", Ok(1 << 40));
        check("1.5G", Ok(3 << 29));
        check("", Err(()));
        check("G", Err(()));
        check("4X", Err(()));
        check("0.3", Err(()));
        check("99999999999T", Err(()));
    }

    #[test]
    fn formats_exact_and_rounded_sizes() {
        assert_eq!(format_bytes(131072), "128 KiB");
        assert_eq!(format_bytes(2 << 30), "2 GiB");
        assert_eq!(format_bytes(1000), "1000 B");
        assert_eq!(format_bytes(3 << 29), "1.50 GiB");
    }
}
