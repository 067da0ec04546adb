//! The kernel's list syntax (`0-3,8,10-11`), used for CPU sets on the wire and for slot
//! selections typed by operators.

/// The longest range accepted, so that a typo can't allocate gigabytes.
pub const MAX_RANGE: u32 = 65_536;

/// `0-3,8,10-11` → [0, 1, 2, 3, 8, 10, 11]. On error, the part that is not a number or an
/// ascending range (callers say what it should have been).
pub fn parse_ranges(s: &str) -> Result<Vec<u32>, &str> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (Ok(a), Ok(b)) = (a.trim().parse::<u32>(), b.trim().parse::<u32>()) else {
                    return Err(part);
                };
                if a > b || b - a > MAX_RANGE {
                    return Err(part);
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().map_err(|_| part)?),
        }
    }
    Ok(out)
}

/// The inverse of [`parse_ranges`] for a sorted list.
pub fn format_ranges(items: &[u32]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < items.len() {
        let start = items[i];
        let mut end = start;
        while i + 1 < items.len() && items[i + 1] == end + 1 {
            i += 1;
            end = items[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_round_trip_and_name_the_bad_part() {
        assert_eq!(
            parse_ranges("0-3, 8,10-11").unwrap(),
            vec![0, 1, 2, 3, 8, 10, 11]
        );
        assert_eq!(format_ranges(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(parse_ranges("").unwrap(), Vec::<u32>::new());
        assert_eq!(parse_ranges("1,x").unwrap_err(), "x");
        assert_eq!(parse_ranges("3-1").unwrap_err(), "3-1");
        assert_eq!(parse_ranges("0-4000000000").unwrap_err(), "0-4000000000");
    }
}
